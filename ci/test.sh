#!/usr/bin/env bash
# Runs the README's test command verbatim (the line inside the test-command block), so
# CI can never drift from what a new user is told to type.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=$(awk '/<!-- test-command -->/{f=1; next} f && /^```/{if (s) exit; s=1; next} f && s {print; exit}' README.md)
if [ -z "$cmd" ]; then
  echo "ci/test.sh: no test command found in README.md" >&2
  exit 2
fi
echo "+ $cmd"
eval "$cmd"
