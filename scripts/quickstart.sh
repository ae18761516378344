#!/usr/bin/env bash
# Fresh machine → running model: installs dependencies, fetches the default model
# (SmolLM2-135M-Instruct), builds tandem and generates from a prompt.
#   bash scripts/quickstart.sh ["prompt"] [extra tandem generate options...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=$(python3 scripts/fetch_models.py --models smollm2 | awk '/smollm2/ {print $2}')
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target tandem
prompt=${1:-"The three primary colors are"}
shift || true
./build/release/apps/tandem generate -m "$model" -p "$prompt" -n 64 --temp 0 "$@"
