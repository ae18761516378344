#!/usr/bin/env python3
"""Independent tokenizer reference for tests/test_tokenizer.cpp.

Builds a tokenizer from a GGUF file's vocabulary with well-known libraries, not with
tandem's code:
  * "gpt2" vocabularies -> HF `tokenizers` (Rust BPE, Oniguruma regexes) configured with the
    pre-tokenizer the model's own tokenizer.json uses (see PRE_TOKENIZERS);
  * "llama" vocabularies -> Google `sentencepiece` (the library Gemma's tokenizer.model is
    for), from a ModelProto rebuilt out of the GGUF pieces/scores/types.
and writes golden ids for every string of strings.txt:

  tokenize_ref.py golden  MODEL.gguf STRINGS.txt OUT.jsonl
  tokenize_ref.py pretok  STRINGS.txt OUT.jsonl     # pre-tokenizer splits only, per regex
  tokenize_ref.py encode  MODEL.gguf TEXT            # ad-hoc: print ids of one string

Golden line: {"text": s, "ids": [...], "ids_plain": [...]} where "ids" is encode(s,
add_special=false, parse_special=true) and "ids_plain" the same with parse_special=false.

strings.txt: one string per line, with escapes \\n \\t \\r \\0 \\\\ \\xHH \\uHHHH \\UHHHHHHHH
(code points, not bytes); an empty line is the empty string; lines starting "## " are
comments.

Needs: pip install gguf numpy tokenizers sentencepiece protobuf
"""
import json
import re
import sys
import unicodedata

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
            r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
             r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def pre_tokenizer(pre):
    """The pre-tokenizer of the model's published tokenizer.json, keyed by GGUF `pre`."""
    from tokenizers import Regex, pre_tokenizers as pt
    if pre in ("gpt2", "default"):
        return pt.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder"):  # SmolLM2 / StarCoder2 tokenizer.json
        return pt.Sequence([pt.Digits(individual_digits=True),
                            pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    split = {"qwen2": QWEN2_RE, "deepseek-r1-qwen": QWEN2_RE,
             "llama-bpe": LLAMA3_RE, "llama3": LLAMA3_RE, "llama-v3": LLAMA3_RE}.get(pre)
    if split is None:
        raise SystemExit(f"tokenize_ref: no reference pre-tokenizer for pre={pre!r}")
    return pt.Sequence([pt.Split(Regex(split), behavior="isolated", invert=False),
                        pt.ByteLevel(add_prefix_space=False, use_regex=False)])


def unescape(line):
    def rep(m):
        e = m.group(1)
        simple = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}
        return simple[e] if e in simple else chr(int(e[1:], 16))
    return re.sub(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[ntr0\\])", rep, line)


def read_strings(path):
    out = []
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f.read().split("\n")[:-1]:  # the file ends with a newline
            if line.startswith("## "):
                continue
            out.append(unescape(line))
    return out


def read_gguf(path):
    from gguf import GGUFReader
    r = GGUFReader(path)

    def field(key):
        f = r.fields.get(key)
        if f is None:
            return None
        if f.types[0].name == "ARRAY":
            if f.types[1].name == "STRING":
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i][0].item() for i in f.data]
        if f.types[0].name == "STRING":
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    keys = ["model", "pre", "tokens", "scores", "token_type", "merges", "bos_token_id",
            "eos_token_id", "unknown_token_id", "padding_token_id", "add_bos_token",
            "add_eos_token", "add_space_prefix"]
    return {k: field("tokenizer.ggml." + k) for k in keys}


class BpeRef:
    """HF tokenizers BPE over the GGUF vocab, with the model's own pre-tokenizer."""

    def __init__(self, g):
        from tokenizers import AddedToken, Tokenizer, decoders, models
        tokens, types = g["tokens"], g["token_type"] or [1] * len(g["tokens"])
        vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
        merges = [tuple(m.split(" ", 1)) for m in g["merges"]]
        ignore = g["pre"] in ("llama-bpe", "llama3", "llama-v3")
        self.tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore))
        self.tok.pre_tokenizer = pre_tokenizer(g["pre"] or "default")
        self.tok.decoder = decoders.ByteLevel()
        # GGUF type 3 (control) = HF special added token; 4 (user-defined) = plain added token.
        self.tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                     for t, ty in zip(tokens, types) if ty == 3])
        self.tok.add_tokens([AddedToken(t, special=False, normalized=False)
                             for t, ty in zip(tokens, types) if ty == 4])
        assert self.tok.get_vocab_size(with_added_tokens=True) == len(tokens), "added tokens grew the vocab"

    def encode(self, text, parse_special):
        self.tok.encode_special_tokens = not parse_special
        return self.tok.encode(text, add_special_tokens=False).ids


