#!/usr/bin/env python3
"""Speculative decoding, tandem against llama.cpp, side by side in one run: the same GGUF
pair, prompts, thread count and token budget, rounds alternating the engines, printed as
tok/s and ratios per prompt set (code, chat, editing).

    python3 bench/spec_vs_llamacpp.py [--tandem build/release/apps/tandem] [-t 2] [-n 96]
                                      [-k 4] [--rounds 2] [--sets code,chat,edit]
                                      [--llama-dir ~/.cache/tandem/llama.cpp-b0.3.16]
                                      [--draft-type q4_0]

Configurations (greedy; each generation stops at the end-of-generation token or n tokens):
  tandem plain            tandem generate --draft none
  tandem spec k=K         tandem generate -md DRAFT --draft model --policy fixed --draft-max K
  tandem spec default     tandem generate -md DRAFT --draft model (the default policy)
  tandem spec k=J         with --chains K: fixed chains of every depth J = 1..K too; with
                          --tree, the tree at k=K is set against the best of them by tokens
                          per target pass (greedy: a count, the same on every run) and by tok/s
  tandem spec k=K TYPE    with --draft-type TYPE: the same draft file re-quantized to TYPE at
                          load (tandem's --draft-type; `tandem tune` measures which pays)
The tandem spec runs without --draft-type load the draft as tandem does by default
(--draft-type auto: its matrices stored above 5 bits per weight re-quantized to Q4_0);
--draft-type keep adds a column with the draft as stored.
  llama.cpp plain         llama-cli -no-cnv --temp 0 (its "eval time": decode only)
  llama.cpp spec k=K      llama-speculative-simple -md DRAFT --draft-max K (its other draft
                          settings at their defaults, as its users run it)
The llama.cpp programs are built from source, once, from the llama.cpp that the PyPI
sdist of llama-cpp-python vendors (pip download; the only registry reachable here), into
--llama-dir (the build takes minutes). tok/s is decoded tokens over decode time as each
program reports it (prefill excluded); per set, the tokens and times of every prompt and
round are summed.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile

from qwen_pair import HERE, add_pair_args, missing_paths, prompt_sets, tandem_json

LLAMA_CPP_PYTHON = "0.3.16"


# ---- llama.cpp from source ----------------------------------------------------------------
def ensure_llama(llama_dir, jobs):
    bins = {n: os.path.join(llama_dir, "build", "bin", n) for n in ("llama-cli", "llama-speculative-simple")}
    if all(os.path.exists(b) for b in bins.values()):
        return bins
    os.makedirs(llama_dir, exist_ok=True)
    src = os.path.join(llama_dir, "src")
    if not os.path.exists(os.path.join(src, "CMakeLists.txt")):
        with tempfile.TemporaryDirectory() as tmp:
            print(f"llama.cpp: downloading the llama-cpp-python {LLAMA_CPP_PYTHON} sdist", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", tmp], check=True)
            sdist = [f for f in os.listdir(tmp) if f.endswith(".tar.gz")][0]
            with tarfile.open(os.path.join(tmp, sdist)) as t:
                prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
                members = [m for m in t.getmembers() if m.name.startswith(prefix)]
                for m in members:
                    m.name = m.name[len(prefix):]
                t.extractall(src, members=[m for m in members if m.name])
    build = os.path.join(llama_dir, "build")
    print("llama.cpp: building llama-cli and llama-speculative-simple (minutes)", file=sys.stderr)
    subprocess.run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON",
                    "-DLLAMA_BUILD_SERVER=OFF", "-DBUILD_SHARED_LIBS=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j", str(jobs), "--target", "llama-cli",
                    "llama-speculative-simple"], check=True, stdout=subprocess.DEVNULL)
    return bins


# llama-speculative-simple: "decoded N tokens in S seconds"; llama-cli's perf line:
# "eval time = MS ms / N runs" (the decode passes; the prompt is "prompt eval time").
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) s")
EVAL = re.compile(r"(?<!prompt )eval time =\s+([\d.]+) ms /\s+(\d+) runs")


def run_llama(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    m = DECODED.findall(out)
    e = EVAL.findall(out)
    if p.returncode != 0 or not (m or e):
        raise RuntimeError(f"{' '.join(cmd[:3])}... failed ({p.returncode}):\n{out[-2000:]}")
    if m:
        n, s = m[-1]
    else:
        ms, n = e[-1]
        s = float(ms) / 1000.0
    acc = re.search(r"accept\s+=\s+([\d.]+)%", out)
    return int(n), float(s), (float(acc.group(1)) / 100 if acc else None), None


def run_tandem(cmd):
    j = tandem_json(cmd)
    t = j["timings"]
    n = max(t["n_generated"] - 1, 0)  # the first token comes from the prefill
    sp = j.get("speculative", {})
    acc = sp.get("acceptance_rate")
    # committed tokens per target pass while decoding: accepted drafts plus one a pass
    passes = (sp.get("accepted_tokens", 0), sp.get("target_passes", 0)) if sp else None
    return n, t["decode_ms"] / 1000.0, acc, passes


def main():
    ap = argparse.ArgumentParser()
    add_pair_args(ap)
    ap.add_argument("-n", type=int, default=96)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sets", default="code,chat,edit")
    ap.add_argument("--limit", type=int, default=4, help="prompts per set")
    ap.add_argument("--llama-dir", default=os.path.expanduser(f"~/.cache/tandem/llama.cpp-b{LLAMA_CPP_PYTHON}"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--draft-type", help="also run tandem spec k=K with the draft re-quantized to this type")
    ap.add_argument("--tree", metavar="W,N",
                    help="also run token trees of width W and N nodes: at k=K (fixed) and at the default policy")
    ap.add_argument("--chains", type=int, metavar="K",
                    help="also run fixed chains of every depth 1..K (the tree is compared with the best)")
    ap.add_argument("--no-llama", action="store_true", help="tandem's columns only (llama.cpp not built or run)")
    a = ap.parse_args()
    for path in missing_paths(a):
        print(f"missing: {path}", file=sys.stderr)
        return 2
    bins = None if a.no_llama else ensure_llama(a.llama_dir, a.threads)
    sets = prompt_sets(a.sets.split(","), a.limit)
    t = str(a.threads)
    tandem = [a.tandem, "generate", "-m", a.target, "-n", str(a.n), "--temp", "0", "-t", t, "--json"]
    spec = ["-md", a.draft, "--draft", "model"]
    configs = {
        "tandem plain": lambda p: run_tandem(tandem + ["--draft", "none", "-p", p]),
        f"tandem spec k={a.k}": lambda p: run_tandem(tandem + spec + ["--policy", "fixed", "--draft-max", str(a.k),
                                                                     "-p", p]),
        "tandem spec default": lambda p: run_tandem(tandem + spec + ["-p", p]),
        **({f"tandem spec k={a.k} {a.draft_type}": lambda p: run_tandem(
            tandem + spec + ["--draft-type", a.draft_type, "--policy", "fixed", "--draft-max", str(a.k), "-p", p])}
           if a.draft_type else {}),
    }
    for j in range(1, (a.chains or 0) + 1):
        if j != a.k:
            configs[f"tandem spec k={j}"] = lambda p, j=j: run_tandem(tandem + spec + ["--policy", "fixed",
                                                                              "--draft-max", str(j), "-p", p])
    if a.tree:
        w, nodes = a.tree.split(",")
        tree = ["--tree-width", w, "--tree-nodes", nodes]
        configs[f"tandem tree k={a.k}"] = lambda p: run_tandem(tandem + spec + tree + ["--policy", "fixed", "--draft-max",
                                                                                     str(a.k), "-p", p])
        configs["tandem tree default"] = lambda p: run_tandem(tandem + spec + tree + ["-p", p])
    if bins:
        configs["llama.cpp plain"] = lambda p: run_llama([bins["llama-cli"], "-m", a.target, "-no-cnv", "-p", p, "-n",
                                                          str(a.n), "-t", t, "--temp", "0", "-c", "4096", "-ngl", "0"])
        configs[f"llama.cpp spec k={a.k}"] = lambda p: run_llama(
            [bins["llama-speculative-simple"], "-m", a.target, "-md", a.draft, "-p", p, "-n", str(a.n), "-t", t,
             "-td", t, "--draft-max", str(a.k), "--temp", "0", "-c", "4096", "-ngl", "0", "-ngld", "0"])
    names = list(configs)
    totals = {(s, c): [0, 0.0, [], 0, 0] for s in sets for c in names}
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]  # alternate, so drift hits all alike
        for s, prompts in sets.items():
            for i, p in enumerate(prompts):
                for c in order:
                    n, secs, acc, passes = configs[c](p)
                    tot = totals[(s, c)]
                    tot[0] += n
                    tot[1] += secs
                    if acc is not None:
                        tot[2].append(acc)
                    if passes:
                        tot[3] += passes[0]
                        tot[4] += passes[1]
                    print(f"round {r + 1} {s} #{i} {c}: {n} tokens, {n / secs if secs else 0:.2f} tok/s",
                          file=sys.stderr)
    rows = []
    for s in sets:
        row = {"set": s}
        for c in names:
            n, secs, accs, accepted, passes = totals[(s, c)]
            row[c] = n / secs if secs else 0.0
            row[c + " acceptance"] = statistics.mean(accs) if accs else None
            row[c + " tokens per pass"] = (accepted + passes) / passes if passes else None
        rows.append(row)
    k = a.k
    print(f"\n{os.path.basename(a.target)} with {os.path.basename(a.draft)}, {a.threads} threads, n = {a.n}, "
          f"k = {k}, greedy, {a.rounds} rounds alternating, llama.cpp from llama-cpp-python {LLAMA_CPP_PYTHON}\n")
    if a.tree:  # trees against the chains, side by side
        print("| set | tree k / chain k | tree default / spec default | tree default / plain "
              "| tokens per pass: chain k → tree k | default: chain → tree |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            tp = lambda c: row[c + " tokens per pass"] or 0.0  # noqa: E731
            print(f"| {row['set']} | {row[f'tandem tree k={k}'] / row[f'tandem spec k={k}']:.2f}x | "
                  f"{row['tandem tree default'] / row['tandem spec default']:.2f}x | "
                  f"{row['tandem tree default'] / row['tandem plain']:.2f}x | "
                  f"{tp(f'tandem spec k={k}'):.2f} → {tp(f'tandem tree k={k}'):.2f} | "
                  f"{tp('tandem spec default'):.2f} → {tp('tandem tree default'):.2f} |")
        print()
    if a.tree and a.chains:  # the tree against the best chain of any depth up to --chains
        print(f"| set | tokens per pass, chains k=1..{a.chains} | best chain | tree k={k} | tree / best chain "
              "| tok/s: fastest chain → tree k |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            tp = {j: row[f"tandem spec k={j} tokens per pass"] or 0.0 for j in range(1, a.chains + 1)}
            best = max(tp, key=tp.get)
            fastest = max(range(1, a.chains + 1), key=lambda j: row[f"tandem spec k={j}"])
            tree_tp = row[f"tandem tree k={k} tokens per pass"] or 0.0
            print(f"| {row['set']} | " + ", ".join(f"{tp[j]:.2f}" for j in tp) + f" | k={best}: {tp[best]:.2f} | "
                  f"{tree_tp:.2f} | {tree_tp / tp[best]:.2f}x | k={fastest}: {row[f'tandem spec k={fastest}']:.2f} → "
                  f"{row[f'tandem tree k={k}']:.2f} |")
        print()
    if not bins:
        print("| set | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for row in rows:
            print(f"| {row['set']} | " + " | ".join(f"{row[c]:.2f}" for c in names) + " |")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"rows": rows, "threads": a.threads, "n": a.n, "k": k, "rounds": a.rounds}, f, indent=1)
        return 0
    typed = f"tandem spec k={k} {a.draft_type}" if a.draft_type else None
    extra = (f" | {a.draft_type} draft / plain | {a.draft_type} draft / llama.cpp spec" if typed else "")
    print("| set | " + " | ".join(names) + " | tandem spec / plain | tandem spec / llama.cpp spec | "
          "llama.cpp spec / plain" + extra + " |")
    print("|---|" + "---|" * (len(names) + 3 + (2 if typed else 0)))
    for row in rows:
        ts, tp, ls, lp = row[f"tandem spec k={k}"], row["tandem plain"], row[f"llama.cpp spec k={k}"], row["llama.cpp plain"]
        cells = " | ".join(f"{row[c]:.2f}" for c in names)
        more = f" | {row[typed] / tp:.2f}x | {row[typed] / ls:.2f}x" if typed else ""
        print(f"| {row['set']} | {cells} | {ts / tp:.2f}x | {ts / ls:.2f}x | {ls / lp:.2f}x{more} |")
    print("\n(tok/s; acceptance: " + ", ".join(
        f"{row['set']}: tandem {row[f'tandem spec k={k} acceptance'] or 0:.2f}, llama.cpp "
        f"{row[f'llama.cpp spec k={k} acceptance'] or 0:.2f}" for row in rows) + ")")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "threads": a.threads, "n": a.n, "k": k, "rounds": a.rounds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
