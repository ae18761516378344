#!/usr/bin/env bash
# The GPU run for the CUDA backend (docs/cuda.md): one prepared script for an H200 lent
# for ~15 minutes, finishing in <= 8 minutes. Writes JSON, logs and a table into the
# results folder given as its argument.
#
#   bench/gpu_check.sh [--dry-run] RESULTS_DIR [PACK_DIR]
#
# PACK_DIR (the device tool's $OUT, which brings back at most 8 files): summary.md,
# summary.json, log.txt and results.tar.gz (everything in RESULTS_DIR) are copied there.
#
# On a lent machine (bare: nvcc, CMake, ninja, PyTorch, the driver; no Debian packages, no
# network) it runs the binaries of scripts/gpu_bundle.sh, carried in build/gpu-bundle with
# the shared libraries they need (TANDEM_CUDA_BUILD picks another build). Real GGUFs do not
# travel: where $TANDEM_MODELS lacks them, random-weight models of the same shapes and
# weight types are written first (tandem_make_fixture --shape) and timed instead; the
# summary says which were used.
#
# --dry-run: the same script on a machine without a GPU, to prove it before a device run:
# everything on the emulated backend (cuda-emulated), small shapes, tiny models, no
# nvidia-smi or compute-sanitizer.
#
# Steps (each with its own time limit; a failing step is recorded and the next one runs):
#   1. device facts (nvidia-smi)
#   2. build: reuses build/cuda when its binaries are there (built on the CPU machine with
#      `cmake --preset cuda && cmake --build --preset cuda` and carried along), else builds
#      the CUDA targets there with -j16
#   3. the CUDA tests natively (TANDEM_CUDA_TEST_DEVICE=1): every op vs the CPU backend,
#      batch invariance, the tiny-model forward tests, device argmax and greedy verifier,
#      CUDA graphs (capture, replay == direct, forbidden calls refused by CUDA itself,
#      graphed decode passes bit-identical to direct ones)
#   4. compute-sanitizer memcheck (small cases, every buffer its own allocation), racecheck and synccheck (attention, matmul)
#   5. benchmarks: copy bandwidth, matmul per weight type (GB/s, T(M)/T(1)), the quantized
#      matmul at M = 1..512 on tensor cores next to the opt-in dequantize + cuBLAS path
#      (int8 TOPS, the ratio at each M), and for each
#      real model present in $TANDEM_MODELS (default ~/.cache/tandem/models) batch-1
#      decode tok/s, weight GB/s as a fraction of copy bandwidth, T(n)/T(1) for n = 1..16;
#      for the 0.5B draft and SmolLM2 the batch-1 decode again with CUDA graphs off
#      (TANDEM_CUDA_GRAPHS=0): batch-1 decode is a graphed pass by default; for the 1.5B
#      T(n) again with int8 tensor cores from 2 tokens (TANDEM_CUDA_MMA_MIN_TOKENS=2; the
#      same bits), beside __dp4a's below 17
#   6. the engine on the device (when the `tandem` binary is there): the Qwen pair, greedy,
#      plain vs speculative (draft model, k = 4) on code and chat prompts: tokens must be
#      identical, and tok/s of each; then constrained to one JSON object (--json-object: the
#      grammar's masks applied on the device), plain vs speculative, the same check; then with
#      5 logprobs a token (reached on the device with each verdict), the same tokens and the
#      same logprobs
#   7. HF transformers assisted generation (generate(assistant_model=...)) on the same pair
#      and prompts (bench/hf_assisted.py; GGUFs through gguf_file=), next to step 6's figures
#   8. the server on the device at 1/2/8/32/128 streams, greedy and T = 0.8, speculation off
#      and under the step budget (goodput), with the ratio at each (bench/serve_matrix.py
#      --server-args '--device cuda ...')
# A step that did not run (no models, no torch, out of time) is listed in the summary.
set -uo pipefail

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
OUT=${1:?usage: bench/gpu_check.sh [--dry-run] RESULTS_DIR [PACK_DIR]}
PACK=${2:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${TANDEM_CUDA_BUILD:-}" ]; then BUILD=$(cd "$TANDEM_CUDA_BUILD" && pwd)
elif [ -d "$ROOT/build/gpu-bundle" ]; then BUILD=$ROOT/build/gpu-bundle
else BUILD=$ROOT/build/cuda; fi
MODELS=${TANDEM_MODELS:-$HOME/.cache/tandem/models}
DEVICE=cuda
SIZE_ARGS=()
if [ "$DRY" = 1 ]; then DEVICE=cuda-emulated; SIZE_ARGS=(--small); fi
# The bundle's own libraries first, then the machine's cuBLAS (the toolkit's, or PyTorch's
# nvidia-cublas wheel).
CUBLAS_DIRS=$(python3 -c 'import glob, os, nvidia; print(":".join(glob.glob(os.path.join(list(nvidia.__path__)[0], "cu*", "lib")) + glob.glob(os.path.join(list(nvidia.__path__)[0], "cublas", "lib"))))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$BUILD/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${CUBLAS_DIRS:+:$CUBLAS_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
START=$(date +%s)
SUMMARY="$OUT/summary.json"
TABLE="$OUT/summary.md"
export PATH="/usr/local/cuda/bin:$PATH"

elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[gpu_check +$(elapsed)s] $*" | tee -a "$OUT/log.txt"; }

declare -a STEP_NAMES=() STEP_RCS=() STEP_SECS=()
# step NAME LIMIT_S CMD...: runs CMD with a time limit, output into NAME.out.
step() {
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  log "$name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.out" 2>&1
  local rc=$?
  STEP_NAMES+=("$name")
  STEP_RCS+=("$rc")
  STEP_SECS+=("$(( $(date +%s) - t0 ))")
  log "$name: rc=$rc ($(( $(date +%s) - t0 ))s)"
  return $rc
}

# 1. device
if [ "$DRY" = 1 ]; then
  step device 30 echo "dry run: no device, the emulated backend"
else
  step device 30 nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,compute_cap --format=csv
  nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1 || true
fi

# 2. build. Carried binaries need this machine's driver to support the toolkit they were
# built with (CUDA 13: driver >= 580) and libcudart/libcublas .so.13 on the loader path; a
# one-line probe (bench_cuda opening the device) decides, else the CUDA targets are built
# here with this machine's nvcc.
BINS=(tests/test_cuda_ops tests/test_cuda_forward tests/test_cuda_greedy tests/test_cuda_sampling tests/test_simt
      tests/test_cuda_graph tests/test_cuda_graph_forward bench/bench_cuda tandem_make_fixture)
have_bins() { for b in "${BINS[@]}"; do [ -x "$1/$b" ] || return 1; done; }
probe() { "$1/bench/bench_cuda" --device "$DEVICE" --gpu-mem 64M --small >"$OUT/probe.out" 2>&1; }
build_here() {
  BUILD=$ROOT/build/cuda-here
  step configure 60 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON \
    -DTANDEM_CUDA_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="80-real;90-real;90-virtual" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)"
  step build 240 ninja -C "$BUILD" -j16 test_cuda_ops test_cuda_forward test_cuda_greedy test_cuda_sampling test_simt \
    test_cuda_graph test_cuda_graph_forward bench_cuda tandem tandem_make_fixture
}
if have_bins "$BUILD" && probe "$BUILD"; then
  log "build: reusing $BUILD ($(head -c 200 "$OUT/probe.out"))"
else
  have_bins "$BUILD" && log "carried binaries do not run here: $(head -c 300 "$OUT/probe.out"); ldd: $(ldd "$BUILD/bench/bench_cuda" 2>&1 | grep 'not found' | tr '\n' ' ')"
  if command -v nvcc >/dev/null; then build_here; else log "no nvcc on this machine: cannot build"; fi
fi

# 3. tests on the device
[ "$DRY" = 1 ] || export TANDEM_CUDA_TEST_DEVICE=1
if [ "$DRY" = 1 ]; then
  # The release suite runs these binaries whole on the emulator; the dry run proves the steps
  # with a sixth of each (GoogleTest's sharding).
  export GTEST_TOTAL_SHARDS=6 GTEST_SHARD_INDEX=0
  log "dry run: one shard in 6 of each test binary (ctest runs them whole)"
fi
step test_cuda_ops 90 "$BUILD/tests/test_cuda_ops" --gtest_output=json:"$OUT/test_cuda_ops.json"
step test_cuda_forward 60 "$BUILD/tests/test_cuda_forward" --gtest_output=json:"$OUT/test_cuda_forward.json"
step test_cuda_greedy 30 "$BUILD/tests/test_cuda_greedy" --gtest_output=json:"$OUT/test_cuda_greedy.json"
step test_cuda_sampling 30 "$BUILD/tests/test_cuda_sampling" --gtest_output=json:"$OUT/test_cuda_sampling.json"
step test_cuda_graph 30 "$BUILD/tests/test_cuda_graph" --gtest_output=json:"$OUT/test_cuda_graph.json"
step test_cuda_graph_forward 60 "$BUILD/tests/test_cuda_graph_forward" --gtest_output=json:"$OUT/test_cuda_graph_forward.json"
# With every launch checked (cudaGetLastError + synchronize): an error names its op.
TANDEM_CUDA_CHECK_LAUNCHES=1 step test_cuda_ops_checked 60 "$BUILD/tests/test_cuda_ops" \
  --gtest_filter='CudaOps.*:-*LongContexts*'
# Programmatic dependent launch (TANDEM_CUDA_PDL=1: each kernel may be scheduled before the one
# it follows ends and waits for it in its first statement): the passes' bits, graphed and not.
TANDEM_CUDA_PDL=1 step test_cuda_forward_pdl 60 "$BUILD/tests/test_cuda_forward" \
  --gtest_output=json:"$OUT/test_cuda_forward_pdl.json"
TANDEM_CUDA_PDL=1 step test_cuda_graph_forward_pdl 60 "$BUILD/tests/test_cuda_graph_forward" \
  --gtest_output=json:"$OUT/test_cuda_graph_forward_pdl.json"

# 4. compute-sanitizer on the small cases
SMALL='CudaOps.GetRows*:CudaOps.RmsNorm:CudaOps.AddMul*:CudaOps.KvStore*:CudaOps.MatmulShared*:CudaOps.MatmulGemm*:CudaOps.MatmulKernelsAreInterchangeable*:CudaOps.PagedAttentionF16:CudaOps.PagedAttentionSlidingWindowAndSoftcap:CudaOps.PagedAttentionRejectsBadTables'
if [ "$DRY" = 1 ]; then
  log "dry run: compute-sanitizer skipped"
elif command -v compute-sanitizer >/dev/null; then
  # Every buffer its own cudaMalloc: an overrun inside the arena would land in a neighbour.
  TANDEM_CUDA_SEPARATE_BUFFERS=1 step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
    "$BUILD/tests/test_cuda_ops" --gtest_filter="$SMALL:CudaOps.NormAttentionInputs*:CudaOps.AttentionResidual*"
  step racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 99 "$BUILD/tests/test_cuda_ops" \
    --gtest_filter='CudaOps.MatmulShared*:CudaOps.MatmulKernelsAreInterchangeable*:CudaOps.PagedAttentionF16:CudaOps.RmsNorm'
  step synccheck 45 compute-sanitizer --tool synccheck --error-exitcode 99 "$BUILD/tests/test_cuda_ops" \
    --gtest_filter='CudaOps.MatmulShared*:CudaOps.PagedAttentionF16'
  # The sampling kernels' shared histograms and scans (one block per row).
  step racecheck_sampling 60 compute-sanitizer --tool racecheck --error-exitcode 99 "$BUILD/tests/test_cuda_sampling" \
    --gtest_filter='CudaSampling.MakeProbs*:CudaSampling.Coupled*:CudaSampling.LogprobRows*'
  TANDEM_CUDA_SEPARATE_BUFFERS=1 step memcheck_graphs 60 compute-sanitizer --tool memcheck --error-exitcode 99 "$BUILD/tests/test_cuda_graph" \
    --gtest_filter='CudaGraph.Replayed*:CudaGraph.Forbidden*'
else
  log "compute-sanitizer not found: skipped"
fi
unset TANDEM_CUDA_TEST_DEVICE GTEST_TOTAL_SHARDS GTEST_SHARD_INDEX

# 5. benchmarks (the dry run proves each with a few repetitions: its times mean nothing)
OPS_REPS=20
[ "$DRY" = 1 ] && OPS_REPS=3
step bench_ops 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 8G --ops --reps "$OPS_REPS" "${SIZE_ARGS[@]}"
cp "$OUT/bench_ops.out" "$OUT/bench_ops.json" 2>/dev/null || true
# The quantized matmul from 1 to 512 tokens: tensor cores (the default, batch invariant) and
# the opt-in dequantize + cuBLAS SGEMM path for every M, side by side.
step bench_gemm 90 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 8G --gemm --reps 10 "${SIZE_ARGS[@]}"
cp "$OUT/bench_gemm.out" "$OUT/bench_gemm.json" 2>/dev/null || true
step bench_gemm_cublas 90 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 8G --gemm --reps 10 --gemm-min-tokens 1 \
  "${SIZE_ARGS[@]}"
cp "$OUT/bench_gemm_cublas.out" "$OUT/bench_gemm_cublas.json" 2>/dev/null || true
# Paged attention: a 512-token prompt chunk in query tiles against the same tokens untiled,
# and decode over 4096 positions (K/V GB/s).
step bench_attention 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 8G --attention --reps 10 "${SIZE_ARGS[@]}"
cp "$OUT/bench_attention.out" "$OUT/bench_attention.json" 2>/dev/null || true
# Real GGUFs where $MODELS has them, else random-weight twins of their shapes and types
# under the same names (in a dry run: tiny ones).
TWINS=${TANDEM_GPU_CHECK_MODELS:-/tmp/tandem-gpu-check-models}
declare -A SHAPE=([qwen2.5-coder-1.5b-instruct-q4_k_m.gguf]=qwen2.5-coder-1.5b
                  [qwen2.5-coder-0.5b-instruct-q4_k_m.gguf]=qwen2.5-coder-0.5b
                  [smollm2-135m-instruct-q4_1.gguf]=smollm2-135m
                  [gemma3-270m-q4_k_m.gguf]=gemma3-270m)
RANDOM_WEIGHTS=0
for f in "${!SHAPE[@]}"; do
  [ -f "$MODELS/$f" ] && [ "$DRY" = 0 ] && continue
  RANDOM_WEIGHTS=1
  mkdir -p "$TWINS"
  shape=${SHAPE[$f]}
  [ "$DRY" = 1 ] && shape=tiny
  step "twin_${SHAPE[$f]}" 120 "$BUILD/tandem_make_fixture" --shape "$shape" "$TWINS/$f"
done
if [ "$RANDOM_WEIGHTS" = 1 ]; then
  for f in "${!SHAPE[@]}"; do [ -f "$TWINS/$f" ] || { [ -f "$MODELS/$f" ] && ln -sf "$MODELS/$f" "$TWINS/$f"; }; done
  MODELS=$TWINS
  echo '{"random_weights": true}' >"$OUT/models.json"
  log "models: random-weight twins of the real shapes in $TWINS"
fi
export TANDEM_MODELS=$MODELS
CTX=256
[ "$DRY" = 1 ] && CTX=32
for f in qwen2.5-coder-1.5b-instruct-q4_k_m.gguf qwen2.5-coder-0.5b-instruct-q4_k_m.gguf smollm2-135m-instruct-q4_1.gguf \
         gemma3-270m-q4_k_m.gguf; do
  [ -f "$MODELS/$f" ] || { log "model $f not in $MODELS: skipped"; continue; }
  [ "$(elapsed)" -lt 420 ] || { log "time budget: skipping $f"; continue; }
  name="bench_model_${f%%.gguf}"
  step "$name" 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 16G -m "$MODELS/$f" --ctx "$CTX" --nmax 16 --reps 5
  cp "$OUT/$name.out" "$OUT/$name.json" 2>/dev/null || true
  # Verification passes of 2..16 tokens run __dp4a below TANDEM_CUDA_MMA_MIN_TOKENS (17) and
  # int8 tensor cores from there on, with the same bits: the 1.5B again with tensor cores from
  # 2 tokens, so that the summary sets the two T(n) side by side.
  case $f in qwen2.5-coder-1.5b*)
    TANDEM_CUDA_MMA_MIN_TOKENS=2 step "${name}_mma_from_2" 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" \
      --gpu-mem 16G -m "$MODELS/$f" --ctx "$CTX" --nmax 16 --reps 5
    cp "$OUT/${name}_mma_from_2.out" "$OUT/${name}_mma_from_2.json" 2>/dev/null || true
    # The same with programmatic dependent launch (graphs on, as by default).
    TANDEM_CUDA_PDL=1 step "${name}_pdl" 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 16G \
      -m "$MODELS/$f" --ctx "$CTX" --nmax 16 --reps 5
    cp "$OUT/${name}_pdl.out" "$OUT/${name}_pdl.json" 2>/dev/null || true
    # Where a pass's time goes, op by op (graphs off: a replayed graph cannot be broken down).
    step "${name}_profile" 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 16G -m "$MODELS/$f" \
      --ctx "$CTX" --nmax 1 --reps 5 --profile
    cp "$OUT/${name}_profile.out" "$OUT/${name}_profile.json" 2>/dev/null || true ;;
  esac
  # Batch-1 decode is a graphed pass (docs/cuda.md, "CUDA graphs"); the small models again without.
  case $f in qwen2.5-coder-0.5b*|smollm2*)
    TANDEM_CUDA_GRAPHS=0 step "${name}_graphs_off" 60 "$BUILD/bench/bench_cuda" --device "$DEVICE" --gpu-mem 16G \
      -m "$MODELS/$f" --ctx "$CTX" --nmax 1 --reps 20
    cp "$OUT/${name}_graphs_off.out" "$OUT/${name}_graphs_off.json" 2>/dev/null || true ;;
  esac
