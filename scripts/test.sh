#!/usr/bin/env bash
# The test command (README, CI): installs dependencies, fetches the real models the
# model-level tests use, builds the release and the ASan+UBSan presets, and runs every test
# in both. A model test whose model is missing FAILS, naming the fetch command; it is only
# skipped when its model is outside the run's model set or TANDEM_ALLOW_SKIP=1 says so
# (tests/support/paths.hpp).
#   TANDEM_TEST_MODELS=smollm2,qwen0.5b  the model set: which models to fetch and test
#                                       (default: all; "none": no model tests)
#   TANDEM_ALLOW_SKIP=1                 tests of missing models skip instead of failing
# Stages, each timed (a summary at the end): release build and tests; ASan+UBSan build (clang,
# with the libFuzzer harnesses) and tests (the harnesses' corpora replayed among them); then,
# each within the time budget below, the 2-minute soak with faults, ThreadSanitizer over the
# threaded parts, and a short smoke of every fuzz harness.
#   TANDEM_SKIP_ASAN=1 TANDEM_SKIP_SOAK=1 TANDEM_SKIP_TSAN=1 TANDEM_SKIP_FUZZ=1   skip a stage
#   TANDEM_FUZZ_SMOKE_S=10              seconds of fuzzing per harness in the fuzz smoke
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
export TANDEM_TEST_MODELS=${TANDEM_TEST_MODELS:-all}

RUN_T0=$(date +%s)
SUMMARY=""
stage_start() { STAGE_T0=$(date +%s); STAGE=$1; echo "[test] ---- $1"; }
# The soak, TSan and fuzz stages come after the release and ASan ones, and each starts only
# if it can end within the run's budget (TANDEM_CI_BUDGET_MIN, 80 minutes: CI stops at 90),
# else it is reported as skipped, loudly, in the summary. They take up to about 4, 12 and 3
# minutes.
BUDGET_S=$(( ${TANDEM_CI_BUDGET_MIN:-80} * 60 ))
within_budget() {
  local elapsed=$(( $(date +%s) - RUN_T0 )) need=$(( $2 * 60 ))
  if [ $(( elapsed + need )) -gt "$BUDGET_S" ]; then
    echo "[test] ---- $1 SKIPPED: ${elapsed} s elapsed, about ${need} s more would pass the budget of ${BUDGET_S} s" >&2
    SUMMARY+=$(printf '%-34s %s' "$1" "SKIPPED (time budget)")$'\n'
    return 1
  fi
}
stage_end() {
  local took=$(( $(date +%s) - STAGE_T0 ))
  echo "[test] ---- $STAGE took $took s"
  SUMMARY+=$(printf '%-34s %6d s' "$STAGE" "$took")$'\n'
}
summary() {
  [ -n "${CAL_CACHE:-}" ] && rm -rf "$CAL_CACHE"
  echo "[test] stage times:"
  printf '%s' "$SUMMARY"
  echo "[test] total $(( $(date +%s) - RUN_T0 )) s"
}
trap summary EXIT

stage_start "setup and models"
bash scripts/setup.sh
if [ "$TANDEM_TEST_MODELS" != "none" ] && ! python3 scripts/fetch_models.py --models "$TANDEM_TEST_MODELS"; then
  if [ "${TANDEM_ALLOW_SKIP:-0}" = "1" ]; then
    echo "[test] WARNING: model fetch failed; TANDEM_ALLOW_SKIP=1: the tests of missing models will be skipped" >&2
  else
    echo "[test] ERROR: model fetch failed (see above); the tests of the missing models will FAIL." >&2
    echo "[test] Fix the fetch, or limit the run (TANDEM_TEST_MODELS=...) or accept skips (TANDEM_ALLOW_SKIP=1)." >&2
  fi
fi
# The models as Hugging Face folders (bf16 safetensors, tokenizer.json ...), converted from the
# fetched GGUFs once (stamped) for the model-folder tests (tests/python/test_hf_models.py).
hf_models=()
for m in qwen0.5b qwen1.5b smollm2 gemma3; do
  case ",${TANDEM_TEST_MODELS// /}," in *,all,* | *,$m,*) hf_models+=("$m") ;; esac
