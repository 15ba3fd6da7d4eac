#!/usr/bin/env bash
# Heavier tests (marked `slow`), run after the default suite when time allows.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -m slow -q
rc=$?
exit $rc
