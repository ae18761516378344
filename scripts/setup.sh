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
  python3 python3-pip python3-venv  # venv: the Python package's install test (ctest python.package)
  librsvg2-bin  # rsvg-convert: tune's chart is rendered to PNG in a test (tests/test_tune.cpp)
  tmux  # tandem chat is tested in a real terminal (tests/python/test_chat_tmux.py)
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
# shapes (logprobs, n choices, tool calls) that this version parses. jsonschema: the
# independent check of schema-constrained outputs. scikit-build-core, pytest, mypy: the
# Python package's build backend (python/pyproject.toml; installed here so its install test
# needs no network) and its tests. kubernetes-validate, dockerfile-parse: deploy/validate.py.
# anthropic: the official client the server's Messages API is driven with, pinned likewise.
# torch, transformers, tokenizers, safetensors: the Hugging Face side of the model-folder tests
# (scripts/gguf_to_hf.py writes the folders; transformers on the CPU is the independent oracle
# of tests/python/test_hf_models.py, tokenizers the reference tokenizer), pinned.
OPENAI_VERSION=3.57.0
ANTHROPIC_VERSION=2.17.0
TRANSFORMERS_VERSION=5.25.0
PY_PKGS=("numpy<3" "gguf==0.17.1" "openai==$OPENAI_VERSION" "anthropic==$ANTHROPIC_VERSION" "jsonschema==4.26.0"
         "scikit-build-core>=0.10" "pytest>=7" "mypy>=1.5" "kubernetes-validate>=1.30" "dockerfile-parse>=2.0"
         "torch==2.15.0" "transformers==$TRANSFORMERS_VERSION" "tokenizers==0.23.3" "safetensors==0.8.0")
if ! $PY -c "import gguf, numpy, openai, anthropic, jsonschema, scikit_build_core, pytest, mypy, kubernetes_validate, dockerfile_parse, torch, transformers, tokenizers, safetensors; assert openai.__version__ == '$OPENAI_VERSION'; assert anthropic.__version__ == '$ANTHROPIC_VERSION'; assert transformers.__version__ == '$TRANSFORMERS_VERSION'" 2>/dev/null; then
  echo "[setup] installing Python test references and tools (${PY_PKGS[*]})"
  $PY -m pip install -q --disable-pip-version-check "${PY_PKGS[@]}" || \
  $PY -m pip install -q --disable-pip-version-check --break-system-packages "${PY_PKGS[@]}"
fi
echo "[setup] done"
