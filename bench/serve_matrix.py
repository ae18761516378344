#!/usr/bin/env python3
"""Server throughput and latency at several concurrency levels, speculation off and on,
measured in one run: starts `tandem serve` once per configuration, drives it with
bench/loadgen.py at each concurrency, prints one table.

    python3 bench/serve_matrix.py [--tandem build/release/apps/tandem] [--pair smollm2|qwen]
                                  [--concurrency 1,8,32] [--max-tokens 32] [--waves 2] [-t 2]
                                  [--server-args '--device cuda --gpu-mem 24G']

--pair smollm2: SmolLM2-135M, speculation = n-gram prompt lookup.
--pair qwen:    Qwen2.5-Coder-1.5B target with the 0.5B draft, speculation = draft model.
Each concurrency level c sends max(4, waves*c) chat requests of exactly --max-tokens tokens
(ignore_eos) from bench/prompts.jsonl, greedy. Configurations: off (--draft none) and on
(fixed k and, with --policies, the adaptive policy), so the same server binary, models and
prompts are compared side by side.
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


def loadgen_args(port, c, n, max_tokens, prompts):
    ns = argparse.Namespace(host="127.0.0.1", port=port, api_key="", model="", endpoint="chat", concurrency=c,
                            requests=n, duration=3600.0, timeout=900.0, prompt_words=[16],
                            max_tokens=(max_tokens, max_tokens), prompts=prompts, temperature=0.0,
                            ignore_eos=True, speculative=None, seed=1, json=True)
    ns.prompt_list = loadgen.load_prompts(prompts)
    return ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build", "release", "apps", "tandem"))
    ap.add_argument("--pair", choices=("smollm2", "qwen"), default="smollm2")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--policies", default="fixed", help="speculation-on configurations: fixed,adaptive,...")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.jsonl"))
    ap.add_argument("--out", help="write all results as JSON")
    ap.add_argument("--server-args", default="",
                    help="more `tandem serve` arguments, e.g. '--device cuda --gpu-mem 24G' (bench/gpu_check.sh)")
    ap.add_argument("--ctx", type=int, default=1024)
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
    results = []
    for label, extra in configs:
        port = free_port()
        log = tempfile.NamedTemporaryFile("w+", prefix=f"serve-{label.replace('/', '-')}-", suffix=".log", delete=False)
        proc = start_server(a.tandem, base + extra, port, log)
        try:
            for c in levels:
                n = max(4, a.waves * c)
                print(f"{label}: {c} streams, {n} requests...", file=sys.stderr)
                m0 = metrics(port)
                lg = loadgen_args(port, c, n, a.max_tokens, a.prompts)
                res, wall = asyncio.run(loadgen.run(lg))
                with contextlib.redirect_stdout(io.StringIO()):
                    out = loadgen.report(lg, res, wall)
                m1 = metrics(port)
                drafted = m1.get("tandem_spec_draft_tokens_total", 0) - m0.get("tandem_spec_draft_tokens_total", 0)
                accepted = m1.get("tandem_spec_accepted_tokens_total", 0) - m0.get("tandem_spec_accepted_tokens_total", 0)
                out["acceptance"] = accepted / drafted if drafted else None
                out["config"] = label
                results.append(out)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            os.unlink(log.name)
    print(f"\n{a.pair}: {a.max_tokens} tokens per request, greedy, chat endpoint, {a.threads} threads")
    print("| config | streams | requests ok | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | acceptance |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        acc = f"{r['acceptance']:.2f}" if r["acceptance"] is not None else "-"
        print(f"| {r['config']} | {r['concurrency']} | {r['ok']}/{r['requests']} | {r['output_tokens_per_s']:.1f} | "
              f"{r['ttft_ms'][50]:.0f} | {r['ttft_ms'][99]:.0f} | {r['itl_ms'][50]:.1f} | {r['itl_ms'][99]:.1f} | {acc} |")
    base_tp = {r["concurrency"]: r["output_tokens_per_s"] for r in results if r["config"] == "off"}
    for r in results:
        if r["config"] != "off" and base_tp.get(r["concurrency"]):
            print(f"  {r['config']} at {r['concurrency']} streams: throughput x{r['output_tokens_per_s'] / base_tp[r['concurrency']]:.2f} vs off")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["failed"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