done

# 6. the engine: plain vs speculative on the Qwen pair (greedy: the same tokens)
TARGET=$MODELS/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
DRAFT=$MODELS/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
PROMPTS=("def quicksort(arr):" "Write a Python function that parses an ISO 8601 date and returns a datetime."
         "Explain in two sentences what a paged KV cache is.")
if [ -x "$BUILD/apps/tandem" ] && [ -f "$TARGET" ] && [ -f "$DRAFT" ] && [ "$(elapsed)" -lt 440 ]; then
  i=0
  for p in "${PROMPTS[@]}"; do
    step "engine_plain_$i" 60 "$BUILD/apps/tandem" generate -m "$TARGET" --device "$DEVICE" --gpu-mem 8G -n 128 --temp 0 \
      --draft none --json -p "$p"
    step "engine_spec_$i" 60 "$BUILD/apps/tandem" generate -m "$TARGET" -md "$DRAFT" --device "$DEVICE" --gpu-mem 8G -n 128 \
      --temp 0 --draft model --draft-max 4 --json -p "$p"
    i=$((i + 1))
  done
  step engine_json_plain 60 "$BUILD/apps/tandem" generate -m "$TARGET" --device "$DEVICE" --gpu-mem 8G -n 128 \
    --temp 0 --draft none --json-object --json -p "${PROMPTS[1]}"
  step engine_json_spec 60 "$BUILD/apps/tandem" generate -m "$TARGET" -md "$DRAFT" --device "$DEVICE" --gpu-mem 8G \
    -n 128 --temp 0 --draft model --draft-max 4 --json-object --json -p "${PROMPTS[1]}"
  step engine_logprobs_plain 60 "$BUILD/apps/tandem" generate -m "$TARGET" --device "$DEVICE" --gpu-mem 8G -n 64 \
    --temp 0 --draft none --logprobs 5 --json -p "${PROMPTS[2]}"
  step engine_logprobs_spec 60 "$BUILD/apps/tandem" generate -m "$TARGET" -md "$DRAFT" --device "$DEVICE" --gpu-mem 8G \
    -n 64 --temp 0 --draft model --draft-max 4 --logprobs 5 --json -p "${PROMPTS[2]}"
