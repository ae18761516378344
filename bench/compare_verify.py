#!/usr/bin/env python3
"""Rejection vs coupled verification on a real draft/target pair, side by side.

For every prompt of a prompts file and every seed, runs `tandem generate --json` once per
verification mode (alternating, so machine drift hits both alike) with the same sampling
settings, and reports per mode: acceptance rate (accepted / drafted), mean accepted length
(tokens per verification step), decode tokens/s (median over runs), and, for coupled mode,
whether the text equals plain (non-speculative) coupled sampling with the same seed.

    python3 bench/compare_verify.py --tandem build/release/apps/tandem \
        -m ~/.cache/tandem/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        -md ~/.cache/tandem/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --temp 0.7 -k 3 -n 64
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def chatml(p):
    return f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n"


def generate(args, prompt, seed, verify, draft=True):
    cmd = [args.tandem, "generate", "-m", args.model, "-p", prompt, "-n", str(args.n), "--temp", str(args.temp),
           "--seed", str(seed), "--verify", verify, "-t", str(args.threads), "--json", "--ignore-eos"]
    if draft:
        cmd += ["-md", args.draft, "--draft-max", str(args.k), "--policy", "fixed"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.path.join(HERE, "..", "build", "release", "apps", "tandem"))
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--draft", required=True)
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.jsonl"))
    ap.add_argument("--limit", type=int, default=4, help="prompts used from the file")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--temp", type=float, default=0.7)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()

    prompts = [json.loads(l)["prompt"] for l in open(args.prompts) if l.strip()][: args.limit]
    stats = {m: {"drafted": 0, "accepted": 0, "drafts": 0, "tps": []} for m in ("rejection", "coupled")}
    same_as_plain = []
    for i, p in enumerate(prompts):
        for seed in range(1, args.seeds + 1):
            order = ("rejection", "coupled") if (i + seed) % 2 == 0 else ("coupled", "rejection")
            for mode in order:
                r = generate(args, chatml(p), seed, mode)
                s, sp = stats[mode], r["speculative"]
                s["drafted"] += sp["drafted_tokens"]
                s["accepted"] += sp["accepted_tokens"]
                s["drafts"] += sp["drafts"]
                s["tps"].append(r["timings"]["decode_tokens_per_s"])
                if mode == "coupled":
                    plain = generate(args, chatml(p), seed, "coupled", draft=False)
                    same_as_plain.append(plain["tokens"] == r["tokens"])
            print(f"prompt {i} seed {seed} done", file=sys.stderr, flush=True)
    print(f"T={args.temp} k={args.k} n={args.n} prompts={len(prompts)} seeds={args.seeds}")
    print(f"{'mode':10} {'acceptance':>10} {'mean len':>9} {'decode tok/s (median)':>22}")
    for mode, s in stats.items():
        acc = s["accepted"] / s["drafted"] if s["drafted"] else 0.0
        mal = 1 + s["accepted"] / s["drafts"] if s["drafts"] else 0.0
        print(f"{mode:10} {acc:10.3f} {mal:9.2f} {statistics.median(s['tps']):22.2f}")
    print(f"coupled text == plain coupled text for the same seed: {sum(same_as_plain)}/{len(same_as_plain)}")
    return 0 if all(same_as_plain) else 1


if __name__ == "__main__":
    sys.exit(main())
