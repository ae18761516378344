#!/usr/bin/env bash
# The device check proven without a device: scripts/gpu_bundle.sh packs this build's CUDA
# binaries as a lent machine would receive them, and bench/gpu_check.sh --dry-run runs every
# step on the emulated backend from that bundle (tiny random-weight twins of the models).
# Fails when a step fails, a test in it fails, or the pack for the device tool's $OUT is not
# the four files it should be.
#   tests/gpu_check_dry_run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
B=$1
S=$2
rm -rf "$B/gpu-check-bundle" "$B/gpu-check-dry-run" "$B/gpu-check-pack" "$B/gpu-check-models" "$B/gpu-check-cache"
bash "$S/scripts/gpu_bundle.sh" "$B" "$B/gpu-check-bundle"
# The policies' cost cache of this run (what `tandem generate` measures and learns), not the user's.
mkdir -p "$B/gpu-check-cache"
TANDEM_CACHE="$B/gpu-check-cache" TANDEM_GPU_CHECK_MODELS="$B/gpu-check-models" TANDEM_CUDA_BUILD="$B/gpu-check-bundle" \
  bash "$S/bench/gpu_check.sh" --dry-run "$B/gpu-check-dry-run" "$B/gpu-check-pack" >/dev/null
python3 - "$B/gpu-check-dry-run" "$B/gpu-check-pack" <<'PY'
import json, os, sys
out, pack = sys.argv[1], sys.argv[2]
s = json.load(open(os.path.join(out, "summary.json")))
bad = [x for x in s["steps"] if x["rc"] != 0]
assert not bad, f"steps failed: {bad}"
names = {x["step"] for x in s["steps"]}
for need in ("test_cuda_ops", "test_cuda_forward", "test_cuda_forward_pdl", "test_cuda_graph_forward_pdl", "bench_gemm", "bench_gemm_cublas", "bench_attention",
             "bench_model_qwen2.5-coder-1.5b-instruct-q4_k_m", "bench_model_qwen2.5-coder-1.5b-instruct-q4_k_m_profile",
             "bench_model_qwen2.5-coder-1.5b-instruct-q4_k_m_pdl",
             "engine_spec_0", "engine_json_spec", "engine_logprobs_spec"):
    assert need in names, f"step {need} did not run: {sorted(names)}"
failures = {k: v for k, v in s["tests"].items() if v.get("failures")}
assert not failures, f"tests failed: {failures}"
assert s["random_weight_models"], "the dry run must time random-weight twins"
assert all(e.get("same_tokens") for e in s["engine"]), f"speculative tokens differ: {s['engine']}"
assert (s["constrained"] or {}).get("same_tokens"), f"constrained speculative tokens differ: {s['constrained']}"
lp = s["logprobs"] or {}
assert lp.get("same_tokens") and lp.get("same_logprobs"), f"speculative tokens or logprobs differ: {lp}"
prof = s["bench"].get("bench_model_qwen2.5-coder-1.5b-instruct-q4_k_m_profile", {}).get("profile") or {}
assert all(prof.get(k) for k in ("prefill", "decode", "verify")), f"the op profile is incomplete: {prof}"
assert "time by op" in open(os.path.join(out, "summary.md")).read(), "the summary has no op profile"
assert sorted(os.listdir(pack)) == ["log.txt", "results.tar.gz", "summary.json", "summary.md"], os.listdir(pack)
print(f"gpu_check dry run: {len(s['steps'])} steps passed")
PY
