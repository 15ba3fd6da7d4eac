#!/usr/bin/env bash
# Heavier tests (marked `slow`), run by .ci/run after the default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -m slow -q -n auto --dist loadfile
