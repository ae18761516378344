#!/usr/bin/env python3
"""Write a GGUF model as a Hugging Face model folder, as people who serve on GPUs hold models:
config.json, sharded *.safetensors with model.safetensors.index.json, tokenizer.json,
tokenizer_config.json (with the chat template) and generation_config.json.

    python3 scripts/gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype bf16|f16|f32] [--shard-mib 1024]
    python3 scripts/gguf_to_hf.py --models qwen0.5b,qwen1.5b [--cache DIR]   # the fetched models

With --models, each fetched GGUF (scripts/fetch_models.py) becomes <cache>/hf/<key>/; a stamp
(the GGUF's size and mtime, this script's hash, the dtype) skips a folder already converted.
stdout gets one "<key> <folder>" line per folder that is ready.

The weights are dequantized (the `gguf` package's dequantizers) and stored as `--dtype`. The
tensors get the names and layouts of the transformers classes (Qwen2ForCausalLM,
LlamaForCausalLM, Gemma3ForCausalLM): Llama's q/k rows are un-permuted back to the half-split
RoPE layout, Gemma's norms stored as w for x·(1 + w). tokenizer.json is built with the
`tokenizers` package from the GGUF vocabulary and merges, with the pre-tokenizer (and for
Qwen2 the NFC normalizer) of the model's published tokenizer.json.

Needs: pip install gguf numpy torch safetensors tokenizers
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MODEL_FILES = {
    "smollm2": "smollm2-135m-instruct-q4_1.gguf",
    "qwen0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "gemma3": "gemma3-270m-q4_k_m.gguf",
}

# The Split regexes of the published tokenizer.json files, by GGUF pre-tokenizer name.
QWEN2_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
            r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
             r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

ARCH_CLASS = {"qwen2": ("Qwen2ForCausalLM", "qwen2"), "llama": ("LlamaForCausalLM", "llama"),
              "gemma3": ("Gemma3ForCausalLM", "gemma3_text")}


def log(msg: str) -> None:
    print(f"[gguf_to_hf] {msg}", file=sys.stderr, flush=True)


class Gguf:
    def __init__(self, path: str) -> None:
        from gguf import GGUFReader
        self.r = GGUFReader(path)
        self.arch = self.get("general.architecture")

    def get(self, key: str, default=None):
        f = self.r.fields.get(key)
        return default if f is None else f.contents()

    def a(self, suffix: str, default=None):
        return self.get(f"{self.arch}.{suffix}", default)

    def tensors(self):
        from gguf.quants import dequantize
        for t in self.r.tensors:
            shape = [int(d) for d in reversed(t.shape.tolist())]  # row-major, as PyTorch
            yield t.name, dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)


def hf_name(name: str, arch: str) -> str:
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    _, layer, rest = name.split(".", 2)
    common = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
              "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
              "attn_output.weight": "self_attn.o_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
              "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
              "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
              "ffn_down.weight": "mlp.down_proj.weight"}
    if arch == "gemma3":
        common.update({"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
                       "post_attention_norm.weight": "post_attention_layernorm.weight",
                       "ffn_norm.weight": "pre_feedforward_layernorm.weight",
                       "post_ffw_norm.weight": "post_feedforward_layernorm.weight"})
    else:
        common["ffn_norm.weight"] = "post_attention_layernorm.weight"
    return f"model.layers.{layer}.{common[rest]}"


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF's interleaved RoPE rows back to the checkpoint's half-split ones (inverse of the
    converter's permute)."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_weights(g: Gguf, out: Path, dtype: str, shard_bytes: int) -> dict:
    import torch
    from safetensors.torch import save_file
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    n_head, n_kv = g.a("attention.head_count"), g.a("attention.head_count_kv", g.a("attention.head_count"))
    shards, current, size, info = [], {}, 0, {}
    for name, w in g.tensors():
        if g.arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            w = unpermute(w, n_head if name.endswith("attn_q.weight") else n_kv)
        if g.arch == "gemma3" and name.endswith("norm.weight"):
            w = w - 1.0
        hn = hf_name(name, g.arch)
        info[hn] = w.shape
        t = torch.from_numpy(np.ascontiguousarray(w)).to(tdtype)
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[hn] = t
        size += nbytes
    shards.append(current)
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        for k, t in tensors.items():
            weight_map[k] = fname
            total += t.numel() * t.element_size()
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    return info


def write_config(g: Gguf, out: Path, dtype: str, info: dict) -> None:
    cls, model_type = ARCH_CLASS[g.arch]
    n_embd, n_head = g.a("embedding_length"), g.a("attention.head_count")
    vocab_rows = info["model.embed_tokens.weight"][0]
    cfg = {
        "architectures": [cls], "model_type": model_type,
        "hidden_size": n_embd, "num_hidden_layers": g.a("block_count"), "num_attention_heads": n_head,
        "num_key_value_heads": g.a("attention.head_count_kv", n_head), "intermediate_size": g.a("feed_forward_length"),
        "head_dim": g.a("attention.key_length", n_embd // n_head), "vocab_size": vocab_rows,
        "max_position_embeddings": g.a("context_length", 2048),
        "rms_norm_eps": g.a("attention.layer_norm_rms_epsilon", 1e-6),
        "tie_word_embeddings": "lm_head.weight" not in info,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype],
        "bos_token_id": g.get("tokenizer.ggml.bos_token_id"), "eos_token_id": g.get("tokenizer.ggml.eos_token_id"),
    }
    if g.arch == "gemma3":
        window = g.a("attention.sliding_window", 0)
        n_layer = g.a("block_count")
        cfg.update({"hidden_activation": "gelu_pytorch_tanh", "rope_theta": g.a("rope.freq_base", 1e6),
                    "rope_local_base_freq": 10000.0, "sliding_window": window,
                    "query_pre_attn_scalar": cfg["head_dim"], "final_logit_softcapping": None,
                    "attn_logit_softcapping": None, "rope_scaling": None,
                    "layer_types": ["sliding_attention" if window and (i + 1) % 6 else "full_attention"
                                    for i in range(n_layer)]})
    else:
        cfg.update({"hidden_act": "silu", "rope_theta": g.a("rope.freq_base", 10000.0), "rope_scaling": None,
                    "attention_dropout": 0.0})
        if g.arch == "qwen2":
            cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg["num_hidden_layers"]})
        else:
            cfg.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1})
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Merges of a SentencePiece BPE vocabulary, as HF's converter derives them: every split
    of a normal piece into two pieces of the vocabulary, best-scoring piece first."""
    ids = {t: i for i, t in enumerate(tokens) if types[i] == 1}
    merges = []
    for piece, pid in ids.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in ids and right in ids:
                merges.append((scores[pid], ids[left], ids[right], left, right))
    merges.sort(key=lambda m: (-m[0], m[1], m[2]))
    return [(m[3], m[4]) for m in merges]