class SpmRef:
    """Google sentencepiece, from a ModelProto rebuilt out of the GGUF pieces."""

    def __init__(self, g):
        import sentencepiece as spm
        from sentencepiece import sentencepiece_model_pb2 as pb
        tokens, scores, types = g["tokens"], g["scores"], g["token_type"]
        m = pb.ModelProto()
        for t, s, ty in zip(tokens, scores, types):
            if ty == 4 and t.strip(" ") == "" and t:
                # llama.cpp's converter respells user-defined pieces with real spaces; the
                # original model has "▁" (matching happens on the normalised text).
                t = t.replace(" ", "\u2581")
            p = m.pieces.add()
            p.piece, p.score, p.type = t, s, ty if ty in (1, 2, 3, 4, 5, 6) else 1
        ts = m.trainer_spec
        ts.model_type = pb.TrainerSpec.BPE
        ts.vocab_size = len(tokens)
        ts.byte_fallback = any(ty == 6 for ty in types)
        ts.unk_id = g["unknown_token_id"] if g["unknown_token_id"] is not None else 0
        ts.bos_id = g["bos_token_id"] if g["bos_token_id"] is not None else -1
        ts.eos_id = g["eos_token_id"] if g["eos_token_id"] is not None else -1
        ts.pad_id = g["padding_token_id"] if g["padding_token_id"] is not None else -1
        ts.unk_piece, ts.bos_piece = tokens[ts.unk_id], tokens[ts.bos_id] if ts.bos_id >= 0 else "<s>"
        ts.eos_piece = tokens[ts.eos_id] if ts.eos_id >= 0 else "</s>"
        ts.pad_piece = tokens[ts.pad_id] if ts.pad_id >= 0 else "<pad>"
        ns = m.normalizer_spec
        ns.name = "identity"
        ns.add_dummy_prefix = bool(g["add_space_prefix"]) if g["add_space_prefix"] is not None else True
        ns.remove_extra_whitespaces = False
        ns.escape_whitespaces = True
        self.sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
        assert self.sp.get_piece_size() == len(tokens)
        self.control = sorted({t for t, ty in zip(tokens, types) if ty in (2, 3) and t},
                              key=len, reverse=True)
        self.ids = {t: i for i, t in reversed(list(enumerate(tokens)))}
        self.dummy = ns.add_dummy_prefix

    def encode(self, text, parse_special):
        if not parse_special:
            return self.sp.encode(text)
        # sentencepiece never matches control pieces in text; HF-style "special added
        # tokens" are split out first (leftmost-longest), the rest encoded piece by piece.
        out, i, start = [], 0, 0
        while i < len(text):
            hit = next((c for c in self.control if text.startswith(c, i)), None)
            if hit is None:
                i += 1
                continue
            out += self._segment(text[start:i], start)
            out.append(self.ids[hit])
            i += len(hit)
            start = i
        return out + self._segment(text[start:], start)

    def _segment(self, seg, offset):
        # With a dummy prefix, sentencepiece would prefix every segment; tandem (like HF's
        # Metaspace prepend_scheme="first") only prefixes the start of the text.
        if seg and offset > 0 and self.dummy:
            raise SystemExit("tokenize_ref: dummy prefix after a special token is not modelled")
        return self.sp.encode(seg) if seg else []


def make_ref(path):
    g = read_gguf(path)
    if g["model"] == "gpt2":
        return g, BpeRef(g)
    if g["model"] == "llama":
        return g, SpmRef(g)
    raise SystemExit(f"tokenize_ref: unsupported tokenizer.ggml.model {g['model']!r}")


def cmd_golden(model, strings_path, out_path):
    g, ref = make_ref(model)
    strings = read_strings(strings_path)
    nfc_diff = 0
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        for s in strings:
            ids, plain = ref.encode(s, True), ref.encode(s, False)
            if g["pre"] == "qwen2" and unicodedata.normalize("NFC", s) != s:
                # Qwen2's own tokenizer.json normalises NFC first; GGUF does not record that.
                nfc_diff += ref.encode(unicodedata.normalize("NFC", s), True) != ids
            f.write(json.dumps({"text": s, "ids": ids, "ids_plain": plain}, ensure_ascii=True) + "\n")
    print(f"{out_path}: {len(strings)} strings, model={g['model']} pre={g['pre']}"
          + (f", {nfc_diff} would differ under Qwen2's NFC normalizer" if g["pre"] == "qwen2" else ""),
          file=sys.stderr)


def cmd_pretok(strings_path, out_path):
    """Pre-tokenizer pieces per regex family, as text (byte-level spelling undone)."""
    from tokenizers.decoders import ByteLevel
    dec = ByteLevel()
    strings = read_strings(strings_path)
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        for pre in ("gpt2", "smollm", "qwen2", "llama-bpe"):
            pt = pre_tokenizer(pre)
            for s in strings:
                pieces = [dec.decode([p]) for p, _ in pt.pre_tokenize_str(s)]
                assert "".join(pieces) == s, (pre, s)
                f.write(json.dumps({"pre": pre, "text": s, "pieces": pieces}, ensure_ascii=True) + "\n")


def main(argv):
    if len(argv) == 5 and argv[1] == "golden":
        cmd_golden(argv[2], argv[3], argv[4])
    elif len(argv) == 4 and argv[1] == "pretok":
        cmd_pretok(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "encode":
        _, ref = make_ref(argv[2])
        print(json.dumps(ref.encode(unescape(argv[3]), True)))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
