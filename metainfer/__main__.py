from metainfer.entrypoints.cli import main

main()