else
  log "engine step skipped (no $BUILD/apps/tandem, no Qwen pair in $MODELS, or out of time)"
fi

# 7. the peers' figure: HF transformers assisted generation on the same pair and prompts
#    (torch and transformers are in the device image; gguf_file= also needs the gguf module).
if [ "$RANDOM_WEIGHTS" = 0 ] && [ -f "$TARGET" ] && [ -f "$DRAFT" ] && [ "$(elapsed)" -lt 330 ]; then
  if python3 -c "import torch, transformers, gguf" > "$OUT/hf_probe.out" 2>&1; then
    step hf_assisted 120 python3 "$ROOT/bench/hf_assisted.py" --target "$TARGET" --draft "$DRAFT" -n 128 \
      --device cuda --json "$OUT/hf_assisted.json" -p "${PROMPTS[0]}" -p "${PROMPTS[1]}" -p "${PROMPTS[2]}"
  else
    log "hf_assisted skipped: $(tail -n 1 "$OUT/hf_probe.out")"
  fi
fi

# 8. the server on the GPU at 1/2/8/32/128 streams, greedy and sampled, speculation off and
#    under the step budget (bench/serve_matrix.py).
if [ "$RANDOM_WEIGHTS" = 0 ] && [ -x "$BUILD/apps/tandem" ] && [ -f "$TARGET" ] && [ -f "$DRAFT" ] && [ "$(elapsed)" -lt 400 ]; then
  step serve_matrix 150 python3 "$ROOT/bench/serve_matrix.py" --tandem "$BUILD/apps/tandem" --pair qwen \
    --concurrency 1,2,8,32,128 --temperatures 0,0.8 --categories all --max-tokens 64 --waves 1 -t 4 \
    --policies goodput --out "$OUT/serve_matrix.json" --server-args "--device cuda --gpu-mem 24G --kv-mem 8GiB"
