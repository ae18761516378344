#!/usr/bin/env python3
"""Load generator for `tandem serve` (or any OpenAI-compatible server): N concurrent
streaming clients over loopback, standard library only (asyncio, raw HTTP/1.1 + SSE).

    python3 bench/loadgen.py --port 8080 --concurrency 16 --requests 64 --duration 120 \\
        --prompt-words 16,128,512 --max-tokens 16:128 [--endpoint chat] [--speculative ngram]
        [--prompts bench/prompts.jsonl]

Prompts are random words (--prompt-words) unless --prompts names a file (.jsonl with
{"prompt": ...} per line, or one prompt per line): then request i gets prompt i mod count,
which is what speculation should be measured on (random words give it nothing to agree on).

Every request streams with stream_options.include_usage, so completion tokens are the
server's count. Reports requests ok/failed (by reason), output tokens/s, requests/s, and
p50/p90/p99 of time to first token (TTFT), inter-token latency, time per output token per
request (TPOT) and the gaps between arrivals.

Inter-token latency (ITL) is what a stream waits per token. Chunks that arrive together (within
--burst-ms of each other: the tokens one scheduler step accepted, sent one chunk each) are one
burst; the wait before a burst is shared by its tokens, so a step that took 90 ms and delivered
three tokens counts three waits of 30 ms, and one that delivered a single token one of 90 ms.
GAP is the raw wait between arrivals (the longest pause a reader sees), whatever they carried. Bounded: stops issuing at --requests or after
--duration seconds, whichever first; each request has --timeout.
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time

WORDS = ("the of and to in is was for on that with as by at from his her an it be this are or which one had "
         "not but what all were when we there can been has more if no out do so up said about into than them "
         "time could some these two may first then only new like years other would way made after over").split()


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Result:
    def __init__(self):
        self.ok = False
        self.error = None
        self.ttft = None
        self.itl = []
        self.tokens = 0
        self.prompt_tokens = 0
        self.start = self.end = 0.0
        self.first = self.last = None
        self.arrivals = []  # arrival time of each content chunk


async def read_body_chunks(reader, headers):
    """Yields body bytes of a chunked or close-delimited response as they arrive."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise ConnectionError("connection closed inside a chunked body")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()  # the CRLF after the last chunk (no trailers)
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def one_request(args, body, res):
    res.start = time.perf_counter()
    reader, writer = await asyncio.open_connection(args.host, args.port)
    try:
        payload = json.dumps(body).encode()
        path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
        head = (f"POST {path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n")
        if args.api_key:
            head += f"Authorization: Bearer {args.api_key}\r\n"
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.split()
        status = int(parts[1]) if len(parts) > 1 else 0
        headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        buf = b""
        done = False
        async for data in read_body_chunks(reader, headers):
            if status != 200:
                buf += data
                continue
            buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if not line.startswith(b"data: "):
                        continue
                    text = line[6:]
                    if text == b"[DONE]":
                        done = True
                        continue
                    handle_event(json.loads(text), res, args.endpoint)
        res.end = time.perf_counter()
        if status != 200:
            try:
                res.error = f"HTTP {status} {json.loads(buf)['error'].get('code')}"
            except (ValueError, KeyError, TypeError):
                res.error = f"HTTP {status}"
        elif not done:
            res.error = "stream ended without [DONE]"
        else:
            res.ok = res.error is None
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def handle_event(obj, res, endpoint):
    now = time.perf_counter()
    if "error" in obj:
        res.error = "error event: " + str(obj["error"].get("message"))[:80]
        return
    if obj.get("usage"):
        res.tokens = obj["usage"]["completion_tokens"]
        res.prompt_tokens = obj["usage"]["prompt_tokens"]
    for ch in obj.get("choices") or []:
        text = ch.get("delta", {}).get("content") if endpoint == "chat" else ch.get("text")
        if not text:
            continue
        if res.first is None:
            res.first = now
            res.ttft = now - res.start
        else:
            res.itl.append(now - res.last)
        res.last = now
        res.arrivals.append(now)


def load_prompts(path):
    prompts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            prompts.append(json.loads(line)["prompt"] if path.endswith(".jsonl") else line)
    if not prompts:
        raise SystemExit(f"{path}: no prompts")
    return prompts


