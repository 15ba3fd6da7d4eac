#!/usr/bin/env bash
# Heavier tests (marked `slow`), run by .ci/run after the default suite.  One worker more
# than cores: several slow tests wait on subprocesses (4 host devices, 2 processes, XLA's
# default emitter), and the extra worker compiles while they wait.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=$(( $(nproc) + 1 ))
python -m pytest -m slow -q -n "$workers" --dist loadfile
