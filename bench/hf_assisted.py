#!/usr/bin/env python3
"""Hugging Face transformers' assisted generation on the same GGUF pair and prompts as
tandem: the peer figure the CUDA speculative bar is stated against (the CUDA backend's speculative
>= 3x HF assisted generation on the Qwen pair).

    python3 bench/hf_assisted.py --target Qwen2.5-Coder-1.5B.gguf --draft Qwen2.5-Coder-0.5B.gguf \
        [-p PROMPT ... | --prompts bench/prompts.jsonl --category code] [-n 128] [--device cuda] \
        [--dtype bfloat16] [--json out.json]

The GGUFs load through transformers' gguf_file= (dequantized to --dtype: HF has no
quantized GGUF kernels, which is part of what the comparison shows). Greedy, no EOS stop
(min_new_tokens = n), one prompt at a time: plain generate(), then
generate(assistant_model=draft). Each is warmed up once; the printed figures are tok/s
of new tokens over the whole generate() call. Needs torch, transformers and gguf.
"""
import argparse
import json
import os
import sys
import time


def load_prompts(path, category, limit):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if category and rec.get("category") != category:
                continue
            out.append(rec["prompt"])
    return out[:limit]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompts.jsonl"))
    ap.add_argument("-p", "--prompt", action="append", help="a prompt (repeatable); else from --prompts")
    ap.add_argument("--category", default="", help="only --prompts lines of this category")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print(f"hf_assisted: {e} (needs torch and transformers)", file=sys.stderr)
        return 2
    dtype = getattr(torch, a.dtype)

    def load(path):
        d, f = os.path.split(os.path.abspath(path))
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=dtype).to(a.device).eval()
        return m

    t0 = time.time()
    d, f = os.path.split(os.path.abspath(a.target))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    target, draft = load(a.target), load(a.draft)
    load_s = time.time() - t0
    prompts = a.prompt or load_prompts(a.prompts, a.category, a.limit)
    if not prompts:
        print("hf_assisted: no prompts", file=sys.stderr)
        return 2

    def sync():
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    def run(ids, assistant):
        kw = dict(max_new_tokens=a.n, min_new_tokens=a.n, do_sample=False, pad_token_id=tok.eos_token_id)
        if assistant is not None:
            kw["assistant_model"] = assistant
        sync()
        t = time.time()
        with torch.no_grad():
            out = target.generate(ids, **kw)
        sync()
        return out[0, ids.shape[1]:].tolist(), time.time() - t

    rows = []
    warm = tok(prompts[0], return_tensors="pt").input_ids.to(a.device)
    run(warm, None)
    run(warm, draft)
    for p in prompts:
        ids = tok(p, return_tensors="pt").input_ids.to(a.device)
        plain, tp = run(ids, None)
        spec, ts = run(ids, draft)
        rows.append({"prompt": p[:40], "plain_tok_s": len(plain) / tp, "assisted_tok_s": len(spec) / ts,
                     "same_tokens": plain == spec})
    mean = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    summary = {"transformers": transformers.__version__, "torch": torch.__version__, "device": a.device,
               "dtype": a.dtype, "n": a.n, "load_s": load_s, "rows": rows,
               "plain_tok_s": mean("plain_tok_s"), "assisted_tok_s": mean("assisted_tok_s")}
    print("| prompt | plain tok/s | assisted tok/s | same tokens |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['prompt']!r} | {r['plain_tok_s']:.1f} | {r['assisted_tok_s']:.1f} | {r['same_tokens']} |")
    print(f"mean: plain {summary['plain_tok_s']:.1f} tok/s, assisted {summary['assisted_tok_s']:.1f} tok/s "
          f"(transformers {transformers.__version__}, {a.dtype}, load {load_s:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
