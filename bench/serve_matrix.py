#!/usr/bin/env python3
"""Server throughput and latency at several concurrency levels, speculation off and on,
measured in one run: starts `tandem serve` once per configuration, drives it with
bench/loadgen.py at each concurrency, prints one table.

    python3 bench/serve_matrix.py [--tandem build/release/apps/tandem] [--pair smollm2|qwen]
                                  [--concurrency 1,2,4,8,16] [--temperatures 0,0.8] [--categories chat,code]
                                  [--max-tokens 32] [--waves 2] [-t 2] [--policies goodput]
                                  [--server-args '--device cuda --gpu-mem 24G'] [--tree 3,12] [--rounds 2]

--pair smollm2: SmolLM2-135M, speculation = n-gram prompt lookup.
--pair qwen:    Qwen2.5-Coder-1.5B target with the 0.5B draft, speculation = draft model.
Each concurrency level c sends max(4, waves*c) chat requests of exactly --max-tokens tokens
(ignore_eos) from bench/prompts.jsonl, for each prompt category (--categories: chat, code)
and temperature (--temperatures: 0 is greedy), --rounds times. Configurations: off (--draft
none) and on (each of --policies, the default policy first), so the same server binary,
models and prompts are compared side by side: their servers run at once and each cell
measures them in turn, in reversed order every other round, so that the machine's drift over
the run hits all alike (measured one after the other, the first configuration ran about 10%
faster than the same one measured second on a 2-core machine). The summary pairs each on configuration with off at the
same category, temperature and concurrency: throughput ratio, p99 inter-token latency (per
token: a burst's wait shared by its tokens, see bench/loadgen.py), p99 gap between arrivals
and p99 of the requests' time per output token (TPOT). --tree W,N adds each policy with token
trees (--tree-width W --tree-nodes N) and a table of trees against chains.
"""
import argparse
import asyncio
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import loadgen  # noqa: E402

