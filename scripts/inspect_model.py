#!/usr/bin/env python3
"""Print what a GGUF model file really holds.

Usage:
  python3 scripts/inspect_model.py MODEL.gguf [--json] [--all-special]
  python3 scripts/inspect_model.py A.gguf --compare-tokenizer B.gguf [--json]

Reports: architecture, identity (general.*), parameter count (sum of tensor
numels), file size, tensor type mix (count and bytes per ggml type), all
hyperparameters (`<arch>.*` keys), the tokenizer (model, pre, vocab size,
bos/eos/eot/pad/unk ids and texts, add_bos/add_eos, chat template head,
special/control tokens) and embedding/output row counts vs the token count
(padding rows).

--compare-tokenizer checks whether two files share a vocabulary (tokenizer
model, pre-tokenizer, token list, token types, merges, special ids) and prints
the first difference of each; exit status 0 when the vocabularies are
interchangeable for draft/target use (same model, pre, tokens, merges), 1 if not.

Needs the `gguf` PyPI package (scripts/setup.sh installs it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

try:
    import numpy as np
    from gguf import GGUFReader, GGMLQuantizationType
    from gguf.constants import GGUFValueType
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit(f"inspect_model.py needs the 'gguf' and 'numpy' packages ({e}); "
             f"run scripts/setup.sh or: python3 -m pip install 'gguf==0.17.1' 'numpy<3'")

TOKEN_TYPE_NAMES = {1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}
# (label, GGUF key stem): tokenizer.ggml.<stem>_token_id. "seperator" is the GGUF spelling.
SPECIAL_ID_KEYS = [("bos", "bos"), ("eos", "eos"), ("eot", "eot"), ("eom", "eom"), ("pad", "padding"),
                   ("unk", "unknown"), ("sep", "seperator"), ("cls", "cls"), ("mask", "mask"),
                   ("fim_pre", "fim_pre"), ("fim_suf", "fim_suf"), ("fim_mid", "fim_mid"),
                   ("fim_pad", "fim_pad"), ("fim_rep", "fim_rep"), ("fim_sep", "fim_sep")]


def field_value(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    if f.types and f.types[0] == GGUFValueType.ARRAY:
        return f.contents()  # list
    return f.contents()


def field_array(reader: GGUFReader, key: str):
    """Array field as a list, or None. Uses numpy views for numeric arrays (fast)."""
    f = reader.fields.get(key)
    if f is None:
        return None
    if len(f.types) >= 2 and f.types[1] == GGUFValueType.STRING:
        return [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]
    return [x.item() if hasattr(x, "item") else x for x in (f.parts[i][0] for i in f.data)]


def short(v, limit=120):
    if isinstance(v, list):
        if len(v) > 16:
            return f"[{', '.join(map(str, v[:8]))}, ... ({len(v)} items)]"
        return "[" + ", ".join(map(str, v)) + "]"
    s = str(v)
    return s if len(s) <= limit else s[:limit] + "..."


def tensor_rows(reader: GGUFReader, name: str):
    for t in reader.tensors:
        if t.name == name:
            shape = [int(x) for x in t.shape]  # ggml order: ne0 (row length) first
            return {"name": name, "shape_ggml": shape, "rows": shape[-1] if len(shape) > 1 else 1,
                    "type": GGMLQuantizationType(int(t.tensor_type)).name}
    return None


def inspect(path: str, all_special: bool = False) -> dict:
    reader = GGUFReader(path, "r")
    info: dict = {"file": os.path.abspath(path), "file_size": os.path.getsize(path)}
    arch = field_value(reader, "general.architecture", "?")
    info["architecture"] = arch
    info["gguf_version"] = field_value(reader, "GGUF.version")
    info["general"] = {}
    for k, f in reader.fields.items():
        if k.startswith("general."):
            v = field_array(reader, k) if f.types and f.types[0] == GGUFValueType.ARRAY else field_value(reader, k)
            info["general"][k] = v
    # parameters and type mix
    nparams = 0
    mix: dict[str, dict] = {}
    for t in reader.tensors:
        n = int(t.n_elements)
        nparams += n
        tn = GGMLQuantizationType(int(t.tensor_type)).name
        m = mix.setdefault(tn, {"count": 0, "bytes": 0, "params": 0})
        m["count"] += 1
        m["bytes"] += int(t.n_bytes)
        m["params"] += n
    info["n_tensors"] = len(reader.tensors)
    info["n_params"] = nparams
    info["tensor_bytes"] = sum(m["bytes"] for m in mix.values())
    info["type_mix"] = dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"]))
    # hyperparameters
    hp = {}
    for k, f in reader.fields.items():
        if k.startswith(arch + "."):
            hp[k] = field_array(reader, k) if f.types and f.types[0] == GGUFValueType.ARRAY else field_value(reader, k)
    info["hparams"] = hp
    # tokenizer
    tok: dict = {}
    tokens = field_array(reader, "tokenizer.ggml.tokens") or []
    ttypes = field_array(reader, "tokenizer.ggml.token_type") or []
    merges_f = reader.fields.get("tokenizer.ggml.merges")
    tok["model"] = field_value(reader, "tokenizer.ggml.model")
    tok["pre"] = field_value(reader, "tokenizer.ggml.pre")
    tok["n_tokens"] = len(tokens)
    tok["n_merges"] = len(merges_f.data) if merges_f is not None else 0
    tok["has_scores"] = "tokenizer.ggml.scores" in reader.fields
    ids = {}
    for s, stem in SPECIAL_ID_KEYS:
        v = field_value(reader, f"tokenizer.ggml.{stem}_token_id")
        if v is not None:
            v = int(v)
            ids[s] = {"id": v, "text": tokens[v] if 0 <= v < len(tokens) else None}
    tok["special_ids"] = ids
    for k in ("add_bos_token", "add_eos_token", "add_space_prefix", "add_sep_token"):
        v = field_value(reader, f"tokenizer.ggml.{k}")
        if v is not None:
            tok[k] = bool(v)
    tmpl = field_value(reader, "tokenizer.chat_template")
    tok["has_chat_template"] = tmpl is not None
    if tmpl is not None:
        tok["chat_template_len"] = len(tmpl)
        tok["chat_template_head"] = tmpl[:200]
    other_tok_keys = sorted(k for k in reader.fields if k.startswith("tokenizer.") and k not in (
        "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
        "tokenizer.ggml.scores", "tokenizer.chat_template"))
    tok["keys"] = other_tok_keys
    type_counts: dict[str, int] = {}
    special = []
    for i, ty in enumerate(ttypes):
        name = TOKEN_TYPE_NAMES.get(int(ty), str(ty))
        type_counts[name] = type_counts.get(name, 0) + 1
        if int(ty) in (3, 4) and (all_special or int(ty) == 3 or len(special) < 400):
            special.append({"id": i, "type": name, "text": tokens[i]})
    tok["token_type_counts"] = type_counts
    n_control = type_counts.get("control", 0)
    n_user = type_counts.get("user_defined", 0)
    tok["special_tokens"] = special
    tok["special_tokens_note"] = (f"{n_control} control + {n_user} user_defined"
                                  + ("" if all_special or n_user <= 400 else " (list truncated; --all-special)"))
    info["tokenizer"] = tok
    # vocab rows vs tokens
    emb = tensor_rows(reader, "token_embd.weight")
    out = tensor_rows(reader, "output.weight")
    info["token_embd"] = emb
    info["output"] = out if out else "absent (tied to token_embd)"
    if emb:
        info["padding_rows"] = emb["rows"] - len(tokens)
    # Token slots that exist only to pad the vocabulary (type "unused", e.g. Qwen's [PAD151665]..):
    # the rows exist in the embedding/output matrices but no text maps to them.
    unused = [i for i, ty in enumerate(ttypes) if int(ty) == 5]
    if unused:
        info["unused_token_slots"] = {"count": len(unused), "first_id": unused[0], "last_id": unused[-1],
                                      "first_text": tokens[unused[0]], "last_text": tokens[unused[-1]],
                                      "contiguous": unused[-1] - unused[0] + 1 == len(unused)}
    return info


def collapse_runs(special: list) -> list:
    """Collapse runs of placeholder tokens (<unusedN>, [PADN]) into one line each for display."""
    pat = re.compile(r"^(<unused\d+>|\[PAD\d+\])$")
    out, run = [], []

    def flush():
        if len(run) > 3:
            out.append(f"{run[0]['id']:7d}..{run[-1]['id']} {run[0]['type']:12s} "
                       f"{run[0]['text']!r} .. {run[-1]['text']!r} ({len(run)} placeholder tokens)")
        else:
            out.extend(f"{r['id']:7d} {r['type']:12s} {r['text']!r}" for r in run)
        run.clear()

    for s in special:
        if pat.match(s["text"]) and (not run or (run[-1]["id"] + 1 == s["id"] and run[-1]["type"] == s["type"])):
            run.append(s)
            continue
        flush()
        if pat.match(s["text"]):
            run.append(s)
        else:
            out.append(f"{s['id']:7d} {s['type']:12s} {s['text']!r}")
    flush()
    return out


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def print_human(info: dict) -> None:
    g = info["general"]
    p = print
    p(f"file:          {info['file']}")
    p(f"file size:     {info['file_size']} bytes ({fmt_bytes(info['file_size'])})")
    p(f"gguf version:  {info['gguf_version']}")
    p(f"architecture:  {info['architecture']}")
    for k in ("general.name", "general.basename", "general.finetune", "general.size_label",
              "general.organization", "general.quantization_version", "general.file_type"):
        if k in g:
            p(f"{k + ':':30s}{short(g[k])}")
    rest = [k for k in g if k not in ("general.name", "general.basename", "general.finetune", "general.size_label",
                                      "general.organization", "general.quantization_version", "general.file_type",
                                      "general.architecture")]
    for k in rest:
        p(f"{k + ':':30s}{short(g[k])}")
    p(f"parameters:    {info['n_params']:,} ({info['n_params'] / 1e6:.1f} M) in {info['n_tensors']} tensors")
    p(f"tensor bytes:  {info['tensor_bytes']} ({fmt_bytes(info['tensor_bytes'])}); "
      f"{8 * info['tensor_bytes'] / info['n_params']:.3f} bits/param")
    p("type mix:")
    for tn, m in info["type_mix"].items():
        p(f"  {tn:8s} {m['count']:4d} tensors  {m['bytes']:12d} bytes  {m['params']:12d} params")
    p("hyperparameters:")
    for k, v in info["hparams"].items():
        p(f"  {k} = {short(v)}")
    t = info["tokenizer"]
    p("tokenizer:")
    p(f"  model={t['model']} pre={t['pre']} tokens={t['n_tokens']} merges={t['n_merges']} scores={t['has_scores']}")
    for s, d in t["special_ids"].items():
        p(f"  {s:10s} id={d['id']:<7d} text={d['text']!r}")
    for k in ("add_bos_token", "add_eos_token", "add_space_prefix", "add_sep_token"):
        if k in t:
            p(f"  {k} = {t[k]}")
    p(f"  token types: {t['token_type_counts']}")
    p(f"  other keys: {', '.join(t['keys'])}")
    if t["has_chat_template"]:
        p(f"  chat_template: yes ({t['chat_template_len']} chars); first 200 chars:")
        for line in t["chat_template_head"].splitlines():
            p(f"    | {line}")
    else:
        p("  chat_template: no")
    p(f"  special/control tokens ({t['special_tokens_note']}):")
    for line in collapse_runs(t["special_tokens"]):
        p(f"    {line}")
    p(f"token_embd:    {info['token_embd']}")
    p(f"output:        {info['output']}")
    if "padding_rows" in info:
        p(f"padding rows:  {info['padding_rows']} (embedding rows - token count)")
    if "unused_token_slots" in info:
        u = info["unused_token_slots"]
        p(f"unused slots:  {u['count']} token ids of type 'unused' ({u['first_id']}..{u['last_id']}, "
          f"{u['first_text']!r}..{u['last_text']!r}): vocabulary padding inside the token list")


def compare_tokenizers(a: str, b: str) -> dict:
    ra, rb = GGUFReader(a, "r"), GGUFReader(b, "r")
    res: dict = {"a": os.path.abspath(a), "b": os.path.abspath(b)}

    def first_diff(la, lb):
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                return {"index": i, "a": x, "b": y}
        if len(la) != len(lb):
            i = min(len(la), len(lb))
            return {"index": i, "a": la[i] if i < len(la) else "<end>", "b": lb[i] if i < len(lb) else "<end>"}
        return None

    for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        va, vb = field_value(ra, k), field_value(rb, k)
        res[k] = {"same": va == vb, "a": va, "b": vb}
    for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
        la, lb = field_array(ra, k) or [], field_array(rb, k) or []
        d = first_diff(la, lb)
        res[k] = {"same": d is None, "len_a": len(la), "len_b": len(lb), "first_diff": d}
        if k == "tokenizer.ggml.tokens":
            common = min(len(la), len(lb))
            res[k]["common_prefix_len"] = next((i for i in range(common) if la[i] != lb[i]), common)
            res[k]["n_diff_in_common_range"] = sum(1 for i in range(common) if la[i] != lb[i])
    sp = {}
    for s, stem in SPECIAL_ID_KEYS:
        va = field_value(ra, f"tokenizer.ggml.{stem}_token_id")
        vb = field_value(rb, f"tokenizer.ggml.{stem}_token_id")
        if va is not None or vb is not None:
            sp[s] = {"same": va == vb, "a": None if va is None else int(va), "b": None if vb is None else int(vb)}
    res["special_ids"] = sp
    for k in ("add_bos_token", "add_eos_token"):
        va, vb = field_value(ra, f"tokenizer.ggml.{k}"), field_value(rb, f"tokenizer.ggml.{k}")
        res[k] = {"same": va == vb, "a": va, "b": vb}
    ta = field_value(ra, "tokenizer.chat_template")
    tb = field_value(rb, "tokenizer.chat_template")
    res["chat_template"] = {"same": ta == tb}
    ea, eb = tensor_rows(ra, "token_embd.weight"), tensor_rows(rb, "token_embd.weight")
    res["embedding_rows"] = {"a": ea and ea["rows"], "b": eb and eb["rows"]}
    res["vocab_compatible"] = all(res[k]["same"] for k in (
        "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    res["fully_identical"] = res["vocab_compatible"] and res["tokenizer.ggml.token_type"]["same"] and all(
        v["same"] for v in sp.values())
    return res


def print_compare(res: dict) -> None:
    print(f"A: {res['a']}\nB: {res['b']}")
    for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        r = res[k]
        print(f"{k:28s} {'same' if r['same'] else 'DIFFERENT'}  a={r['a']!r} b={r['b']!r}")
    for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
        r = res[k]
        line = f"{k:28s} {'same' if r['same'] else 'DIFFERENT'}  len a={r['len_a']} b={r['len_b']}"
        if "common_prefix_len" in r:
            line += f"  common prefix={r['common_prefix_len']} differing in common range={r['n_diff_in_common_range']}"
        print(line)
        if r["first_diff"]:
            d = r["first_diff"]
            print(f"{'':28s} first difference at index {d['index']}: a={d['a']!r} b={d['b']!r}")
    for s, r in res["special_ids"].items():
        print(f"{s + '_token_id':28s} {'same' if r['same'] else 'DIFFERENT'}  a={r['a']} b={r['b']}")
    for k in ("add_bos_token", "add_eos_token"):
        r = res[k]
        print(f"{k:28s} {'same' if r['same'] else 'DIFFERENT'}  a={r['a']} b={r['b']}")
    print(f"{'chat_template':28s} {'same' if res['chat_template']['same'] else 'DIFFERENT'}")
    print(f"{'embedding rows':28s} a={res['embedding_rows']['a']} b={res['embedding_rows']['b']}")
    print(f"vocab compatible (model, pre, tokens, merges equal): {res['vocab_compatible']}")
    print(f"fully identical (also token types, special ids):     {res['fully_identical']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--all-special", action="store_true", help="list every user_defined token too")
    ap.add_argument("--compare-tokenizer", metavar="OTHER.gguf", help="compare vocabularies with another file")
    args = ap.parse_args(argv)
    for p in [args.model] + ([args.compare_tokenizer] if args.compare_tokenizer else []):
        if not os.path.isfile(p):
            print(f"error: no such file: {p}", file=sys.stderr)
            return 2
    if args.compare_tokenizer:
        res = compare_tokenizers(args.model, args.compare_tokenizer)
        if args.json:
            json.dump(res, sys.stdout, indent=1, default=str)
            print()
        else:
            print_compare(res)
        return 0 if res["vocab_compatible"] else 1
    info = inspect(args.model, args.all_special)
    if args.json:
        json.dump(info, sys.stdout, indent=1, default=str)
        print()
    else:
        print_human(info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
