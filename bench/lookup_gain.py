#!/usr/bin/env python3
"""Prompt lookup ahead of the draft model (SpeculativeOptions::lookup), measured: on the Qwen
pair, greedy, the default policy, each prompt runs plain, speculative with lookup (the
default) and speculative with --no-lookup, in alternating rounds; prints decode tok/s per set,
the ratios, and how many steps lookup drafted. Fails if the three outputs of a prompt differ.

    python3 bench/lookup_gain.py [-t 2] [-n 128] [--rounds 2] [--sets code,chat,summarise,edit] [--limit 4]
"""
import argparse
import sys

from qwen_pair import add_pair_args, missing_paths, prompt_sets, tandem_json

RUNS = [("plain", ["--draft", "none"]), ("lookup", []), ("no lookup", ["--no-lookup"])]


def main():
    ap = argparse.ArgumentParser()
    add_pair_args(ap)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sets", default="code,chat,summarise,edit")
    ap.add_argument("--limit", type=int, default=4, help="prompts per set")
    a = ap.parse_args()
    for path in missing_paths(a):
        print(f"missing: {path}", file=sys.stderr)
        return 2
    base = [a.tandem, "generate", "-m", a.target, "-md", a.draft, "-n", str(a.n), "--temp", "0",
            "-t", str(a.threads), "--json"]
    sets = prompt_sets(a.sets.split(","), a.limit)
    # [set][run] -> list of (tokens, ms) per prompt and round; lookup steps / all steps
    rate = {s: {name: [0, 0.0] for name, _ in RUNS} for s in sets}
    steps = {s: [0, 0, 0, 0] for s in sets}  # lookup steps, draft steps, lookup accepted, lookup drafted
    bad = 0
    for rnd in range(a.rounds):
        for s, prompts in sets.items():
            for i, p in enumerate(prompts):
                outs = {}
                order = RUNS if (rnd + i) % 2 == 0 else list(reversed(RUNS))
                for name, extra in order:
                    j = tandem_json(base + extra + ["-p", p])
                    t = j["timings"]
                    rate[s][name][0] += t["n_generated"]
                    rate[s][name][1] += t["decode_ms"]
                    outs[name] = j["tokens"]
                    if name == "lookup" and rnd == 0:
                        sp = j["speculative"]
                        steps[s][0] += sp["lookup_steps"]
                        steps[s][1] += sp["drafts"] - sp["lookup_steps"]
                        steps[s][2] += sp["lookup_accepted_tokens"]
                        steps[s][3] += sp["lookup_drafted_tokens"]
                    print(f"round {rnd + 1} {s} #{i} {name}: {t['n_generated']} tokens, "
                          f"{t['n_generated'] / t['decode_ms'] * 1000:.2f} tok/s", file=sys.stderr)
                if not (outs["plain"] == outs["lookup"] == outs["no lookup"]):
                    print(f"OUTPUTS DIFFER: {s} #{i}", file=sys.stderr)
                    bad += 1
    print(f"\n{a.target.split('/')[-1]} with {a.draft.split('/')[-1]}, {a.threads} threads, n = {a.n}, greedy, "
          f"default policy, {a.rounds} rounds alternating\n")
    print("| set | plain | spec, lookup | spec, no lookup | lookup / no lookup | lookup / plain | "
          "lookup steps / draft-model steps | lookup acceptance |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sets:
        tps = {name: (v[0] / v[1] * 1000 if v[1] else 0.0) for name, v in rate[s].items()}
        ls, ds, la, ld = steps[s]
        print(f"| {s} | {tps['plain']:.2f} | {tps['lookup']:.2f} | {tps['no lookup']:.2f} | "
              f"{tps['lookup'] / tps['no lookup']:.3f}x | {tps['lookup'] / tps['plain']:.3f}x | {ls} / {ds} | "
              f"{(la / ld if ld else 0):.2f} |")
    print("\n(tok/s: generated tokens over decode time, summed over prompts and rounds)")
    if bad:
        print(f"{bad} prompt(s) gave different outputs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
