#!/usr/bin/env bash
# Run a command with TMPDIR set to a new empty folder, removed when the command ends (pass, fail or Ctrl-C).
# Keeps test runs from leaving their temporary checkpoints behind. Usage: in_own_tmpdir.sh CMD [ARGS...]
set -euo pipefail
TMPDIR="$(mktemp -d)"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
"$@"
