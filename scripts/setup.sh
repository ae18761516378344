#!/usr/bin/env bash
# Installs every system and Python dependency tandem needs to build and test.
# Idempotent: re-running is cheap. Debian (bookworm) packages only; Python test
# references come from PyPI. Run as root (CI and dev machines are root).
set -euo pipefail

APT_PKGS=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-dev libboost-json1.81-dev
  libspdlog-dev libfmt-dev libcli11-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsimde-dev
  clang-14 libclang-rt-14-dev  # the fuzz preset: clang with libFuzzer (tests/fuzz)
  python3 python3-pip
)

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] system packages present"
fi

# Python packages used only as independent references in tests and by scripts.
PY=${PYTHON:-python3}
# gguf + numpy: independent references (dequantization, forward pass); openai: the official
# client the server tests drive the HTTP endpoint with, pinned: the tests check the exact
# shapes (logprobs, n choices) that this version parses.
OPENAI_VERSION=3.57.0
if ! $PY -c "import gguf, numpy, openai; assert openai.__version__ == '$OPENAI_VERSION'" 2>/dev/null; then
  echo "[setup] installing Python test references (gguf, numpy, openai)"
  $PY -m pip install -q --disable-pip-version-check "numpy<3" "gguf==0.17.1" "openai==$OPENAI_VERSION" || \
  $PY -m pip install -q --disable-pip-version-check --break-system-packages "numpy<3" "gguf==0.17.1" "openai==$OPENAI_VERSION"
fi
echo "[setup] done"
