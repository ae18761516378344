#!/usr/bin/env python3
"""tandem against llama.cpp on the same GGUF file, the same token ids and the same thread
count, measured side by side in one run, printed as ratios.

    python3 bench/compare_llamacpp.py [--models smollm2,qwen1.5b] [-t 2] [--nmax 8] [--reps 5]
                                      [--ctx 256] [--rounds 2] [--tandem-bench build/release/bench/bench_forward]

llama.cpp runs through the `llama-cpp-python` PyPI package, built from source (its sdist
compiles the llama.cpp it vendors) into a virtual environment this script creates once
(default ~/.cache/tandem/llama-venv, --venv to move it; the build takes minutes).

What is measured, identically for both engines (tandem: bench/bench_forward --json):
  prefill   `ctx` prompt tokens in one call (ids (i*7919+13) mod min(vocab, 30000)), tokens/s
  T(n)      n = 1..nmax new tokens appended after that prompt, logits for all n (what a
            speculative verification needs), rolled back after each pass; median of `reps`
            passes after one warm-up pass
  decode    1000 / T(1) tokens/s
Rounds alternate the engines (tandem, llama.cpp, tandem, ...) so machine noise hits both;
each figure is the median over rounds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.16"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_FILES = {
    "smollm2": "smollm2-135m-instruct-q4_1.gguf",
    "qwen0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "gemma3": "gemma3-270m-q4_k_m.gguf",
}


def prompt_ids(ctx, vocab):
    m = min(vocab, 30000)
    return [(i * 7919 + 13) % m for i in range(ctx)]


def run_ids(ctx, n, vocab):
    m = min(vocab, 30000)
    return [(ctx + i * 31) % m for i in range(n)]


# ---- the llama.cpp side (runs inside the virtual environment) ------------------------------
def llama_worker(a):
    from llama_cpp import Llama

    common = dict(model_path=a.model, n_ctx=a.ctx + a.nmax + 16, n_batch=max(512, a.ctx), n_ubatch=max(512, a.ctx),
                  n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    out = {"version": __import__("llama_cpp").__version__}
    # Prefill: only the last token's logits, as tandem's prefill.
    llm = Llama(**common)
    vocab = llm.n_vocab()
    ids = prompt_ids(a.ctx, vocab)
    llm.eval(ids[:8])  # warm-up (first-touch of the mapped weights)
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    out["prefill_ms"] = prefill_ms
    out["prefill_tok_s"] = a.ctx * 1e3 / prefill_ms
    del llm
    # T(n): logits for every token of the run.
    llm = Llama(logits_all=True, **common)
    llm.eval(ids)
    t_ms = []
    for n in range(1, a.nmax + 1):
        run = run_ids(a.ctx, n, vocab)
        times = []
        for r in range(a.reps + 1):
            llm.n_tokens = a.ctx  # roll back: eval removes cache entries from n_tokens on
            t0 = time.perf_counter()
            llm.eval(run)
            ms = (time.perf_counter() - t0) * 1e3
            if r > 0:
                times.append(ms)
        t_ms.append(statistics.median(times))
    out["t_ms"] = t_ms
    print(json.dumps(out))


# ---- the driver --------------------------------------------------------------------------
def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run([py, "-c", "import llama_cpp"], capture_output=True).returncode == 0
    if ok:
        return py
    print(f"building {LLAMA_CPP_PYTHON} from source into {venv} (once; takes several minutes)...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    env = dict(os.environ)
    # CPU build for this machine's instruction set, as tandem's own runtime dispatch picks.
    env["CMAKE_ARGS"] = "-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF"
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-binary", "llama-cpp-python", "--no-cache-dir",
                    LLAMA_CPP_PYTHON, "numpy"], check=True, env=env)
    return py


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,qwen1.5b")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--nmax", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--venv", default=os.path.expanduser("~/.cache/tandem/llama-venv"))
    ap.add_argument("--tandem-bench", default=os.path.join(ROOT, "build", "release", "bench", "bench_forward"))
    ap.add_argument("--model-dir", default=os.environ.get("TANDEM_MODELS", os.path.expanduser("~/.cache/tandem/models")))
    ap.add_argument("--out", help="write all measurements as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return llama_worker(a)

    if not os.path.exists(a.tandem_bench):
        sys.exit(f"{a.tandem_bench} not found: build the release preset first (cmake --build --preset release)")
    py = ensure_venv(a.venv)
    results = {}
    rows = []
    for key in a.models.split(","):
        path = key if key.endswith(".gguf") else os.path.join(a.model_dir, MODEL_FILES[key])
        if not os.path.exists(path):
            sys.exit(f"model not found: {path} (python3 scripts/fetch_models.py --models {key})")
        common = ["-t", str(a.threads), "--nmax", str(a.nmax), "--reps", str(a.reps), "--ctx", str(a.ctx)]
        tandem_runs, llama_runs = [], []
        for r in range(a.rounds):
            print(f"{key}: round {r + 1}/{a.rounds}", file=sys.stderr)
            tandem_runs.append(run_json([a.tandem_bench, "-m", path, "--json"] + common))
            llama_runs.append(run_json([py, os.path.abspath(__file__), "--worker", "--model", path, "--threads",
                                        str(a.threads), "--nmax", str(a.nmax), "--reps", str(a.reps), "--ctx",
                                        str(a.ctx)]))

        def med(runs, f):
            return statistics.median(f(x) for x in runs)

        def summary(runs):
            s = {"prefill_tok_s": med(runs, lambda x: x["prefill_tok_s"]),
                 "t_ms": [med(runs, lambda x, i=i: x["t_ms"][i]) for i in range(a.nmax)]}
            s["decode_tok_s"] = 1e3 / s["t_ms"][0]
            s["t_ratio"] = [t / s["t_ms"][0] for t in s["t_ms"]]
            return s

        ts, ls = summary(tandem_runs), summary(llama_runs)
        results[key] = {"tandem": ts, "llama.cpp": ls, "llama_cpp_python": llama_runs[0]["version"],
                        "tandem_backend": tandem_runs[0]["backend"], "raw": {"tandem": tandem_runs, "llama.cpp": llama_runs}}
        rows.append((key, ts, ls))

    n8 = min(8, a.nmax) - 1
    print(f"\ntandem vs llama.cpp (llama-cpp-python {llama_runs[0]['version']}), {a.threads} threads, "
          f"prompt {a.ctx} tokens, median of {a.rounds} alternating rounds")
    print(f"| model | prefill tok/s tandem | llama.cpp | ratio | decode tok/s tandem | llama.cpp | ratio | "
          f"T({n8 + 1})/T(1) tandem | llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, ts, ls in rows:
        print(f"| {key} | {ts['prefill_tok_s']:.1f} | {ls['prefill_tok_s']:.1f} | "
              f"{ts['prefill_tok_s'] / ls['prefill_tok_s']:.2f} | {ts['decode_tok_s']:.1f} | {ls['decode_tok_s']:.1f} | "
              f"{ts['decode_tok_s'] / ls['decode_tok_s']:.2f} | {ts['t_ratio'][n8]:.2f} | {ls['t_ratio'][n8]:.2f} |")
    print("\nT(n)/T(1):")
    for key, ts, ls in rows:
        print(f"  {key:9s} tandem    " + " ".join(f"{x:5.2f}" for x in ts["t_ratio"]))
        print(f"  {key:9s} llama.cpp " + " ".join(f"{x:5.2f}" for x in ls["t_ratio"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
