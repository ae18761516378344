#!/usr/bin/env python3
"""A Hugging Face folder against the GGUF it was converted from, side by side in one run: load
time, prefill and decode speed of `tandem generate`, the folder's bf16 weights as stored and
quantized at load (--weight-type), printed as ratios to the GGUF.

    python3 bench/hf_folder.py [--model qwen1.5b] [--types keep,q8_0,q4_k,q4_0] [--rounds 2] [-t 2]

The folder is scripts/gguf_to_hf.py's (<cache>/hf/<model>, converted when missing). Rounds
alternate the variants so machine noise hits all; each figure is the median over rounds. Load
time is the wall time of a run of a 1-token prompt and 1 token (the page cache warm): what a
user waits for before the first token, quantizing at load included.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {"qwen0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
         "smollm2": "smollm2-135m-instruct-q4_1.gguf", "gemma3": "gemma3-270m-q4_k_m.gguf"}
PROMPT = ("def parse_config(path):\n    \"\"\"Read a YAML configuration file, validate every key against the schema, "
          "and return the settings as a dictionary with defaults filled in.\"\"\"\n" * 6)


def run(tandem, model, n, threads, extra, prompt=PROMPT):
    cmd = [tandem, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "--ignore-eos", "--json",
           "-t", str(threads), "--draft", "none", *extra]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return wall, json.loads(r.stdout)["timings"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen1.5b", choices=sorted(FILES))
    ap.add_argument("--types", default="keep,q8_0,q4_k,q4_0")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=64, help="tokens decoded")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build/release/apps/tandem"))
    ap.add_argument("--cache", default=os.environ.get("TANDEM_MODELS", os.path.expanduser("~/.cache/tandem/models")))
    a = ap.parse_args()
    gguf = os.path.join(a.cache, FILES[a.model])
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gguf_to_hf.py"), "--models", a.model,
                          "--cache", a.cache], capture_output=True, text=True, check=True).stdout
    folder = out.split()[1]
    variants = [("gguf", gguf, [])] + [(f"folder {t}", folder, ["--weight-type", t]) for t in a.types.split(",")]
    res = {name: {"load": [], "prefill": [], "decode": []} for name, _, _ in variants}
    for _ in range(a.rounds):
        for name, model, extra in variants:
            wall, _ = run(a.tandem, model, 1, a.threads, extra, prompt="x")
            _, t = run(a.tandem, model, a.n, a.threads, extra)
            res[name]["load"].append(wall)
            res[name]["prefill"].append(t["prefill_tokens_per_s"])
            res[name]["decode"].append(t["decode_tokens_per_s"])
    med = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in res.items()}
    base = med["gguf"]
    print(f"{a.model}, {a.threads} threads, prompt {len(PROMPT)} chars, {a.n} tokens decoded, median of {a.rounds} rounds")
    print(f"{'variant':<16} {'load s':>7} {'prefill tok/s':>14} {'decode tok/s':>13} {'prefill ×':>10} {'decode ×':>9}")
    for name, _, _ in variants:
        m = med[name]
        print(f"{name:<16} {m['load']:>7.2f} {m['prefill']:>14.1f} {m['decode']:>13.1f} "
              f"{m['prefill'] / base['prefill']:>10.2f} {m['decode'] / base['decode']:>9.2f}")


if __name__ == "__main__":
    main()
