#!/usr/bin/env bash
# Runs every libFuzzer harness of tests/fuzz for a time budget and prints, per harness,
# the executions, the coverage (libFuzzer's edge count "cov" and feature count "ft") and
# the crashes found.
#
#   bash bench/fuzz.sh [SECONDS] [HARNESS...]     (default: 60 s each, every harness)
#   FUZZ_RUNS=10000000 bash bench/fuzz.sh 3600     a campaign: each harness until 10M
#                                                  executions or one hour, whichever is first
#
# Builds the `fuzz` preset (clang-14 with libFuzzer, ASan+UBSan) unless FUZZ_NO_BUILD=1.
# Each harness starts from its seeds (tests/fuzz/corpus/<name>) and grows a working corpus
# in build/fuzz/corpus/<name> (kept between runs). Inputs that crash, leak, time out or
# exceed the memory limit land in build/fuzz/findings/<name>/: every one is a bug; add it
# to tests/fuzz/corpus/<name>/ with a unit test naming the bug once it is fixed.
# Limits: -timeout (default 10 s per input: "bounded time"), -rss_limit_mb (2048: "bounded
# memory"), -max_len 65536. FUZZ_JOBS=N runs N harnesses at once (default 1). Exit status:
# 1 when any harness found a crash. FUZZ_REPORT_ONLY=1 prints the table of the last run's logs
# and runs nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
shift || true
HARNESSES=("$@")
[ ${#HARNESSES[@]} -eq 0 ] && HARNESSES=(gguf safetensors tokenizer chat_template openai_request http grammar json_schema)
BUILD=${FUZZ_BUILD:-build/fuzz}  # FUZZ_BUILD: another folder with tests/fuzz/fuzz_* (a long campaign on a copy)

if [ "${FUZZ_NO_BUILD:-0}" != "1" ] && [ "${FUZZ_REPORT_ONLY:-0}" != "1" ]; then
  cmake --preset fuzz >/dev/null || exit 2
  targets=()
  for h in "${HARNESSES[@]}"; do targets+=("fuzz_$h"); done
  cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" || exit 2
fi

# The real models' tokenizers join the tokenizer harness's fixtures when present.
MODELS=${TANDEM_MODELS:-$HOME/.cache/tandem/models}
toks=""
for m in smollm2-135m-instruct-q4_1.gguf qwen2.5-coder-0.5b-instruct-q4_k_m.gguf gemma3-270m-q4_k_m.gguf; do
  [ -f "$MODELS/$m" ] && toks="${toks:+$toks,}$MODELS/$m"
done
export TANDEM_FUZZ_TOKENIZER_MODELS=$toks
# The GGUF and safetensors seeds are binary and not committed: written here, as ctest's
# fuzz.seeds.gguf does.
python3 tests/fuzz/make_corpus.py --binary-only --out "$BUILD/seeds" --models "$MODELS" 2>/dev/null || exit 2
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local h=$1 work=$BUILD/corpus/$1 found=$BUILD/findings/$1 log=$BUILD/logs/$1.log
  rm -rf "$found"  # this run's findings only
  mkdir -p "$work" "$found" "$(dirname "$log")"
  # One process per harness (no -fork: the tokenizer harness loads real vocabularies at
  # start); the first crash ends that harness's run and is saved in $found.
  local seeds=("tests/fuzz/corpus/$h")
  [ -d "$BUILD/seeds/$h" ] && seeds+=("$BUILD/seeds/$h")
  local runs=()
  [ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
  "$BUILD/tests/fuzz/fuzz_$h" "$work" "${seeds[@]}" -max_total_time="$SECS" "${runs[@]}" -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$found/" >"$log" 2>&1
  echo $? >"$log.rc"
}

pids=()
[ "${FUZZ_REPORT_ONLY:-0}" = "1" ] && HARNESS_RUN=() || HARNESS_RUN=("${HARNESSES[@]}")
for h in "${HARNESS_RUN[@]}"; do
  run_one "$h" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "${FUZZ_JOBS:-1}" ]; do wait -n; done
done
wait

status=0
printf "%-16s %12s %8s %8s %8s %8s %8s  %s\n" harness executions exec/s cov ft corpus crashes "seconds / findings"
for h in "${HARNESSES[@]}"; do
  log=$BUILD/logs/$h.log
  # libFuzzer's status lines: "#N  NEW|REDUCE|pulse|DONE  cov: C ft: F corp: K/..."
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
  [ -z "$execs" ] && execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.*corp: ([0-9]+).*/\1/p' <<<"$last")
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -1)
  took=$(sed -nE 's/.*Done [0-9]+ runs in ([0-9]+) second.*/\1/p' "$log" | tail -1)
  crashes=$(find "$BUILD/findings/$h" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf "%-16s %12s %8s %8s %8s %8s %8s  %s\n" "$h" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes" \
    "${took:-(ended early)} s; $(cd "$BUILD/findings/$h" && ls crash-* leak-* timeout-* oom-* 2>/dev/null | head -3 | tr '\n' ' ')"
  [ "$crashes" -gt 0 ] && status=1
done
exit $status
