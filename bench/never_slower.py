#!/usr/bin/env python3
"""Never slower than plain decoding: tandem's speculative decoding on prompts where the
draft disagrees (random words), against tandem without a draft, side by side in one run.

    python3 bench/never_slower.py [--tandem build/release/apps/tandem] [-t 2] [--prompts 4]
                                  [--rounds 2] [--temps 0,1] [--lengths 32,128]
                                  [--policies default,fixed] [--extra "--draft-vocab 16384"]

For every temperature and output length, each prompt runs once per configuration per round,
the configurations in alternating order (drift hits all alike):
  plain      tandem generate --draft none
  default    tandem generate -md DRAFT            (the CLI's default policy)
  POLICY     tandem generate -md DRAFT --policy POLICY   (any other policy named)
--ignore-eos keeps every output at its length; temperature 1 uses one seed per prompt and
round, the same for every configuration; each configuration first runs once untimed.

Prompts are strings of words drawn at random (seeded) from a fixed list: the text that
follows is unpredictable, so the draft rarely agrees with the target, the case where
speculation can only cost. The figure of merit is end-to-end time (prefill + decode, the
draft's prompt pass included wherever it happens): per cell, generated tokens summed over
time summed, and the ratio to plain. The issue's bar: the default policy >= 0.97x plain.
"""
import argparse
import json
import os
import random
import sys

from qwen_pair import CHATML, HERE, add_pair_args, missing_paths, tandem_json

WORDS = """apple river stone window garden silver thunder pencil market orange candle bridge
winter forest hammer button violin desert rocket marble feather ladder island copper mirror
tunnel blanket harbor saddle lantern meadow pepper castle anchor velvet puzzle glacier
trumpet basket cactus walnut jacket engine rabbit canyon sponge kettle falcon lemon magnet
needle oyster parrot quartz ribbon shovel tomato umbrella vessel wizard yogurt zebra bottle
carpet dragon fossil goblet helmet insect jungle kitten lobster mushroom napkin orchid
pillow quiver rooster sandal teapot unicorn volcano wallet bamboo cobalt dolphin emerald
fountain granite hazel ivory jasmine kayak lilac mango nectar olive plume raven saffron
timber tulip valley willow amber blossom crystal dune ember frost grove haze iris jade""".split()


def random_prompts(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 24))) for _ in range(n)]


def run(cmd):
    j = tandem_json(cmd)
    t = j["timings"]
    sp = j.get("speculative", {})
    return {"tokens": t["n_generated"], "secs": (t["prefill_ms"] + t["decode_ms"]) / 1000.0,
            "decode_secs": t["decode_ms"] / 1000.0, "drafted": sp.get("drafted_tokens", 0),
            "accepted": sp.get("accepted_tokens", 0), "draft_prefill": sp.get("draft_prefill_tokens", 0),
            "policy": sp.get("policy")}


def main():
    ap = argparse.ArgumentParser()
    add_pair_args(ap)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--temps", default="0,1")
    ap.add_argument("--lengths", default="32,128")
    ap.add_argument("--policies", default="default", help="comma-separated: default and/or policy names")
    ap.add_argument("--extra", default="", help="more flags for the speculative runs (e.g. --draft-vocab 16384)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--category", help="instead of random words: the prompts of this category of "
                    "bench/prompts.jsonl (code, chat, ...) in ChatML, to see what the policy keeps where the draft agrees")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    for path in missing_paths(a):
        print(f"missing: {path}", file=sys.stderr)
        return 2
    if a.category:
        with open(os.path.join(HERE, "prompts.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        prompts = [CHATML.format(r["prompt"]) for r in rows if r.get("category") == a.category][:a.prompts]
        if not prompts:
            print(f"no prompts of category {a.category}", file=sys.stderr)
            return 2
    else:
        prompts = random_prompts(a.prompts, a.seed)
    base = [a.tandem, "generate", "-m", a.target, "-t", str(a.threads), "--ignore-eos", "--json"]
    configs = {"plain": ["--draft", "none"]}
    for pol in a.policies.split(","):
        extra = a.extra.split() if a.extra else []
        configs[pol] = ["-md", a.draft] + ([] if pol == "default" else ["--policy", pol]) + extra
    names = list(configs)
    cells = [(float(t), int(n)) for t in a.temps.split(",") for n in a.lengths.split(",")]
    tot = {(cell, c): {"tokens": 0, "secs": 0.0, "decode_secs": 0.0, "drafted": 0, "accepted": 0, "draft_prefill": 0}
           for cell in cells for c in names}
    policy_of = {}
    # One short untimed run per configuration first: the first run after a while pays for
    # cold page-cache and CPU state, which would land on whichever configuration came first.
    for c in names:
        run(base + ["-n", "8", "--temp", "0", "-p", prompts[0]] + configs[c])
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for cell in cells:
            temp, n = cell
            for i, p in enumerate(prompts):
                for c in order:
                    cmd = base + ["-n", str(n), "--temp", str(temp), "--seed", str(1000 * r + i), "-p", p] + configs[c]
                    res = run(cmd)
                    if c != "plain":
                        policy_of[c] = res["policy"]
                    for k in tot[(cell, c)]:
                        tot[(cell, c)][k] += res[k]
                    print(f"round {r + 1} T={temp:g} n={n} #{i} {c}: {res['tokens']} tokens in {res['secs']:.2f} s"
                          f" (drafted {res['drafted']}, accepted {res['accepted']})", file=sys.stderr)
    kind = f"'{a.category}' prompts" if a.category else "random-word prompts"
    print(f"\n{os.path.basename(a.target)} with {os.path.basename(a.draft)}, {a.threads} threads, {len(prompts)} "
          f"{kind}, {a.rounds} rounds alternating; end-to-end tok/s (prefill + decode)"
          + (f"; speculative runs add: {a.extra}" if a.extra else "") + "\n")
    spec = names[1:]
    print("| T | tokens | plain | " + " | ".join(f"{c} ({policy_of.get(c)})" for c in spec) + " | "
          + " | ".join(f"{c} / plain" for c in spec) + " | " + " | ".join(f"{c} drafted / accepted" for c in spec) + " |")
    print("|---|---|---|" + "---|" * (3 * len(spec)))
    rows = []
    for cell in cells:
        temp, n = cell
        speed = {c: tot[(cell, c)]["tokens"] / tot[(cell, c)]["secs"] for c in names}
        rows.append({"temp": temp, "n": n, "tok_s": speed, "totals": {c: tot[(cell, c)] for c in names}})
        print(f"| {temp:g} | {n} | {speed['plain']:.2f} | " + " | ".join(f"{speed[c]:.2f}" for c in spec) + " | "
              + " | ".join(f"{speed[c] / speed['plain']:.3f}x" for c in spec) + " | "
              + " | ".join(f"{tot[(cell, c)]['drafted']} / {tot[(cell, c)]['accepted']}" for c in spec) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows,
                       "threads": a.threads, "prompts": prompts, "rounds": a.rounds, "extra": a.extra}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
