#!/usr/bin/env python3
"""Records acceptance traces of the Qwen pair for `bench_policies replay`: one greedy
speculative run per prompt that drafts far ahead (fixed k = 16 by default), whose steps
(`tandem generate --json`, speculative.steps) say how many draft tokens any step would get
accepted at every position of the output (policies/replay.hpp).

    python3 bench/record_traces.py [-o traces.jsonl] [--sets code,chat,summarise,edit | --prompts-file F]
                                   [--limit 8] [-n 200] [--draft-max 16] [-t 2] [--extra "..."]
    build/release/bench/bench_policies replay traces.jsonl --cost-cache ~/.cache/tandem/cost_models.json \\
        --match "draft_type=auto" -n 96 --weight 2,6

One line per prompt: {"set", "prompt_tokens", "n_generated", "steps": [[drafted, accepted], ...]}.
Timing plays no part, so the traces are the same on any machine for the same models, draft
settings (--extra, e.g. "--draft-vocab 32768") and build.
"""
import argparse
import json
import sys

from qwen_pair import add_pair_args, missing_paths, prompt_sets, tandem_json


def main():
    ap = argparse.ArgumentParser()
    add_pair_args(ap)
    ap.add_argument("-o", "--out", default="traces.jsonl")
    ap.add_argument("--sets", default="code,chat,summarise,edit")
    ap.add_argument("--limit", type=int, default=8, help="prompts per set")
    ap.add_argument("-n", type=int, default=200, help="tokens per run")
    ap.add_argument("--draft-max", type=int, default=16, help="k of the recording run (policies replayed with k above it "
                    "see lower bounds where a whole draft was accepted)")
    ap.add_argument("--extra", default="", help="more flags for tandem generate (draft settings)")
    ap.add_argument("--prompts-file", help="instead of --sets: every prompt of this JSON-lines file (its \"category\" "
                    "names the set), in ChatML, e.g. bench/prompts_vocab.jsonl")
    a = ap.parse_args()
    for path in missing_paths(a):
        print(f"missing: {path}", file=sys.stderr)
        return 2
    base = [a.tandem, "generate", "-m", a.target, "-md", a.draft, "-n", str(a.n), "--temp", "0",
            "-t", str(a.threads), "--policy", "fixed", "--draft-max", str(a.draft_max), "--json",
            "--no-lookup"]  # the draft's own agreement: prompt lookup's steps are not the draft's
    base += a.extra.split() if a.extra else []
    count = 0
    with open(a.out, "w") as f:
        # A prompts file: every prompt of every category in it.
        names, limit = (None, None) if a.prompts_file else (a.sets.split(","), a.limit)
        for name, prompts in prompt_sets(names, limit, a.prompts_file).items():
            for p in prompts:
                j = tandem_json(base + ["-p", p])
                sp = j["speculative"]
                row = {"set": name, "prompt_tokens": len(j["prompt_tokens"]),
                       "n_generated": j["timings"]["n_generated"], "steps": sp["steps"]}
                f.write(json.dumps(row) + "\n")
                count += 1
                print(f"{name}: {row['n_generated']} tokens, {len(row['steps'])} steps, "
                      f"acceptance {sp['acceptance_rate']:.2f}", file=sys.stderr)
    print(f"wrote {count} traces to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
