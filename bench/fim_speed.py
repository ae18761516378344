#!/usr/bin/env python3
"""Fill in the middle with speculation: `tandem generate --suffix` on code cases, greedy, with
speculation off, prompt lookup (n-gram), the draft model at k = 4 (fixed) and the default
policy; configurations interleaved in each round so that the machine's drift hits all alike.
Prints the median decode tok/s of each (the draft's pass over the prompt counted in decoding,
as `tandem generate` times it) and its ratio to plain, and checks every configuration wrote
the plain tokens.

The default policy weighs starting the draft against the output it expects, which it learns
from the lengths of the outputs finished before (kept in the cost cache file). Each case runs
with a cache of its own (a copy of the user's, without those lengths): "default, first run" is
the default policy with nothing learned (the case's first round), the "default" column the
rounds after it, as in an editor that has been completing such code.

    python3 bench/fim_speed.py --tandem build/release/apps/tandem \\
        --target $M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --draft $M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (name, text before the insertion point, text after it). "short": the model writes one line
# and ends; "body": a method body of a few lines.
CASES = [
    ("short",
     'import json\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass User:\n    name: str\n    email: str\n'
     '    age: int\n\n    def to_dict(self) -> dict:\n        return {"name": self.name, "email": self.email, '
     '"age": self.age}\n\n    @classmethod\n    def from_dict(cls, d: dict) -> "User":\n',
     '\n\n\ndef load_users(path: str) -> list[User]:\n    with open(path) as f:\n'
     '        return [User.from_dict(d) for d in json.load(f)]\n'),
    ("body",
     'import json\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass User:\n    name: str\n    email: str\n'
     '    age: int\n\n    def to_dict(self) -> dict:\n',
     '\n\n    @classmethod\n    def from_dict(cls, d: dict) -> "User":\n        return cls(**d)\n'),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("-n", type=int, default=64, help="max tokens (the model may end sooner)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds, after the first one")
    a = ap.parse_args()
    configs = {
        "plain": ["--draft", "none"],
        "ngram k=8": ["--draft", "ngram", "--draft-max", "8"],
        "draft k=4": ["--model-draft", a.draft, "--draft-max", "4", "--policy", "fixed"],
        "default": ["--model-draft", a.draft],
    }
    ok = True
    ratios = [*list(configs)[1:], "default, first run"]
    print("| case | tokens | " + " | ".join(f"{c} tok/s" for c in configs) + " | " +
          " | ".join(f"{c} / plain" for c in ratios) + " |")
    print("|---" * (2 + len(configs) + len(ratios)) + "|")
    for name, prefix, suffix in CASES:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TANDEM_CACHE=cache)
            seed_cache(cache)
            speeds: dict[str, list[float]] = {c: [] for c in configs}
            tokens: dict[str, list[int]] = {}
            first = 0.0
            for r in range(a.rounds + 1):
                for c, flags in configs.items():
                    out = subprocess.run([a.tandem, "generate", "-m", a.target, *flags, "-p", prefix, "--suffix",
                                          suffix, "-n", str(a.n), "--temp", "0", "--threads", str(a.threads), "--json"],
                                         capture_output=True, text=True, check=True, env=env)
                    o = json.loads(out.stdout)
                    tps = o["timings"]["decode_tokens_per_s"]
                    if r > 0:
                        speeds[c].append(tps)
                    elif c == "default":
                        first = tps
                    tokens.setdefault(c, o["tokens"])
                    if o["tokens"] != tokens["plain"]:
                        print(f"{name} {c}: the tokens differ from plain decoding", file=sys.stderr)
                        ok = False
        med = {c: statistics.median(v) for c, v in speeds.items()}
        med["default, first run"] = first
        print(f"| {name} | {len(tokens['plain'])} | " + " | ".join(f"{med[c]:.1f}" for c in configs) + " | " +
              " | ".join(f"{med[c] / med['plain']:.2f}x" for c in ratios) + " |")
    return 0 if ok else 1


def seed_cache(cache: str) -> None:
    """The user's cost cache (so nothing is calibrated again) without what it learned of output lengths."""
    home = os.environ.get("TANDEM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tandem")
    src = os.path.join(home, "cost_models.json")
    if not os.path.exists(src):
        return
    with open(src) as f:
        data = json.load(f)
    data.pop("lengths", None)
    with open(os.path.join(cache, "cost_models.json"), "w") as f:
        json.dump(data, f)


if __name__ == "__main__":
    sys.exit(main())