fi

# Summary: every step's rc and time, test counts, and the benchmark JSON files.
python3 - "$OUT" "${#STEP_NAMES[@]}" "${STEP_NAMES[@]}" "${STEP_RCS[@]}" "${STEP_SECS[@]}" <<'PY'
import glob, json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
names, rcs, secs = sys.argv[3:3 + n], sys.argv[3 + n:3 + 2 * n], sys.argv[3 + 2 * n:3 + 3 * n]
steps = [{"step": a, "rc": int(b), "seconds": int(c)} for a, b, c in zip(names, rcs, secs)]
tests = {}
for f in glob.glob(os.path.join(out, "test_*.json")):
    try:
        j = json.load(open(f))
        tests[os.path.basename(f)[:-5]] = {"tests": j.get("tests"), "failures": j.get("failures")}
    except Exception as e:
        tests[os.path.basename(f)] = {"error": str(e)}
bench = {}
for f in glob.glob(os.path.join(out, "bench_*.json")):
    try:
        bench[os.path.basename(f)[:-5]] = json.loads(open(f).read().strip().splitlines()[-1])
    except Exception as e:
        bench[os.path.basename(f)] = {"error": str(e)}
def plain_vs_spec(plain_out, spec_out):
    """Two `tandem generate --json` runs of one prompt: the same tokens, tok/s of each."""
    last = lambda name: json.loads([l for l in open(os.path.join(out, name)) if l.startswith("{")][-1])
    plain, spec = last(plain_out), last(spec_out)
    tok_s = lambda r: r["timings"]["decode_tokens_per_s"]
    r = {"prompt": plain["prompt"], "same_tokens": plain["tokens"] == spec["tokens"], "tokens": len(plain["tokens"]),
         "plain_tok_s": tok_s(plain), "spec_tok_s": tok_s(spec), "speedup": tok_s(spec) / max(tok_s(plain), 1e-9)}
    if "logprobs" in plain:  # (--logprobs: one entry a token, the same bits however it was drafted)
        r["same_logprobs"] = plain["logprobs"] == spec.get("logprobs") and len(plain["logprobs"]) == len(plain["tokens"])
    return r