done
if [ ${#hf_models[@]} -gt 0 ]; then
  hf_list=$(IFS=,; echo "${hf_models[*]}")
  python3 scripts/gguf_to_hf.py --models "$hf_list" >/dev/null ||
    echo "[test] WARNING: converting $hf_list to Hugging Face folders failed; their tests will fail or convert again" >&2
fi
stage_end

# Where nvcc is installed, the release build also compiles the CUDA backend for the device
# (sm_80, sm_90), with warnings as errors; its kernels are tested under the SIMT emulator in
# both presets (docs/cuda.md). The ASan preset builds without the toolkit (TANDEM_CUDA=OFF),
# as a machine without one does.
stage_start "release build"
cmake --preset release -DTANDEM_CUDA_WERROR=ON >/dev/null
cmake --build --preset release -j "$JOBS"
stage_end
stage_start "release tests"
# Includes fuzz.replay.*: every harness over its corpus (tests/fuzz/corpus), without clang.
ctest --preset release -j "$JOBS"
stage_end

# The cost model the draft-loading test servers need, calibrated once by the release build
# for the sanitized ones (the cache key is the model files and the backend, not the build):
# calibrating takes over 8 minutes under TSan and about 2 under ASan. The release run's own
# servers calibrate afresh, so that path is tested there.
SMOL="${TANDEM_MODELS:-$HOME/.cache/tandem/models}/smollm2-135m-instruct-q4_1.gguf"
CAL_CACHE=""
calibration_seed() {
  if [ -z "$CAL_CACHE" ] && [ -f "$SMOL" ]; then
    CAL_CACHE=$(mktemp -d)
    TANDEM_CACHE=$CAL_CACHE build/release/apps/tandem generate -m "$SMOL" --model-draft "$SMOL" --draft model \
      --draft-max 4 --policy adaptive -n 1 -p "Hello" >/dev/null
  fi
}

if [ "${TANDEM_SKIP_ASAN:-0}" != "1" ]; then
  stage_start "asan build"
  # (Without the SIMDe-emulated AVX-512 kernels, TANDEM_AVX512_EMULATION=OFF in the preset: on
  # an AVX2 machine they were a fifth of this build, and the release run tests their bits; the
  # AVX-512 kernels run under ASan natively on the machines that have AVX-512.)
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$JOBS"
  stage_end
  stage_start "asan tests"
  # Under ASan the model set is SmolLM2 alone (when the run has it): the larger models take
  # many minutes there, and the release run covers them; the tests of the others say so.
  # The server test's waits are scaled, and it starts from the release build's calibration.
  calibration_seed
  asan_models=none
  case ",${TANDEM_TEST_MODELS// /}," in *,all,* | *,smollm2,*) asan_models=smollm2 ;; esac
  # The losslessness suite runs its configurations with fewer generations here: under the
  # sanitizers it checks the memory safety of those paths; the release run has the
  # statistics, and its power check (the injected-bias run) is not repeated. Its configurations
  # on the CUDA backend are left out too: the emulator under ASan takes minutes for too few
  # generations to test anything; the CUDA op, forward and scheduler tests cover those paths.
  # So is CudaGraphForward (two minutes under ASan: graphed == direct over long runs of
  # emulated passes, the same code the CudaGraph unit tests and the CUDA forward tests
  # run under ASan).
  # Every emulated CUDA buffer is its own heap allocation here (TANDEM_CUDA_SEPARATE_BUFFERS),
  # so ASan's redzones border each one: a kernel running past its buffer is caught.
  # The CUDA sampling tests likewise run a few hundred trials, without their χ². The op and
  # sampling tests' reruns with the block's threads in other orders (*_schedule) are left to
  # the release run: they look for order-dependent results, which ASan does not add to. So
  # are the verifiers' own χ² tests (hundreds of thousands of draws: TreeVerifier's joint
  # distributions and biased twin, Speculative's sampled output): their code runs under ASan
  # in the losslessness suite's configurations, chains and trees, rejection and coupled.
  TANDEM_TEST_CACHE_SEED=$CAL_CACHE TANDEM_TEST_MODELS=$asan_models TANDEM_TEST_TIME_SCALE=4 TANDEM_LOSSLESS_RUNS=500 \
    TANDEM_CUDA_SAMPLING_TRIALS=600 TANDEM_CUDA_SEPARATE_BUFFERS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset asan -j "$JOBS" \
    -E 'injected_bias|Lossless.*/cuda_|CudaGraphForward|_schedule$|TreeVerifier\..*(JointDistribution|BiasedVerifier)|Speculative\.SampledOutputFollowsTheTargetDistribution'
  stage_end
fi

# The soak with faults, 2 minutes (bench/soak.py; the 10-minute one is run by hand).
case ",${TANDEM_TEST_MODELS// /}," in *,all,* | *,smollm2,*) soak_model=1 ;; *) soak_model=0 ;; esac
if [ "${TANDEM_SKIP_SOAK:-0}" != "1" ] && [ "$soak_model" = 1 ] && within_budget soak 4; then
  stage_start "soak (2 min, SmolLM2, 64 streams)"
  python3 bench/soak.py --tandem build/release/apps/tandem --streams 64 --minutes 2 --pair smollm2
  stage_end