MODELS = os.environ.get("TANDEM_MODELS", os.path.expanduser("~/.cache/tandem/models"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tandem, args, port, log):
    proc = subprocess.Popen([tandem, "serve", "--port", str(port)] + args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 600  # a first start may calibrate the cost model
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; log: {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become healthy")


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#") and "{" not in line:
                k, _, v = line.partition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out


def loadgen_args(port, c, n, max_tokens, prompts, temperature):
    ns = argparse.Namespace(host="127.0.0.1", port=port, api_key="", model="", endpoint="chat", concurrency=c,
                            requests=n, duration=3600.0, timeout=900.0, prompt_words=[16],
                            max_tokens=(max_tokens, max_tokens), prompts=prompts, temperature=temperature,
                            ignore_eos=True, speculative=None, seed=1, json=True, burst_ms=2.0)
    ns.prompt_list = loadgen.load_prompts(prompts)
    return ns


def prompts_by_category(path, categories):
    """One prompt file per category (the lines of `path` whose "category" is it); "all": the file."""
    out = {}
    for cat in categories:
        if cat == "all":
            out[cat] = path
            continue
        lines = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and json.loads(line).get("category") == cat:
                    lines.append(line)
        if not lines:
            raise SystemExit(f"no prompt of category {cat!r} in {path}")
        tmp = tempfile.NamedTemporaryFile("w", prefix=f"prompts-{cat}-", suffix=".jsonl", delete=False)
        tmp.writelines(lines)
        tmp.close()
        out[cat] = tmp.name
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build", "release", "apps", "tandem"))
    ap.add_argument("--pair", choices=("smollm2", "qwen"), default="smollm2")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--temperatures", default="0,0.8", help="sampling temperatures (0: greedy)")
    ap.add_argument("--categories", default="chat,code", help="prompt categories of --prompts, or all")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2,
                    help="times each cell is measured per configuration, the configurations' order reversed each time")
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--policies", default="goodput", help="speculation-on configurations: goodput,fixed,...")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.jsonl"))
    ap.add_argument("--out", help="write all results as JSON")
    ap.add_argument("--server-args", default="",
                    help="more `tandem serve` arguments, e.g. '--device cuda --gpu-mem 24G' (bench/gpu_check.sh)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--tree", metavar="W,N", help="also each policy with token trees of width W and N nodes")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    max_seqs = max(levels)
    if a.pair == "smollm2":
        base = ["-m", os.path.join(MODELS, "smollm2-135m-instruct-q4_1.gguf")]
        on = ["--draft", "ngram"]
    else:
        base = ["-m", os.path.join(MODELS, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
                "-md", os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]
        on = ["--draft", "model"]
    base += ["-t", str(a.threads), "--max-seqs", str(max_seqs), "--ctx", str(a.ctx), "--max-queue", "1024"]
    base += a.server_args.split()
    configs = [("off", ["--draft", "none"])]
    for p in a.policies.split(","):
        configs.append((f"on/{p}", on + ["--draft-max", str(a.draft_max), "--policy", p]))
        if a.tree:
            w, nodes = a.tree.split(",")
            configs.append((f"on/{p}+tree", on + ["--draft-max", str(a.draft_max), "--policy", p, "--tree-width", w,
                                                  "--tree-nodes", nodes]))
    temps = [float(x) for x in a.temperatures.split(",")]
    cats = a.categories.split(",")
    prompt_files = prompts_by_category(a.prompts, cats)
    # Every configuration's server runs at once (one idles while another is measured), and
    # each cell measures them in turn, the order reversed every round: a machine that slows
    # down or speeds up over the run then hits every configuration alike, where measuring one
    # configuration after the other would credit the drift to whichever came first.
    servers = {}
    results = []
    try:
        for label, extra in configs:
            port = free_port()
            log = tempfile.NamedTemporaryFile("w+", prefix=f"serve-{label.replace('/', '-')}-", suffix=".log",
                                              delete=False)
            servers[label] = (start_server(a.tandem, base + extra, port, log), port, log)
        for cat in cats:
            for temp in temps:
                for c in levels:
                    n = max(4, a.waves * c)
                    runs = {label: ([], 0.0, {}) for label, _ in configs}
                    for rnd in range(a.rounds):
                        order = [label for label, _ in configs]
                        for label in (order if rnd % 2 == 0 else order[::-1]):
                            port = servers[label][1]
                            print(f"{label} {cat} T={temp}: {c} streams, {n} requests (round {rnd + 1})...",
                                  file=sys.stderr)
                            m0 = metrics(port)
                            lg = loadgen_args(port, c, n, a.max_tokens, prompt_files[cat], temp)
                            res, wall = asyncio.run(loadgen.run(lg))
                            m1 = metrics(port)
                            got, walls, delta = runs[label]
                            for k in ("tandem_spec_draft_tokens_total", "tandem_spec_accepted_tokens_total",
                                      "tandem_spec_budget_wished_tokens_total",
                                      "tandem_spec_budget_granted_tokens_total"):
                                delta[k] = delta.get(k, 0) + m1.get(k, 0) - m0.get(k, 0)
                            runs[label] = (got + res, walls + wall, delta)
                    for label, _ in configs:
                        got, walls, delta = runs[label]
                        with contextlib.redirect_stdout(io.StringIO()):
                            out = loadgen.report(loadgen_args(0, c, n, a.max_tokens, prompt_files[cat], temp), got,
                                                 walls)
                        drafted = delta["tandem_spec_draft_tokens_total"]
                        out["acceptance"] = delta["tandem_spec_accepted_tokens_total"] / drafted if drafted else None
                        out["drafted"] = drafted
                        out["granted"] = delta["tandem_spec_budget_granted_tokens_total"]
                        out["wished"] = delta["tandem_spec_budget_wished_tokens_total"]
                        out.update(config=label, category=cat, temperature=temp)
                        results.append(out)
    finally:
        for proc, _, log in servers.values():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            os.unlink(log.name)
    for cat, path in prompt_files.items():
        if path != a.prompts:
            os.unlink(path)

    print(f"\n{a.pair}: {a.max_tokens} tokens per request, chat endpoint, {a.threads} threads")
    print("| config | prompts | T | streams | ok | output tok/s | TTFT p50 ms | ITL p50 ms | ITL p99 ms | gap p99 ms "
          "| acceptance | drafted |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        acc = f"{r['acceptance']:.2f}" if r["acceptance"] is not None else "-"
        print(f"| {r['config']} | {r['category']} | {r['temperature']:g} | {r['concurrency']} | {r['ok']}/{r['requests']} "
              f"| {r['output_tokens_per_s']:.1f} | {r['ttft_ms'][50]:.0f} | {r['itl_ms'][50]:.1f} | {r['itl_ms'][99]:.1f} "
              f"| {r['gap_ms'][99]:.1f} | {acc} | {r['drafted']:.0f} |")
    off = {(r["category"], r["temperature"], r["concurrency"]): r for r in results if r["config"] == "off"}
    print("\nside by side with off (same prompts, temperature, streams):")
    print("| config | prompts | T | streams | throughput ratio | ITL p99 ratio | gap p99 ratio | TPOT p99 ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        b = off.get((r["category"], r["temperature"], r["concurrency"]))
        if r["config"] == "off" or not b or not b["output_tokens_per_s"]:
            continue
        r["throughput_ratio"] = r["output_tokens_per_s"] / b["output_tokens_per_s"]
        r["itl_p99_ratio"] = r["itl_ms"][99] / b["itl_ms"][99]
        r["gap_p99_ratio"] = r["gap_ms"][99] / b["gap_ms"][99]
        r["tpot_p99_ratio"] = r["tpot_ms"][99] / b["tpot_ms"][99]
        print(f"| {r['config']} | {r['category']} | {r['temperature']:g} | {r['concurrency']} "
              f"| {r['throughput_ratio']:.2f}x | {r['itl_p99_ratio']:.2f} | {r['gap_p99_ratio']:.2f} "
              f"| {r['tpot_p99_ratio']:.2f} |")
    if a.tree:
        chains = {(r["config"], r["category"], r["temperature"], r["concurrency"]): r for r in results}
        print("\ntrees against chains (same policy, prompts, temperature, streams):")
        print("| config | prompts | T | streams | throughput ratio | ITL p99 ratio |")
        print("|---|---|---|---|---|---|")
        for r in results:
            if not r["config"].endswith("+tree"):
                continue
            c = chains.get((r["config"][:-len("+tree")], r["category"], r["temperature"], r["concurrency"]))
            if c and c["output_tokens_per_s"] and c["itl_ms"][99]:
                print(f"| {r['config']} | {r['category']} | {r['temperature']:g} | {r['concurrency']} "
                      f"| {r['output_tokens_per_s'] / c['output_tokens_per_s']:.2f}x "
                      f"| {r['itl_ms'][99] / c['itl_ms'][99]:.2f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["failed"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
