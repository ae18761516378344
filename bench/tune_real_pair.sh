#!/usr/bin/env bash
# `tandem tune` on the real pair (Qwen2.5-Coder 0.5B draft -> 1.5B target), on an
# adversarial draft (the same 0.5B with its token embeddings permuted: same size and speed,
# nearly never agrees) and with n-gram drafting. Each run measures plain decoding
# interleaved with the speculative configurations, so the speedups are side by side.
#
#   bash bench/tune_real_pair.sh [OUT_DIR]        (default /tmp/tandem-tune; ~45 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/tandem-tune}
M=${TANDEM_MODELS:-$HOME/.cache/tandem/models}
T=build/release/apps/tandem
TARGET=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
DRAFT=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
mkdir -p "$OUT"
[ -x "$T" ] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 1; }
[ -f "$TARGET" ] && [ -f "$DRAFT" ] || { echo "fetch models: python3 scripts/fetch_models.py --models qwen0.5b,qwen1.5b" >&2; exit 1; }

echo "== real pair" >&2
"$T" tune -m "$TARGET" -md "$DRAFT" --draft-max 1,2,3,4 --temps 0,0.7 --policies fixed,adaptive,goodput -n 48 \
  --out "$OUT/pair.json" --csv "$OUT/pair.csv" --plot "$OUT/pair.svg" --write-config "$OUT/pair_config.json" \
  --table -q | tee "$OUT/pair.txt"

echo "== adversarial draft" >&2
build/release/bench/bench_policies adversarial-draft "$DRAFT" "$OUT/adversarial-0.5b.gguf"
"$T" tune -m "$TARGET" -md "$OUT/adversarial-0.5b.gguf" --draft-max 2,4 --temps 0,0.7 --policies fixed,adaptive -n 32 \
  --out "$OUT/adversarial.json" --table -q | tee "$OUT/adversarial.txt"
rm -f "$OUT/adversarial-0.5b.gguf"

echo "== n-gram drafting" >&2
"$T" tune -m "$TARGET" --draft ngram --draft-max 1,2,4 --temps 0 --policies fixed,adaptive -n 48 \
  --out "$OUT/ngram.json" --table -q | tee "$OUT/ngram.txt"

# Where drafts agree well: editing and quoting prompts whose answers repeat their input.
echo "== editing prompts (bench/prompts_edit.jsonl): draft model, then n-gram" >&2
"$T" tune -m "$TARGET" -md "$DRAFT" --prompts bench/prompts_edit.jsonl --draft-max 2,4,6 --temps 0 \
  --policies fixed,adaptive -n 64 --out "$OUT/edit_pair.json" --table -q | tee "$OUT/edit_pair.txt"
"$T" tune -m "$TARGET" --draft ngram --prompts bench/prompts_edit.jsonl --draft-max 2,4,6 --temps 0 \
  --policies fixed,adaptive -n 64 --out "$OUT/edit_ngram.json" --table -q | tee "$OUT/edit_ngram.txt"