engine = []
for f in sorted(glob.glob(os.path.join(out, "engine_plain_*.out"))):
    i = f.rsplit("_", 1)[1][:-4]
    try:
        engine.append(plain_vs_spec(f"engine_plain_{i}.out", f"engine_spec_{i}.out"))
    except Exception as e:
        engine.append({"prompt_index": i, "error": str(e)})
constrained = None  # the same, with one JSON object's grammar masking the rows on the device
if os.path.exists(os.path.join(out, "engine_json_plain.out")):
    try:
        constrained = plain_vs_spec("engine_json_plain.out", "engine_json_spec.out")
    except Exception as e:
        constrained = {"error": str(e)}
logprobs = None  # the same, with 5 logprobs a token reached on the device
if os.path.exists(os.path.join(out, "engine_logprobs_plain.out")):
    try:
        logprobs = plain_vs_spec("engine_logprobs_plain.out", "engine_logprobs_spec.out")
    except Exception as e:
        logprobs = {"error": str(e)}
def read_json(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
hf, serve = read_json("hf_assisted.json"), read_json("serve_matrix.json")
random_weights = bool((read_json("models.json") or {}).get("random_weights"))
summary = {"steps": steps, "tests": tests, "bench": bench, "engine": engine, "constrained": constrained, "logprobs": logprobs,
           "hf_assisted": hf, "serve": serve,
           "random_weight_models": random_weights,
           "not_run": [n for n, v in (("HF assisted generation", hf), ("server at 1/8/32/128 streams", serve)) if v is None]}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
with open(os.path.join(out, "summary.md"), "w") as t:
    if random_weights:
        t.write("models: random-weight twins of the real shapes and weight types (speeds only; "
                "acceptance and speculation figures mean nothing)\n\n")
    t.write("| step | rc | s |\n|---|---|---|\n")
    for s in steps:
        t.write(f"| {s['step']} | {s['rc']} | {s['seconds']} |\n")
    ops = bench.get("bench_ops", {}).get("ops", {})
    if ops:
        t.write(f"\ncopy bandwidth: {bench['bench_ops'].get('copy_gbps', 0):.0f} GB/s; matmul {ops.get('rows')}x{ops.get('cols')}\n\n")
        t.write("| type | M=1 ms | GB/s | of copy | T(16)/T(1) |\n|---|---|---|---|---|\n")
        for k, v in ops.items():
            if isinstance(v, dict):
                t.write(f"| {k} | {v['m1_ms']:.4f} | {v['weight_gbps']:.0f} | {v['fraction_of_copy']:.2f} | {v['t_rel'][-1]:.2f} |\n")
    gm, gc = bench.get("bench_gemm", {}).get("gemm"), bench.get("bench_gemm_cublas", {}).get("gemm")
    if gm:
        t.write(f"\nmatmul {gm['rows']}x{gm['cols']}, tera-operations/s by M (int8 tensor cores, TF32 for BF16; cuBLAS path; ratio)\n\n")
        t.write("| type | " + " | ".join(f"M={m}" for m in gm["m"]) + " |\n|---|" + "---|" * len(gm["m"]) + "\n")
        for k, v in gm.items():
            if isinstance(v, dict):
                c = (gc or {}).get(k, {}).get("tops")
                cells = [f"{a:.1f}" + (f"; {b:.1f}; {a / max(b, 1e-9):.2f}x" if c else "") for a, b in zip(v["tops"], c or v["tops"])]
                t.write(f"| {k} | " + " | ".join(cells) + " |\n")
    at = bench.get("bench_attention", {}).get("attention")
    if at:
        t.write(f"\npaged attention (12/2 heads of 128, F16): {at['prefill_tokens']} prompt tokens of one sequence "
                f"{at['one_sequence_ms']:.3f} ms, as separate sequences {at['separate_sequences_ms']:.3f} ms "
                f"(query tiles {at['query_tile_gain']:.2f}x); decode over {at['decode_context']} positions "
                f"{at['decode_ms']:.3f} ms, K/V {at['decode_kv_gbps']:.0f} GB/s\n")
    for k, v in bench.items():
        m = v.get("model") if isinstance(v, dict) else None
        if m and not k.endswith(("_graphs_off", "_mma_from_2", "_profile", "_pdl")):
            t.write(f"\n{os.path.basename(m['path'])}: decode {m['decode_tok_s']:.1f} tok/s, weights {m['weight_gbps']:.0f} GB/s "
                    f"({m['fraction_of_copy']:.2f} of copy), prefill {m['prefill_tok_s']:.0f} tok/s "
                    f"({m.get('launches_per_layer', -1):.1f} launches a layer), "
                    f"T(16)/T(1) {m['t_ms'][-1] / m['t_ms'][0]:.2f}\n")
            mma = bench.get(k + "_mma_from_2", {}).get("model")
            if mma:
                pick = [n for n in (2, 4, 8, 16) if n <= len(m["t_ms"]) and n <= len(mma["t_ms"])]
                rel = lambda t: ", ".join(f"{t[n - 1] / t[0]:.2f}" for n in pick)
                t.write(f"  T(n)/T(1) for n = {', '.join(map(str, pick))}: __dp4a below 17 tokens {rel(m['t_ms'])}; "
                        f"tensor cores from 2 tokens {rel(mma['t_ms'])}\n")
            pdl = bench.get(k + "_pdl", {}).get("model")
            if pdl:
                t.write(f"  programmatic dependent launch (TANDEM_CUDA_PDL=1): decode {pdl['decode_tok_s']:.1f} tok/s "
                        f"({pdl['decode_tok_s'] / max(m['decode_tok_s'], 1e-9):.2f}x), T(16)/T(1) "
                        f"{pdl['t_ms'][-1] / pdl['t_ms'][0]:.2f}, prefill {pdl['prefill_tok_s']:.0f} tok/s\n")
            pr = bench.get(k + "_profile", {}).get("profile")
            if pr:
                n = max(pr["passes"], 1)
                dec, ver, pre = ({o["op"]: o for o in pr[s]} for s in ("decode", "verify", "prefill"))
                t.write(f"\n  time by op, graphs off: ms a pass (launches a pass) in decode, verification of "
                        f"{pr['verify_tokens']} tokens, prefill of {pr['prefill_tokens']}; a decode matmul's weight "
                        "GB/s\n\n  | op | decode | decode GB/s | verify | prefill |\n  |---|---|---|---|---|\n")
                cell = lambda d, op, per: f"{d[op]['ms'] / per:.3f} ({d[op]['count'] / per:g})" if op in d else "-"
                gbs = lambda o: f"{o['weight_bytes'] / max(o['ms'], 1e-9) / 1e6:.0f}" if o.get("weight_bytes") else "-"
                for op in dict.fromkeys(list(dec) + list(ver) + list(pre)):
                    t.write(f"  | {op} | {cell(dec, op, n)} | {gbs(dec[op]) if op in dec else '-'} | {cell(ver, op, n)} | "
                            f"{cell(pre, op, 1)} |\n")
            off = bench.get(k + "_graphs_off", {}).get("model")
            if off:
                t.write(f"  batch-1 decode with CUDA graphs {m['decode_tok_s']:.1f} tok/s, without {off['decode_tok_s']:.1f} tok/s "
                        f"({m['decode_tok_s'] / max(off['decode_tok_s'], 1e-9):.2f}x)\n")
    if engine:
        t.write("\n| prompt | same tokens | plain tok/s | speculative tok/s | speedup |\n|---|---|---|---|---|\n")
        for e in engine:
            if "error" in e:
                t.write(f"| {e.get('prompt_index')} | error: {e['error']} | | | |\n")
            else:
                t.write(f"| {e['prompt'][:40]} | {e['same_tokens']} | {e['plain_tok_s']:.1f} | {e['spec_tok_s']:.1f} | {e['speedup']:.2f} |\n")
    def pair_line(label, c):  # one plain_vs_spec pair
        if "error" in c:
            return f"\n{label}: error: {c['error']}\n"
        same_lp = f", same logprobs {c['same_logprobs']}" if "same_logprobs" in c else ""
        return (f"\n{label}, {c['tokens']} tokens: same tokens {c['same_tokens']}{same_lp}, plain "
                f"{c['plain_tok_s']:.1f} tok/s, speculative {c['spec_tok_s']:.1f} tok/s ({c['speedup']:.2f}x)\n")
    if constrained:
        t.write(pair_line("constrained (one JSON object)", constrained))
    if logprobs:
        t.write(pair_line("logprobs (5 a token)", logprobs))
    ok = [e for e in engine if "error" not in e]
    if hf and ok:
        spec = sum(e["spec_tok_s"] for e in ok) / len(ok)
        t.write(f"\nHF assisted generation ({hf['transformers']}, {hf['dtype']}): plain {hf['plain_tok_s']:.1f} tok/s, "
                f"assisted {hf['assisted_tok_s']:.1f} tok/s; tandem speculative {spec:.1f} tok/s = "
                f"{spec / max(hf['assisted_tok_s'], 1e-9):.2f}x HF assisted\n")
    if serve:
        t.write("\n| server config | T | streams | ok | output tok/s | ratio to off | TTFT p50 ms | ITL p99 ms | acceptance |\n"
                "|---|---|---|---|---|---|---|---|---|\n")
        for r in serve:
            acc = f"{r['acceptance']:.2f}" if r.get("acceptance") is not None else "-"
            ratio = f"{r['throughput_ratio']:.2f}x" if r.get("throughput_ratio") else "-"
            t.write(f"| {r['config']} | {r.get('temperature', 0):g} | {r['concurrency']} | {r['ok']}/{r['requests']} | "
                    f"{r['output_tokens_per_s']:.1f} | {ratio} | {r['ttft_ms']['50']:.0f} | {r['itl_ms']['99']:.1f} | {acc} |\n")
print(open(os.path.join(out, "summary.md")).read())
PY
log "done in $(elapsed)s; results in $OUT"
if [ -n "$PACK" ]; then
  mkdir -p "$PACK"
  tar czf "$PACK/results.tar.gz" -C "$(dirname "$OUT")" "$(basename "$OUT")"
  cp "$OUT/summary.md" "$OUT/summary.json" "$OUT/log.txt" "$PACK/" 2>/dev/null || true
fi