def write_tokenizer(g: Gguf, out: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, processors, pre_tokenizers as pt
    tokens, types = g.get("tokenizer.ggml.tokens"), g.get("tokenizer.ggml.token_type") or []
    types = types or [1] * len(tokens)
    model = g.get("tokenizer.ggml.model")
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
    if model == "gpt2":
        pre = g.get("tokenizer.ggml.pre", "default")
        merges = [tuple(m.split(" ", 1)) for m in g.get("tokenizer.ggml.merges")]
        llama3 = pre in ("llama-bpe", "llama3", "llama-v3")
        tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=llama3))
        if pre in ("gpt2", "default"):
            tok.pre_tokenizer = pt.ByteLevel(add_prefix_space=False, use_regex=True)
        elif pre in ("smollm", "starcoder"):
            tok.pre_tokenizer = pt.Sequence([pt.Digits(individual_digits=True),
                                             pt.ByteLevel(add_prefix_space=False, use_regex=True)])
        elif pre in ("qwen2", "llama-bpe", "llama3", "llama-v3"):
            tok.pre_tokenizer = pt.Sequence([pt.Split(Regex(QWEN2_RE if pre == "qwen2" else LLAMA3_RE),
                                                      behavior="isolated", invert=False),
                                             pt.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            raise SystemExit(f"gguf_to_hf: pre-tokenizer {pre!r} has no tokenizer.json equivalent here")
        if pre == "qwen2":
            tok.normalizer = normalizers.NFC()  # as Qwen2's own tokenizer.json
        tok.decoder = decoders.ByteLevel()
    elif model == "llama":
        scores = g.get("tokenizer.ggml.scores")
        tok = Tokenizer(models.BPE(vocab, spm_merges(tokens, scores, types), byte_fallback=True,
                                   unk_token=tokens[g.get("tokenizer.ggml.unknown_token_id", 0)], fuse_unk=True))
        steps = [normalizers.Replace(" ", "\u2581")]
        if g.get("tokenizer.ggml.add_space_prefix", True):
            steps.insert(0, normalizers.Prepend("\u2581"))
        tok.normalizer = normalizers.Sequence(steps)
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    else:
        raise SystemExit(f"gguf_to_hf: tokenizer model {model!r} is not supported")
    # GGUF type 3 (control) = a special added token; 4 (user-defined) = a plain added token.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4])
    add_bos = bool(g.get("tokenizer.ggml.add_bos_token", model == "llama"))
    bos = g.get("tokenizer.ggml.bos_token_id")
    if add_bos and bos is not None:  # encode() adds BOS through the post-processor, as the published files do
        tok.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B",
                                                           special_tokens=[(tokens[bos], bos)])
    tok.save(str(out / "tokenizer.json"))

    def text(key: str):
        i = g.get(key)
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": text("tokenizer.ggml.bos_token_id"),
           "eos_token": text("tokenizer.ggml.eos_token_id"), "pad_token": text("tokenizer.ggml.padding_token_id"),
           "unk_token": text("tokenizer.ggml.unknown_token_id"),
           "add_bos_token": add_bos,
           "add_eos_token": bool(g.get("tokenizer.ggml.add_eos_token", False)),
           "model_max_length": g.a("context_length", 2048), "clean_up_tokenization_spaces": False}
    if g.get("tokenizer.chat_template"):
        cfg["chat_template"] = g.get("tokenizer.chat_template")
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    eos = [g.get(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if g.get(k) is not None]
    gen = {"bos_token_id": g.get("tokenizer.ggml.bos_token_id"), "eos_token_id": eos[0] if len(eos) == 1 else eos}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def convert(src: str, out: Path, dtype: str, shard_mib: int) -> None:
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    g = Gguf(src)
    if g.arch not in ARCH_CLASS:
        raise SystemExit(f"gguf_to_hf: architecture {g.arch!r} is not supported")
    info = write_weights(g, tmp, dtype, shard_mib << 20)
    write_config(g, tmp, dtype, info)
    write_tokenizer(g, tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def stamp_of(src: Path, dtype: str) -> str:
    st = src.stat()
    me = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return json.dumps({"source": src.name, "size": st.st_size, "mtime": int(st.st_mtime), "script": me, "dtype": dtype})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--models", help="fetched models to convert: " + ",".join(MODEL_FILES))
    ap.add_argument("--cache", default=os.environ.get("TANDEM_MODELS", str(Path.home() / ".cache/tandem/models")))
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--shard-mib", type=int, default=1024, help="largest shard (MiB)")
    a = ap.parse_args()
    if a.models:
        ok = True
        for key in a.models.split(","):
            src = Path(a.cache) / MODEL_FILES[key]
            out = Path(a.cache) / "hf" / key
            if not src.exists():
                log(f"{key}: {src} is missing (python3 scripts/fetch_models.py --models {key})")
                ok = False
                continue
            stamp = out / ".converted"
            if stamp.exists() and stamp.read_text() == stamp_of(src, a.dtype):
                print(key, out)
                continue
            log(f"{key}: converting {src.name} to {out} ({a.dtype})")
            convert(str(src), out, a.dtype, a.shard_mib)
            stamp.write_text(stamp_of(src, a.dtype))
            print(key, out)
        return 0 if ok else 1
    if not a.gguf or not a.out:
        ap.error("give MODEL.gguf OUT_DIR, or --models")
    convert(a.gguf, Path(a.out), a.dtype, a.shard_mib)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
