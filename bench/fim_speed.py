#!/usr/bin/env python3
"""Fill in the middle with speculation: `tandem generate --suffix` on code cases, greedy, with
speculation off, prompt lookup (n-gram), the draft model at k = 4 (fixed) and the default
policy; configurations interleaved in each round so that the machine's drift hits all alike.
Prints the median decode tok/s of each (the draft's pass over the prompt counted in decoding,
as `tandem generate` times it) and its ratio to plain, and checks every configuration wrote
the plain tokens.

    python3 bench/fim_speed.py --tandem build/release/apps/tandem \\
        --target $M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --draft $M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

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
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    configs = {
        "plain": ["--draft", "none"],
        "ngram k=8": ["--draft", "ngram", "--draft-max", "8"],
        "draft k=4": ["--model-draft", a.draft, "--draft-max", "4", "--policy", "fixed"],
        "default": ["--model-draft", a.draft],
    }
    ok = True
    print("| case | tokens | " + " | ".join(f"{c} tok/s" for c in configs) + " | " +
          " | ".join(f"{c} / plain" for c in list(configs)[1:]) + " |")
    print("|---" * (2 + 2 * len(configs) - 1) + "|")
    for name, prefix, suffix in CASES:
        speeds: dict[str, list[float]] = {c: [] for c in configs}
        tokens: dict[str, list[int]] = {}
        for _ in range(a.rounds):
            for c, flags in configs.items():
                out = subprocess.run([a.tandem, "generate", "-m", a.target, *flags, "-p", prefix, "--suffix", suffix,
                                      "-n", str(a.n), "--temp", "0", "--threads", str(a.threads), "--json"],
                                     capture_output=True, text=True, check=True)
                o = json.loads(out.stdout)
                speeds[c].append(o["timings"]["decode_tokens_per_s"])
                tokens.setdefault(c, o["tokens"])
                if o["tokens"] != tokens["plain"]:
                    print(f"{name} {c}: the tokens differ from plain decoding", file=sys.stderr)
                    ok = False
        med = {c: statistics.median(v) for c, v in speeds.items()}
        print(f"| {name} | {len(tokens['plain'])} | " + " | ".join(f"{med[c]:.1f}" for c in configs) + " | " +
              " | ".join(f"{med[c] / med['plain']:.2f}x" for c in list(configs)[1:]) + " |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
