#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses.

    python3 tests/fuzz/make_corpus.py [--models DIR]          the committed text seeds
    python3 tests/fuzz/make_corpus.py --binary-only --out DIR   the GGUF and safetensors seeds,
                                                                into DIR/gguf and DIR/safetensors

- gguf/: binary, so never committed (*.gguf is ignored): ctest (fixture fuzz.seeds.gguf) and
  bench/fuzz.sh write them at test time into the build folder. They are the real models'
  headers and metadata when the models are present (every key; arrays such as the
  vocabulary cut to their first 24 items) with their first tensor infos, as two small files
  per model: `<model>.meta.gguf` keeps the real tensor shapes and offsets but no data (the
  reader must refuse it: the tensors lie outside the file), and `<model>.small.gguf` has
  the tensors shrunk to a few elements with their data (valid); and, always, model-shaped
  files written here (a llama / qwen2 / gemma3 header with a byte-level BPE or SentencePiece
  vocabulary, a chat template and one small tensor of every weight type), so the seeds do
  not depend on which models a machine has. tests/fuzz/corpus/gguf/ holds only the inputs
  that found bugs (regress_*).
- chat_template/: the test templates (tests/data/chat_template/templates) and the real
  models' own, each also with variables; runaway templates.
- tokenizer/, openai_request/, http/: hand-written inputs in each harness's format.
- json_schema/: the end-to-end schemas (tests/data/json_schemas) and hand-written edge cases.
Only the standard library: GGUF is parsed and written here directly.
"""
import argparse
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
OUT_DIR = [OUT]  # where write() puts files: the committed corpus, or --out
WRITE_GGUF = [False]  # binary seeds only where asked (--binary-only): never into the committed corpus

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q", F64: "d"}


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        n = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.f.read(n))[0]

    def string(self):
        n = self.take("Q")
        return self.f.read(n)

    def value(self, t, cut):
        if t == STR:
            return self.string()
        if t == ARR:
            et, n = self.take("I"), self.take("Q")
            items = []
            for i in range(n):
                v = self.value(et, cut)
                if i < cut:
                    items.append(v)
            return (et, items)
        return self.take(SCALAR[t])


def write_value(out, t, v):
    if t == STR:
        out += struct.pack("<Q", len(v)) + v
    elif t == ARR:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for x in items:
            write_value(out, et, x)
    else:
        out += struct.pack("<" + SCALAR[t], v)


def read_gguf(path, cut=24, max_tensors=6):
    with open(path, "rb") as f:
        r = Reader(f)
        assert f.read(4) == b"GGUF"
        version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
        kvs = []
        for _ in range(n_kv):
            k = r.string()
            t = r.take("I")
            kvs.append((k, t, r.value(t, cut)))
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            nd = r.take("I")
            dims = [r.take("Q") for _ in range(nd)]
            ttype, off = r.take("I"), r.take("Q")
            if len(tensors) < max_tensors:
                tensors.append((name, dims, ttype, off))
    return version, kvs, tensors


def build(version, kvs, tensors, data=b""):
    out = bytearray(b"GGUF") + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t)
        write_value(out, t, v)
    for name, dims, ttype, off in tensors:
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
        for d in dims:
            out += struct.pack("<Q", d)
        out += struct.pack("<IQ", ttype, off)
    out += b"\0" * ((-len(out)) % 32)
    return bytes(out + data)


def write(sub, name, data):
    if sub in ("gguf", "safetensors") and not WRITE_GGUF[0]:
        return
    d = os.path.join(OUT_DIR[0], sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def gguf_seeds(models_dir):
    templates = {}
    for key, fname in [("smollm2", "smollm2-135m-instruct-q4_1.gguf"), ("qwen0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
                       ("gemma3", "gemma-3-270m-q4_k_m.gguf")]:
        path = os.path.join(models_dir, fname)
        if not os.path.exists(path):
            cands = [f for f in os.listdir(models_dir) if f.startswith(key.split(".")[0][:5])] if os.path.isdir(models_dir) else []
            if not cands:
                print(f"  {key}: not in {models_dir}, skipped", file=sys.stderr)
                continue
            path = os.path.join(models_dir, sorted(cands)[0])
        version, kvs, tensors = read_gguf(path)
        for k, t, v in kvs:
            if k == b"tokenizer.chat_template":
                templates[key] = v.decode("utf-8")
        # Real shapes and offsets, no data: the reader must refuse the tensors.
        write("gguf", f"{key}.meta.gguf", build(version, kvs, tensors))
        # Shrunk tensors (F32, 8 x 2) with their data: a valid file.
        small = [(name, [8, 2], F32, i * 64) for i, (name, _, _, _) in enumerate(tensors)]
        write("gguf", f"{key}.small.gguf", build(version, kvs, small, bytes(64 * len(small))))
        print(f"  {key}: {len(kvs)} keys, {len(tensors)} tensors", file=sys.stderr)
    synthetic_model_seeds()
    # A few hand-made shapes of the header.
    write("gguf", "empty_v3.gguf", build(3, [], []))
    write("gguf", "v2_one_string.gguf", build(2, [(b"general.architecture", STR, b"llama")], []))
    write("gguf", "nested_array.gguf", build(3, [(b"a", ARR, (ARR, [(I32, [1, 2]), (I32, [])]))], []))
    return templates


# (GGML type id, elements per block, bytes per block) of every weight type the engine reads.
WEIGHT_TYPES = [(0, 1, 4), (1, 1, 2), (30, 1, 2), (2, 32, 18), (3, 32, 20), (6, 32, 22), (7, 32, 24),
                (8, 32, 34), (10, 256, 84), (11, 256, 110), (12, 256, 144), (13, 256, 176), (14, 256, 210)]


def synthetic_model_seeds():
    """Model-shaped GGUFs that need no real model: what a loader reads first (architecture,
    hyperparameters, a tokenizer, a chat template) and one 256 x 2 tensor of every weight type
    with its bytes (deterministic filler), tensors aligned to 32 bytes as GGUF requires."""
    byte_level = [bytes([0xC4, 0xA0 + i]) if i < 32 else bytes([0x21 + i % 90]) for i in range(48)]
    tokens = [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"] + sorted(set(byte_level)) + [b"he", b"ll", b"hell", b"\xc4\xa0w"]
    merges = [b"h e", b"l l", b"he ll", b"\xc4\xa0 w"]
    template = (b"{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                b"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    for arch, tok_model in [(b"llama", b"gpt2"), (b"qwen2", b"gpt2"), (b"gemma3", b"llama")]:
        a = arch
        kvs = [(b"general.architecture", STR, arch), (b"general.alignment", U32, 32),
               (a + b".block_count", U32, 1), (a + b".context_length", U32, 64), (a + b".embedding_length", U32, 256),
               (a + b".feed_forward_length", U32, 512), (a + b".attention.head_count", U32, 4),
               (a + b".attention.head_count_kv", U32, 2), (a + b".attention.layer_norm_rms_epsilon", F32, 1e-5),
               (a + b".rope.freq_base", F32, 10000.0),
               (b"tokenizer.ggml.model", STR, tok_model), (b"tokenizer.ggml.tokens", ARR, (STR, tokens)),
               (b"tokenizer.ggml.token_type", ARR, (I32, [3, 3, 3] + [1] * (len(tokens) - 3))),
               (b"tokenizer.ggml.bos_token_id", U32, 1), (b"tokenizer.ggml.eos_token_id", U32, 2),
               (b"tokenizer.chat_template", STR, template)]
        if tok_model == b"gpt2":
            kvs.append((b"tokenizer.ggml.merges", ARR, (STR, merges)))
            kvs.append((b"tokenizer.ggml.pre", STR, b"qwen2" if arch == b"qwen2" else b"llama-bpe"))
        else:
            kvs.append((b"tokenizer.ggml.scores", ARR, (F32, [float(-i) for i in range(len(tokens))])))
        if arch == b"gemma3":
            kvs += [(a + b".attention.sliding_window", U32, 16), (a + b".final_logit_softcapping", F32, 30.0)]
        tensors, data = [], bytearray()
        for ttype, block, size in WEIGHT_TYPES:
            nbytes = 256 // block * size * 2
            tensors.append((f"w.{ttype}.weight".encode(), [256, 2], ttype, len(data)))
            data += bytes((i * 37 + ttype) % 251 for i in range(nbytes))
            data += b"\0" * ((-len(data)) % 32)
        write("gguf", f"synthetic_{arch.decode()}.gguf", build(3, kvs, tensors, bytes(data)))


def template_seeds(model_templates):
    tdir = os.path.join(ROOT, "tests", "data", "chat_template", "templates")
    variables = json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                         {"role": "assistant", "content": "Hello!", "tool_calls": [
                                             {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
                                         {"role": "tool", "content": "42"}],
                            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                            "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"})
    n = 0
    for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            src = f.read()
        base = os.path.splitext(name)[0]
        write("chat_template", f"{base}.jinja", src)
        write("chat_template", f"{base}.vars", src + "\n@@VARS@@\n" + variables)
        n += 1
    for key, src in model_templates.items():
        write("chat_template", f"model_{key}.jinja", src)
        write("chat_template", f"model_{key}.vars", src + "\n@@VARS@@\n" + variables)
    hostile = {
        "range_huge": "{% for i in range(10**9) %}x{% endfor %}",
        "nested_loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "big_copies": "{% for i in range(100000) %}{% set s = 'x' * 60000000 %}{% endfor %}",
        "doubling": "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "deep_parens": "{{ " + "(" * 300 + "1" + ")" * 300 + " }}",
        "filters": "{{ messages | map(attribute='content') | join(', ') | upper | replace('A', 'bb') | length }}"
                   "{{ [3,1,2] | sort | reverse | list | tojson }}{{ {'b': 1, 'a': 2} | dictsort | tojson }}",
        "slices": "{% for m in messages[::-1] %}{{ m.content[1:-1] }}{{ loop.index }}{% endfor %}{{ 'abc'[::-2] }}",
    }
    for k, v in hostile.items():
        write("chat_template", f"limit_{k}.jinja", v)
    return n


def tokenizer_seeds():
    strings_path = os.path.join(ROOT, "tests", "data", "tokenizer", "strings.txt")
    texts = ["Hello, world!", " leading space", "tabs\tand\nnewlines\r\n", "Unicode: café, 日本語, emoji 🎉👍🏽",
             "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>", "def f(x):\n    return x**2  # comment\n",
             "   ", "1234567890 3.14159 -42", "\xff\xfe invalid", "Ünïcödé ß ﬁ ℌ", "a" * 300]
    if os.path.exists(strings_path):
        with open(strings_path, encoding="utf-8", errors="surrogateescape") as f:
            texts += [line.rstrip("\n") for line in f][:20]
    n = 0
    for tok in range(5):
        for i, t in enumerate(texts):
            mode = [0, 1, 2, 3, 4][i % 5]
            data = t.encode("utf-8", errors="surrogateescape")
            write("tokenizer", f"enc_t{tok}_{i:02d}", bytes([tok, mode]) + data)
            n += 1
        ids = struct.pack("<8i", 0, 1, 2, 300, 599, 600, 650, -1)
        write("tokenizer", f"dec_t{tok}", bytes([tok, 8 | 4]) + ids)
        write("tokenizer", f"dec_raw_t{tok}", bytes([tok, 8 | 16]) + ids + struct.pack("<2i", 2**31 - 1, -2**31))
    return n


def openai_seeds():
    bodies = [
        (1, {"messages": [{"role": "user", "content": "hi"}]}),
        (1, {"model": "smollm2", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "max_tokens": 7, "temperature": 0.5,
             "top_p": 0.9, "top_k": 20, "min_p": 0.1, "seed": 42, "stop": ["a", "bb"], "stream": True,
             "stream_options": {"include_usage": True}, "presence_penalty": 0.1, "frequency_penalty": 0.2,
             "repetition_penalty": 1.1, "ignore_eos": True}),
        (3, {"messages": [{"role": "user", "content": "x"}], "speculative": {"mode": "model", "draft_max": 4,
                                                                            "draft_min": 1, "policy": "adaptive"}}),
        (5, {"messages": [{"role": "developer", "content": "x"}], "max_completion_tokens": 3, "n": 1}),
        (9, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 65}),
        (0, {"prompt": "Once upon a time", "max_tokens": 16}),
        (0, {"prompt": ["one string"], "stop": "\n", "echo": False}),
        (0, {"prompt": [1, 2, 3, 999], "seed": -1}),
        (0, {"prompt": [1, 2, 1000]}),
        (4, {"prompt": "x", "speculative": {"mode": "ngram", "draft_max": 3}}),
        (0, {"prompt": "x", "logprobs": 2}),
        (0, {"prompt": "x", "temperature": "hot"}),
        (0, {"prompt": "x", "max_tokens": 1e300}),
    ]
    for i, (sel, b) in enumerate(bodies):
        write("openai_request", f"body_{i:02d}.json", bytes([sel]) + json.dumps(b).encode())
    raw = [b'{"prompt": "x", "max_tokens": 4.0}', b'{"messages": null}', b"[]", b"{", b'{"prompt":"\\ud800"}',
           b'{"prompt": "x", "stop": ["' + b'","'.join(b"s" for _ in range(20)) + b'"]}',
           b'{"messages": [{"role": "user", "content": "x"}]' + b" " * 10 + b"}"]
    for i, b in enumerate(raw):
        write("openai_request", f"raw_{i:02d}.json", bytes([i % 2]) + b)
    return len(bodies) + len(raw)


def http_seeds():
    def req(method, path, body=b"", headers=()):
        h = [f"{method} {path} HTTP/1.1", "Host: x"] + list(headers)
        if body:
            h += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        return ("\r\n".join(h) + "\r\n\r\n").encode() + body

    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}).encode()
    stream = json.dumps({"prompt": "Once", "max_tokens": 3, "stream": True,
                         "stream_options": {"include_usage": True}}).encode()
    seeds = {
        "health": req("GET", "/health"),
        "metrics": req("GET", "/metrics"),
        "models": req("GET", "/v1/models") + req("GET", "/v1/models/tiny"),
        "chat": req("POST", "/v1/chat/completions", chat),
        "completion_stream": req("POST", "/v1/completions", stream),
        "pipelined": req("GET", "/health") + req("POST", "/v1/completions", b'{"prompt":"a","max_tokens":2}') +
                     req("GET", "/v1/models"),
        "chunked": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\n{\"pro\r\n16\r\nmpt\":\"a\",\"max_tokens\":2}\r\n0\r\n\r\n",
        "http10": b"GET /health HTTP/1.0\r\n\r\n",
        "expect": req("POST", "/v1/completions", b'{"prompt":"a"}', ["Expect: 100-continue"]),
        "bad_method": req("DELETE", "/v1/models"),
        "not_found": req("GET", "/nope?x=1"),
        "bad_json": req("POST", "/v1/chat/completions", b'{"messages": ['),
        "garbage": b"\x00\x01GET / HTTP/9.9\r\n\r\n",
        "too_large": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{}",
        "bad_length": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
        "close": req("GET", "/health", headers=["Connection: close"]) + req("GET", "/health"),
        "auth": req("GET", "/v1/models", headers=["Authorization: Bearer k"]),
        "partial": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"prompt\":",
    }
    for k, v in seeds.items():
        write("http", k + ".http", v)
    return len(seeds)


def json_schema_seeds():
    """The end-to-end schemas (tests/data/json_schemas) and hand-written edge cases."""
    sdir = os.path.join(ROOT, "tests", "data", "json_schemas")
    n = 0
    for name in sorted(os.listdir(sdir)):
        if name.endswith(".json"):
            with open(os.path.join(sdir, name), "rb") as f:
                write("json_schema", "data_" + name, f.read())
            n += 1
    seeds = {
        "limits": '{"type":"object","properties":{"a":{"type":"string","minLength":1,"maxLength":3},"b":{"type":"array",'
                  '"items":{"type":"integer","minimum":-7,"maximum":300},"minItems":1,"maxItems":4}},"required":["b"]}',
        "left_recursion": '{"anyOf":[{"$ref":"#"},{"type":"string"}]}',
        "mutual_refs": '{"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/b"}},"b":{"anyOf":[{"$ref":"#/$defs/a"},'
                       '{"type":"null"}]}},"$ref":"#/$defs/a"}',
        "enum_values": '{"enum":["x\\"y\\\\z\\n",1.5e300,-0.0,18446744073709551615,-9223372036854775808,[{"k":[]}],{},null,true]}',
        "odd_keys": '{"type":"object","properties":{"quo\\"te":{},"\\u00e9t\\u00e9":{"const":1},"":{"type":"boolean"}},'
                    '"additionalProperties":{"type":"number"}}',
        "pattern": '{"type":"string","pattern":"^(?:(?:\\\\+\\\\d{1,3} )?[A-Z][a-z]{2,}|x.[^\\\\s\\"]*?\\\\x41)$"}',
        "pattern_search": '{"type":"string","pattern":"(cat|dog){2}[\\\\W\\\\n]"}',
        "unsupported_pattern": '{"type":"string","pattern":"^(a)\\\\1(?=b)$"}',
        "format_nullable": '{"type":["string","null"],"format":"date-time"}',
        "tuple": '{"type":"array","prefixItems":[{"type":"string","format":"uuid"},{"const":"x"}],"items":{"type":"boolean"},'
                 '"minItems":3,"maxItems":5}',
        "too_deep": '{"items":' * 70 + "{}" + "}" * 70,
        "truncated": '{"type": "object", "properties": {"a": ',
    }
    for k, v in seeds.items():
        write("json_schema", k + ".json", v)
    return n + len(seeds)


def safetensors_seeds():
    """Checkpoint-shaped safetensors files: a Qwen2 layer's tensors in the float dtypes, an
    integer tensor, an empty one, metadata, and a header padded with spaces."""
    def st(tensors, metadata=None, pad=True):
        header, data = {}, b""
        if metadata is not None:
            header["__metadata__"] = metadata
        for name, dtype, shape, size in tensors:
            n = 1
            for d in shape:
                n *= d
            nbytes = n * size
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
            data += bytes((i * 37 + 11) % 256 for i in range(nbytes))
        text = json.dumps(header, separators=(",", ":")).encode()
        if pad:
            text += b" " * ((-len(text)) % 8)
        return struct.pack("<Q", len(text)) + text + data

    layer = [("model.layers.0.self_attn.q_proj.weight", "BF16", [8, 8], 2),
             ("model.layers.0.self_attn.q_proj.bias", "BF16", [8], 2),
             ("model.layers.0.input_layernorm.weight", "F32", [8], 4),
             ("model.layers.0.mlp.down_proj.weight", "F16", [8, 16], 2)]
    write("safetensors", "qwen2_layer", st(layer, {"format": "pt"}))
    write("safetensors", "embed_and_head", st([("model.embed_tokens.weight", "F32", [16, 8], 4),
                                                ("lm_head.weight", "BF16", [16, 8], 2), ("model.norm.weight", "F32", [8], 4)]))
    write("safetensors", "odd_dtypes", st([("a", "I64", [3], 8), ("b", "U8", [5], 1), ("c", "F8_E4M3", [2, 2], 1),
                                           ("d", "BOOL", [1], 1), ("e", "F64", [2], 8)], pad=False))
    write("safetensors", "empty_tensor", st([("model.layers.1.self_attn.k_norm.weight", "F32", [0], 4)]))
    write("safetensors", "empty_header", st([], {}))
    return 5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.environ.get("TANDEM_MODELS", os.path.expanduser("~/.cache/tandem/models")))
    ap.add_argument("--binary-only", "--gguf-only", dest="binary_only", action="store_true",
                    help="write only the binary seeds, GGUF and safetensors (not committed)")
    ap.add_argument("--out", help="write into this folder instead of tests/fuzz/corpus")
    a = ap.parse_args()
    if a.out:
        OUT_DIR[0] = a.out
    WRITE_GGUF[0] = a.binary_only
    templates = gguf_seeds(a.models)
    safetensors_seeds()
    if a.binary_only:
        return
    print(f"chat templates: {template_seeds(templates)} test templates + {len(templates)} models'", file=sys.stderr)
    print(f"tokenizer: {tokenizer_seeds()}, openai_request: {openai_seeds()}, http: {http_seeds()}", file=sys.stderr)
    print(f"json_schema: {json_schema_seeds()}", file=sys.stderr)


if __name__ == "__main__":
    main()