def make_prompt(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def client(args, rng, state, results):
    while True:
        if state["issued"] >= args.requests or time.perf_counter() >= state["deadline"]:
            return
        state["issued"] += 1
        words = rng.choice(args.prompt_words)
        max_tokens = rng.randint(args.max_tokens[0], args.max_tokens[1])
        body = {"max_tokens": max_tokens, "temperature": args.temperature, "stream": True,
                "stream_options": {"include_usage": True}}
        if args.model:
            body["model"] = args.model
        if args.ignore_eos:
            body["ignore_eos"] = True
        if args.speculative:
            body["speculative"] = {"mode": args.speculative}
        prompt = (args.prompt_list[(state["issued"] - 1) % len(args.prompt_list)] if args.prompt_list
                  else make_prompt(rng, words))
        if args.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        res = Result()
        try:
            await asyncio.wait_for(one_request(args, body, res), args.timeout)
        except asyncio.TimeoutError:
            res.error = "timeout"
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as e:
            res.error = f"{type(e).__name__}: {e}"[:100]
        if not res.end:
            res.end = time.perf_counter()
        results.append(res)


async def run(args):
    rng = random.Random(args.seed)
    state = {"issued": 0, "deadline": time.perf_counter() + args.duration}
    results = []
    t0 = time.perf_counter()
    await asyncio.gather(*(client(args, random.Random(rng.random()), state, results) for _ in range(args.concurrency)))
    return results, time.perf_counter() - t0


def burst_waits(r, burst_s):
    """Per-token waits of one request (see the module's ITL): chunks within burst_s of the one
    before form a burst, and the wait before a burst is divided among its tokens. A chunk
    carries r.tokens / chunks tokens on average (more than one when writes were coalesced).
    The first burst's wait is the TTFT, not counted here."""
    if len(r.arrivals) < 2:
        return []
    per_chunk = max(1.0, r.tokens / len(r.arrivals)) if r.tokens else 1.0
    bursts = [[r.arrivals[0], r.arrivals[0], 1]]  # first arrival, last arrival, chunks
    for t in r.arrivals[1:]:
        if t - bursts[-1][1] <= burst_s:
            bursts[-1][1] = t
            bursts[-1][2] += 1
        else:
            bursts.append([t, t, 1])
    waits = []
    for prev, b in zip(bursts, bursts[1:]):
        n = b[2] * per_chunk
        waits.extend([(b[0] - prev[1]) / n] * max(1, round(n)))
    return waits


def report(args, results, wall):
    ok = [r for r in results if r.ok]
    errors = {}
    for r in results:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    tokens = sum(r.tokens for r in ok)
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = []
    gaps = []
    for r in ok:
        itl.extend(burst_waits(r, getattr(args, "burst_ms", 2.0) / 1000.0))
        gaps.extend(r.itl)
    tpot = [(r.last - r.first) / (r.tokens - 1) for r in ok if r.first is not None and r.tokens > 1]
    out = {
        "concurrency": args.concurrency, "requests": len(results), "ok": len(ok), "failed": len(results) - len(ok),
        "errors": errors, "wall_s": wall, "output_tokens": tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "output_tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "requests_per_s": len(ok) / wall if wall > 0 else 0.0,
        "ttft_ms": {p: 1000 * percentile(ttft, p) for p in (50, 90, 99)},
        "itl_ms": {p: 1000 * percentile(itl, p) for p in (50, 90, 99)},
        "tpot_ms": {p: 1000 * percentile(tpot, p) for p in (50, 90, 99)},
        "gap_ms": {p: 1000 * percentile(gaps, p) for p in (50, 90, 99)},
        "ttft_mean_ms": 1000 * statistics.fmean(ttft) if ttft else float("nan"),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    print(f"requests: {out['ok']} ok, {out['failed']} failed in {wall:.1f} s "
          f"(concurrency {args.concurrency}, {args.endpoint})")
    for e, n in sorted(errors.items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d} × {e}")
    print(f"throughput: {out['output_tokens_per_s']:.1f} output tokens/s, {out['requests_per_s']:.2f} requests/s "
          f"({tokens} output, {out['prompt_tokens']} prompt tokens)")
    for name in ("ttft_ms", "itl_ms", "tpot_ms", "gap_ms"):
        q = out[name]
        print(f"{name[:-3].upper():5s} p50 {q[50]:8.1f} ms   p90 {q[90]:8.1f} ms   p99 {q[99]:8.1f} ms")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--model", default="", help="model id to send (default: none, the served model)")
    ap.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("-n", "--requests", type=int, default=32, help="total requests (upper bound)")
    ap.add_argument("-d", "--duration", type=float, default=60.0, help="stop issuing after this many seconds")
    ap.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, seconds")
    ap.add_argument("--prompt-words", default="16,64,256", help="prompt lengths in words, drawn uniformly")
    ap.add_argument("--max-tokens", default="16:64", help="MIN:MAX output tokens per request, drawn uniformly")
    ap.add_argument("--prompts", help="prompt file (.jsonl with {\"prompt\"} or one per line) instead of random words")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true", help="generate exactly max_tokens (tandem/vLLM extension)")
    ap.add_argument("--speculative", choices=("none", "ngram", "model"), help="per-request speculation (extension)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    ap.add_argument("--burst-ms", type=float, default=2.0,
                    help="chunks arriving within this of each other are one burst (one step's tokens)")
    args = ap.parse_args()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        ap.error("loopback only: --host must be 127.0.0.1, localhost or ::1")
    args.prompt_words = [int(w) for w in args.prompt_words.split(",")]
    args.prompt_list = load_prompts(args.prompts) if args.prompts else None
    lo, _, hi = args.max_tokens.partition(":")
    args.max_tokens = (int(lo), int(hi or lo))
    if args.concurrency < 1 or args.requests < 1 or min(args.max_tokens) < 1:
        ap.error("concurrency, requests and max tokens must be positive")
    results, wall = asyncio.run(run(args))
    out = report(args, results, wall)
    return 0 if out["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
