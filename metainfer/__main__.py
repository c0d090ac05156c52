from metainfer.cli import main

main()