fi

# ThreadSanitizer over what runs threads: the thread pool, the scheduler and the server; and
# as the CUDA kernels' race checker (kernels/cuda/simt/simt.cpp): the emulator tells TSan only
# what orders a GPU's threads, so a missing barrier, or two blocks touching one word, is
# reported. Only the targets those tests need are built, without the toolkit (the emulated
# kernels are what runs here; nvcc's device code would only be compiled).
if [ "${TANDEM_SKIP_TSAN:-0}" != "1" ] && within_budget tsan 12; then
  stage_start "tsan"
  cmake --preset tsan >/dev/null
  cmake --build build/tsan -j "$JOBS" --target test_scheduler test_cpu_ops tandem simt_races test_cuda_ops test_cuda_sampling \
    test_cuda_greedy test_cuda_forward
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 exitcode=66"
  build/tsan/tests/test_cpu_ops --gtest_filter='ThreadPool*:CpuOps.PagedAttention*'
  # The race checker must catch each planted race and stay quiet on ordered kernels; then
  # every op kernel, the sampling and verification kernels, and whole forward passes (with
  # verification graphs and their padding lanes), blocks on two OS threads.
  ctest --test-dir build/tsan -R '^simt_races\.' --output-on-failure
  TANDEM_SIMT_WORKERS=2 build/tsan/tests/test_cuda_ops
  # (The sampling tests' statistics need thousands of trials; a few hundred show the races.)
  TANDEM_SIMT_WORKERS=2 TANDEM_CUDA_SAMPLING_TRIALS=300 build/tsan/tests/test_cuda_sampling
  TANDEM_SIMT_WORKERS=2 build/tsan/tests/test_cuda_greedy
  TANDEM_SIMT_WORKERS=2 build/tsan/tests/test_cuda_forward --gtest_filter='CudaForward.LogitsMatchTheCpuBackend'
  # Not the other forward tests nor the scheduler on the emulated CUDA backend: they run the
  # kernels above, and the emulator under TSan takes minutes for each of them.
  build/tsan/tests/test_scheduler --gtest_filter='-*Cuda*'
  if [ "$soak_model" = 1 ]; then
    # The server under TSan: concurrent clients, disconnects, pipelining, limits (timeouts,
    # connection limit, queue), preemption and SIGTERM with streams in flight. A report
    # makes the server exit 66, which the tests see.
    calibration_seed
    TANDEM_TEST_CACHE_SEED=$CAL_CACHE TANDEM_TEST_MODELS=smollm2 TANDEM_TEST_TIME_SCALE=4 \
      python3 tests/python/test_server.py --tandem build/tsan/apps/tandem \
      -k test_concurrent_clients -k test_client_disconnect -k test_keep_alive -k LimitsServer -k TightKvServer
  fi
  unset TSAN_OPTIONS
  stage_end
fi

# The libFuzzer harnesses, which the asan preset builds beside the tests (clang, ASan+UBSan,
# coverage on the parsers and the server) and whose corpora its ctest replayed: a short smoke
# of each (bench/fuzz.sh; long campaigns are run by hand).
if [ "${TANDEM_SKIP_FUZZ:-0}" != "1" ] && within_budget fuzz 3; then
  stage_start "fuzz smoke (${TANDEM_FUZZ_SMOKE_S:-10} s per harness)"
  # (Built already unless the ASan stage was skipped.)
  cmake --preset asan >/dev/null
  cmake --build build/asan -j "$JOBS" --target fuzz_gguf fuzz_safetensors fuzz_tokenizer fuzz_chat_template \
    fuzz_openai_request fuzz_http fuzz_grammar fuzz_json_schema
  FUZZ_BUILD=build/asan FUZZ_NO_BUILD=1 FUZZ_JOBS="$JOBS" bash bench/fuzz.sh "${TANDEM_FUZZ_SMOKE_S:-10}"
  stage_end
fi
