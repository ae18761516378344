#!/usr/bin/env bash
# The test command (README, CI): installs dependencies, fetches the real models the
# model-level tests use, builds the release and the ASan+UBSan presets, and runs every test
# in both. Tests whose model is missing say "model not downloaded" and are skipped.
#   TANDEM_TEST_MODELS=smollm2,qwen0.5b  which models to fetch (default: all)
#   TANDEM_SKIP_ASAN=1                  only the release preset
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

bash scripts/setup.sh
python3 scripts/fetch_models.py --models "${TANDEM_TEST_MODELS:-all}" || \
  echo "[test] WARNING: model fetch failed; model-level tests will be skipped"

cmake --preset release >/dev/null
cmake --build --preset release -j "$JOBS"
ctest --preset release -j "$JOBS"

if [ "${TANDEM_SKIP_ASAN:-0}" != "1" ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$JOBS"
  # Real-model tests are slow under ASan; the release run covers them.
  TANDEM_MODELS=/nonexistent ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --preset asan -j "$JOBS"
fi
