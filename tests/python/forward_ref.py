#!/usr/bin/env python3
"""Independent NumPy reference forward pass for GGUF transformer models.

This is the yardstick the C++ engine's logits are tested against, so it is
written for obviousness, not speed: every weight is dequantized to float32 with
the `gguf` package, all activations are computed in float64, attention is
recomputed from scratch for the whole sequence (no KV cache), and every formula
is written out next to the code that implements it.

Supported architectures (GGUF `general.architecture`): llama, qwen2, gemma3.

Usage
-----
  forward_ref.py MODEL.gguf --tokens 1,2,3 [--positions 0,1,2] [--out logits.f32] [--last-only]
      Causal forward over the tokens. With --out, writes raw little-endian
      float32 logits of shape [n_tokens, n_vocab] (row-major; [1, n_vocab] with
      --last-only). Without --out, prints the top-5 tokens for each position.
  forward_ref.py MODEL.gguf --prompt "The capital of France is" --greedy 20 --text-of
      Tokenizes the text (approximate tokenizer, plain text only), greedily
      generates 20 tokens (recomputing the full prefix each step), prints the
      ids, and with --text-of the detokenized text.
  forward_ref.py MODEL.gguf --tokenize "some text"     prints the token ids
  forward_ref.py MODEL.gguf --text-of 504,3458,282     prints the text of ids

The functions `load_model`, `forward`, `greedy`, `Tokenizer` can also be
imported by other test scripts.

Conventions that matter (checked against llama.cpp's converter
convert_hf_to_gguf.py, its graph builders src/models/*.cpp, llama-hparams.cpp,
and HF transformers' modeling_{llama,qwen2,gemma3}.py):

* GGUF tensor dims are listed innermost-first. A linear layer with `in`
  inputs and `out` outputs is stored with dims [in, out], i.e. as the row-major
  numpy matrix W of shape (out, in), and y = x @ W.T. `token_embd.weight` dims
  [n_embd, n_vocab] is the (n_vocab, n_embd) embedding table; row t is token t.
* RoPE (ggml): for rotary dimension n_rot and pair index i in [0, n_rot/2):
      theta_i = pos * freq_scale * base^(-2i / n_rot)
      (a, b) -> (a*cos(theta_i) - b*sin(theta_i), a*sin(theta_i) + b*cos(theta_i))
  The pair (a, b) differs by rope type:
      NORM (llama):          (x[2i], x[2i+1])        adjacent pairs
      NEOX (qwen2, gemma3):  (x[i],  x[i + n_rot/2]) halves
  llama uses NORM because llama.cpp's converter permutes the rows of
  attn_q/attn_k of `llama` models (HF rotate_half layout -> interleaved
  layout); qwen2/gemma3 weights are stored unpermuted, in HF layout, and
  llama.cpp runs them with LLAMA_ROPE_TYPE_NEOX. Dimensions >= n_rot (if any)
  pass through unrotated.
* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, over the last axis.
* Attention: per head h, with kv head g = h // (n_head / n_head_kv) (GQA),
      s_ij = scale * q_i . k_j,  masked to -inf unless j <= i (causal, by
      sequence index) and, on sliding-window layers, pos_i - pos_j < n_swa
      (llama.cpp LLAMA_SWA_TYPE_STANDARD masks when pos_q - pos_k >= n_swa;
      HF's sliding_window has the same meaning)
      p_i = softmax_j(s_ij),  o_i = sum_j p_ij v_j
  then concatenate heads and apply attn_output.
* llama / qwen2 block (pre-norm, SwiGLU):
      h = x + Wo attn(rope(Wq n1(x) [+bq]), rope(Wk n1(x) [+bk]), Wv n1(x) [+bv])
      x' = h + Wdown(silu(Wgate n2(h)) * Wup n2(h)),   silu(z) = z * sigmoid(z)
  scale = 1/sqrt(head_dim); qwen2 has q/k/v biases; final: logits = Wout rmsnorm(x),
  with Wout = token_embd.weight when output.weight is absent (tied embeddings).
* gemma3 block (what the GGUF stores and how it is used):
      x_0 = E[tok] * sqrt(n_embd)
      h  = x + post_attention_norm(Wo attn(q, k, v))
           with q = rope(q_norm(Wq n1(x)) per head), k = rope(k_norm(Wk n1(x)) per head)
      x' = h + post_ffw_norm(Wdown(gelu_tanh(Wgate n2(h)) * Wup n2(h)))
  - Norm weights: HF Gemma3RMSNorm computes x/rms * (1 + w). llama.cpp's converter
    stores (1 + w) in the GGUF for every tensor named *norm.weight (Gemma3Model
    norm_shift = 1.0), including attn_q_norm/attn_k_norm, so here all norms are
    the plain x/rms * w_gguf. (Checked on gemma-3-270m: adding or removing 1
    again takes the next-token NLL on English text from 1.73 to about 19 to 21.)
  - attention scale 1/sqrt(head_dim) (= query_pre_attn_scalar^-0.5 for the small
    models; llama.cpp uses 1/sqrt(n_embd/n_head) only for the 27B).
  - sliding window: layer il is global iff (il+1) % 6 == 0, else local with
    window <arch>.attention.sliding_window (pos_q - pos_k < n_swa).
  - rope: NEOX; base 10000 (no scaling) on local layers, <arch>.rope.freq_base
    (1e6) plus any linear rope scaling on global layers.
  - no final logit softcapping (gemma2 had one; gemma3 does not).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time

import numpy as np

try:
    import gguf
    from gguf import GGUFReader
    from gguf.quants import dequantize
except ImportError:  # pragma: no cover
    sys.exit("forward_ref.py needs the `gguf` package (pip install gguf)")


# --------------------------------------------------------------------------------------
# GGUF loading
# --------------------------------------------------------------------------------------

def _field_value(field):
    """Python value of a GGUF metadata field (scalar, string, or list)."""
    return field.contents()


def _tensor_to_f32(t) -> np.ndarray:
    """Dequantize one GGUF tensor to float32 with numpy shape = reversed GGUF dims.

    For F32/F16/BF16 the reader already shapes `t.data` in reversed-dims order;
    for block-quantized types `t.data` is a uint8 array (rows, bytes_per_row)
    and gguf's dequantize() turns it into (rows, elements_per_row).
    """
    shape = tuple(int(d) for d in reversed(t.shape))  # numpy order: outermost first
    arr = dequantize(np.asarray(t.data), t.tensor_type)
    return np.ascontiguousarray(arr, dtype=np.float32).reshape(shape)


class Model:
    """Hyperparameters (from GGUF metadata) and float32 weights of one model."""

    def __init__(self, path: str):
        self.path = path
        reader = GGUFReader(path)
        self.meta = {k: _field_value(f) for k, f in reader.fields.items()
                     if not k.startswith("GGUF.")}
        arch = self.meta["general.architecture"]
        if arch not in ("llama", "qwen2", "gemma3"):
            raise SystemExit(f"unsupported architecture {arch!r}")
        self.arch = arch

        def hp(key, default=None):
            return self.meta.get(f"{arch}.{key}", default)

        self.n_embd = int(hp("embedding_length"))
        self.n_layer = int(hp("block_count"))
        self.n_head = int(hp("attention.head_count"))
        n_head_kv = hp("attention.head_count_kv", self.n_head)
        # head_count(_kv) may be per-layer arrays in some GGUFs; these models use one value.
        if isinstance(n_head_kv, list):
            assert len(set(n_head_kv)) == 1, "per-layer kv head counts not supported"
            n_head_kv = n_head_kv[0]
        self.n_head_kv = int(n_head_kv)
        self.head_dim = int(hp("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(hp("attention.value_length", self.head_dim))
        self.n_rot = int(hp("rope.dimension_count", self.head_dim))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(hp("rope.freq_base", 10000.0))
        # Linear RoPE scaling (pos is divided by `factor`), only if the GGUF says so.
        self.rope_freq_scale = 1.0
        if hp("rope.scaling.type") == "linear" and hp("rope.scaling.factor"):
            self.rope_freq_scale = 1.0 / float(hp("rope.scaling.factor"))
        # ggml rope type: NORM (adjacent pairs) for llama, NEOX (halves) for qwen2/gemma3.
        self.rope_neox = arch in ("qwen2", "gemma3")

        # ---- weights ----
        t0 = time.time()
        self.w: dict[str, np.ndarray] = {}
        for t in reader.tensors:
            self.w[t.name] = _tensor_to_f32(t)
            _ACT_BLOCK[id(self.w[t.name])] = _act_block_for(int(t.tensor_type))
        self.load_seconds = time.time() - t0
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        # Tied embeddings: without output.weight the LM head is token_embd.weight.
        self.tied = "output.weight" not in self.w
        self.lm_head = self.w["token_embd.weight"] if self.tied else self.w["output.weight"]
        # Llama-3 style per-dimension rope frequency divisors (absent in our models).
        self.rope_freq_factors = self.w.get("rope_freqs.weight")

        # ---- architecture specifics ----
        self.swa_layers = [False] * self.n_layer
        self.n_swa = 0
        self.rope_base_swa = self.rope_base
        self.attn_scale = 1.0 / math.sqrt(self.head_dim)
        self.final_softcap = None
        if arch == "gemma3":
            # Sliding-window attention (llama.cpp: hparams.set_swa_pattern(6) with
            # dense_first=false => layer il is local iff il % 6 < 5, i.e. every 6th
            # layer ((il+1) % 6 == 0) is global). HF gemma3 `layer_types` agrees.
            self.n_swa = int(hp("attention.sliding_window"))
            pattern = hp("attention.sliding_window_pattern", 6)
            if isinstance(pattern, list):  # newer GGUFs: explicit per-layer bools
                self.swa_layers = [bool(b) for b in pattern][: self.n_layer]
            else:
                p = int(pattern)
                self.swa_layers = [p == 0 or (il % p < p - 1) for il in range(self.n_layer)]
            # Local (sliding) layers use rope base 10000 and no rope scaling;
            # global layers use <arch>.rope.freq_base (1e6) and the GGUF scaling
            # (llama.cpp: rope_freq_base_train_swa = 10000, rope_freq_scale_train_swa = 1;
            # HF: rope_local_base_freq = 10000).
            self.rope_base_swa = 10000.0
            # Attention scale: llama.cpp uses 1/sqrt(head_dim) for all gemma3 sizes
            # except 27B (1/sqrt(n_embd/n_head)); HF uses query_pre_attn_scalar^-0.5,
            # which equals head_dim for the small models (270m: 256).
            qpas = hp("attention.query_pre_attn_scalar")  # not written by llama.cpp; honour if present
            if qpas:
                self.attn_scale = 1.0 / math.sqrt(float(qpas))
            elif self.n_layer == 62:  # 27B
                self.attn_scale = 1.0 / math.sqrt(self.n_embd / self.n_head)
            # Gemma3 has no final logit softcapping (gemma2 had one). llama.cpp's
            # sliding-window gemma3 graph never applies it, so we do not either.
            self.final_softcap = None

    # ----------------------------------------------------------------------------------
    def layer_rope(self, il: int):
        """(base, freq_scale) used by layer il."""
        if self.swa_layers[il]:
            return self.rope_base_swa, 1.0
        return self.rope_base, self.rope_freq_scale

    def describe(self) -> str:
        s = (f"arch={self.arch} n_embd={self.n_embd} n_layer={self.n_layer} n_head={self.n_head} "
             f"n_head_kv={self.n_head_kv} head_dim={self.head_dim} n_rot={self.n_rot} "
             f"n_vocab={self.n_vocab} eps={self.eps:g} rope_base={self.rope_base:g} "
             f"rope={'neox' if self.rope_neox else 'norm'} tied={self.tied} "
             f"attn_scale={self.attn_scale:.6g}")
        if any(self.swa_layers):
            glob = [il for il in range(self.n_layer) if not self.swa_layers[il]]
            s += f" n_swa={self.n_swa} rope_base_swa={self.rope_base_swa:g} global_layers={glob}"
        return s


def load_model(path: str) -> Model:
    return Model(path)


# --------------------------------------------------------------------------------------
# Math building blocks (all in float64)
# --------------------------------------------------------------------------------------

# --act-quant: emulate the engine's CPU matmul, which quantizes activations on the fly to
# int8 blocks (symmetric, d = amax/127, round half to even) before multiplying them with
# quantized weights: blocks of 32 for the 32-element weight types, 256 for the K-quants,
# none for float weights. With it, the reference isolates kernel bugs from the (model-
# dependent) effect of activation rounding.
ACT_QUANT = False
_ACT_BLOCK: dict[int, int] = {}


def _act_block_for(ggml_type: int) -> int:
    if ggml_type in (2, 3, 6, 7, 8):       # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
        return 32
    if ggml_type in (10, 11, 12, 13, 14):  # Q2_K .. Q6_K
        return 256
    return 0


def _quantize_act(x: np.ndarray, blk: int) -> np.ndarray:
    n, c = x.shape
    xb = x.astype(np.float32).reshape(n, c // blk, blk)
    amax = np.abs(xb).max(axis=2, keepdims=True)
    d = np.where(amax > 1e-30, amax / np.float32(127.0), np.float32(0.0)).astype(np.float32)
    inv = np.where(amax > 1e-30, np.float32(127.0) / np.where(amax > 1e-30, amax, 1), 0).astype(np.float32)
    q = np.rint(xb * inv)
    return (q * d).reshape(n, c).astype(np.float64)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, chunk: int = 16384) -> np.ndarray:
    """y = x @ W.T (+ b) (with --act-quant, x is first rounded as the engine does).  x: (n, in) float64, W: (out, in) float32 (cast to float64
    chunk by chunk so huge LM heads do not need a full float64 copy)."""
    blk = _ACT_BLOCK.get(id(w), 0) if ACT_QUANT else 0
    if blk:
        x = _quantize_act(x, blk)
    out = np.empty((x.shape[0], w.shape[0]), dtype=np.float64)
    for r in range(0, w.shape[0], chunk):
        out[:, r:r + chunk] = x @ w[r:r + chunk].astype(np.float64).T
    if b is not None:
        out += b.astype(np.float64)
    return out


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """y = x / sqrt(mean(x^2) + eps) * w   (over the last axis)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(np.float64)


def silu(x: np.ndarray) -> np.ndarray:
    """silu(x) = x * sigmoid(x) = x / (1 + exp(-x))."""
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """gelu(x) ~= 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (tanh approximation,
    = HF `gelu_pytorch_tanh`, = ggml_gelu used by llama.cpp's LLM_FFN_GELU)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, neox: bool,
         freq_scale: float = 1.0, freq_factors: np.ndarray | None = None) -> np.ndarray:
    """Rotary position embedding. x: (n_tok, n_heads, head_dim), pos: (n_tok,).

    theta_i = pos * freq_scale * base^(-2i/n_rot) [/ freq_factors[i]],  i in [0, n_rot/2)
    NORM: rotate (x[2i], x[2i+1]);  NEOX: rotate (x[i], x[i+n_rot/2]).
    (a, b) -> (a cos - b sin, a sin + b cos).
    """
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors.astype(np.float64)
    theta = (pos.astype(np.float64) * freq_scale)[:, None] * inv_freq[None, :]  # (n_tok, half)
    cos = np.cos(theta)[:, None, :]  # broadcast over heads
    sin = np.sin(theta)[:, None, :]
    y = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        y[..., :half] = a * cos - b * sin
        y[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        y[..., 0:n_rot:2] = a * cos - b * sin
        y[..., 1:n_rot:2] = a * sin + b * cos
    return y


def softmax(s: np.ndarray) -> np.ndarray:
    """softmax over the last axis: exp(s - max) / sum(exp(s - max))."""
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def attention(q, k, v, pos, scale, n_swa: int | None):
    """Causal multi-head attention with GQA.

    q: (n, n_head, d), k: (n, n_head_kv, d), v: (n, n_head_kv, dv), pos: (n,)
    Query i sees key j iff j <= i, and (sliding-window layers) pos_i - pos_j < n_swa.
    Returns (n, n_head * dv).
    """
    n, n_head, _ = q.shape
    n_head_kv = k.shape[1]
    group = n_head // n_head_kv                  # query heads per kv head
    idx = np.arange(n)
    allowed = idx[None, :] <= idx[:, None]       # [i, j]: causal
    if n_swa:
        allowed &= (pos[:, None] - pos[None, :]) < n_swa
    out = np.empty((n, n_head, v.shape[2]), dtype=np.float64)
    for h in range(n_head):
        g = h // group                           # GQA: kv head used by query head h
        s = scale * (q[:, h, :] @ k[:, g, :].T)  # (n_q, n_k)
        s = np.where(allowed, s, -np.inf)
        out[:, h, :] = softmax(s) @ v[:, g, :]
    return out.reshape(n, -1)


# --------------------------------------------------------------------------------------
# Forward pass
# --------------------------------------------------------------------------------------

def forward(model: Model, tokens, positions=None, last_only: bool = False) -> np.ndarray:
    """Logits (float64) of shape (n_tokens, n_vocab), or (1, n_vocab) if last_only."""
    m, w = model, model.w
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    pos = np.arange(n) if positions is None else np.asarray(positions, dtype=np.int64)
    assert len(pos) == n

    # Token embeddings: x_t = E[token_t]; gemma3 scales them by sqrt(n_embd)
    # (llama.cpp: ggml_scale(inpL, sqrtf(n_embd)); HF Gemma3TextScaledWordEmbedding).
    x = w["token_embd.weight"][tokens].astype(np.float64)
    if m.arch == "gemma3":
        x = x * math.sqrt(m.n_embd)

    for il in range(m.n_layer):
        p = f"blk.{il}."
        # ---------------- attention sub-layer ----------------
        h = rms_norm(x, w[p + "attn_norm.weight"], m.eps)
        # q/k/v projections (qwen2 has biases on all three).
        q = linear(h, w[p + "attn_q.weight"], w.get(p + "attn_q.bias"))
        k = linear(h, w[p + "attn_k.weight"], w.get(p + "attn_k.bias"))
        v = linear(h, w[p + "attn_v.weight"], w.get(p + "attn_v.bias"))
        q = q.reshape(n, m.n_head, m.head_dim)
        k = k.reshape(n, m.n_head_kv, m.head_dim)
        v = v.reshape(n, m.n_head_kv, m.head_dim_v)
        if m.arch == "gemma3":
            # Per-head RMSNorm of q and k (over head_dim) before RoPE.
            q = rms_norm(q, w[p + "attn_q_norm.weight"], m.eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], m.eps)
        base, fscale = m.layer_rope(il)
        q = rope(q, pos, m.n_rot, base, m.rope_neox, fscale, m.rope_freq_factors)
        k = rope(k, pos, m.n_rot, base, m.rope_neox, fscale, m.rope_freq_factors)
        a = attention(q, k, v, pos, m.attn_scale, m.n_swa if m.swa_layers[il] else None)
        a = linear(a, w[p + "attn_output.weight"], w.get(p + "attn_output.bias"))
        if m.arch == "gemma3":
            # Gemma3 normalizes the sub-layer output before the residual add.
            a = rms_norm(a, w[p + "post_attention_norm.weight"], m.eps)
        x = x + a

        # ---------------- feed-forward sub-layer ----------------
        h = rms_norm(x, w[p + "ffn_norm.weight"], m.eps)
        gate = linear(h, w[p + "ffn_gate.weight"])
        up = linear(h, w[p + "ffn_up.weight"])
        if m.arch == "gemma3":
            f = gelu_tanh(gate) * up            # GeGLU: down(gelu(gate x) * up x)
        else:
            f = silu(gate) * up                 # SwiGLU: down(silu(gate x) * up x)
        f = linear(f, w[p + "ffn_down.weight"])
        if m.arch == "gemma3":
            f = rms_norm(f, w[p + "post_ffw_norm.weight"], m.eps)
        x = x + f

    if last_only:
        x = x[-1:]
    x = rms_norm(x, w["output_norm.weight"], m.eps)
    logits = linear(x, m.lm_head, w.get("output.bias"))
    if m.final_softcap:
        logits = m.final_softcap * np.tanh(logits / m.final_softcap)
    return logits


def greedy(model: Model, tokens, n_new: int, stop_ids=()) -> list[int]:
    """Greedy decoding: append argmax of the last position's logits, n_new times
    (full prefix recomputed each step). Stops early at a token in stop_ids."""
    seq = list(tokens)
    out = []
    for _ in range(n_new):
        nxt = int(np.argmax(forward(model, seq, last_only=True)[0]))
        out.append(nxt)
        seq.append(nxt)
        if nxt in stop_ids:
            break
    return out


# --------------------------------------------------------------------------------------
# Tokenizer (approximate; for building plain-English test prompts and reading outputs)
# --------------------------------------------------------------------------------------

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode char map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# GPT-2-like pre-tokenizer without \p{..} classes: contractions, optional space +
# letters, single digits (SmolLM2 and Qwen2 split digits individually), optional
# space + punctuation run, whitespace.
_GPT2_SPLIT = re.compile(
    r"'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])| ?[^\W\d_]+| ?\d| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_BYTE = 6


class Tokenizer:
    def __init__(self, model: Model):
        meta = model.meta
        self.kind = meta.get("tokenizer.ggml.model", "gpt2")
        self.tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
        self.types = list(meta.get("tokenizer.ggml.token_type", [1] * len(self.tokens)))
        self.scores = list(meta.get("tokenizer.ggml.scores", [0.0] * len(self.tokens)))
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.bos = meta.get("tokenizer.ggml.bos_token_id")
        self.eos = meta.get("tokenizer.ggml.eos_token_id")
        self.add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
        self.add_space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", False))
        if self.kind == "gpt2":
            self.b2u = bytes_to_unicode()
            self.u2b = {c: b for b, c in self.b2u.items()}
            self.ranks = {tuple(mg.split(" ", 1)): r
                          for r, mg in enumerate(meta.get("tokenizer.ggml.merges", []))}

    # ---- encode ----
    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        ids = self._encode_gpt2(text) if self.kind == "gpt2" else self._encode_spm(text)
        if (self.add_bos if add_bos is None else add_bos) and self.bos is not None:
            ids = [self.bos] + ids
        return ids

    def _bpe_gpt2(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            best = min(((self.ranks.get((a, b), 1 << 60), i)
                        for i, (a, b) in enumerate(zip(parts, parts[1:]))))
            if best[0] == 1 << 60:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def _encode_gpt2(self, text: str) -> list[int]:
        ids = []
        for piece in _GPT2_SPLIT.findall(text):
            mapped = "".join(self.b2u[b] for b in piece.encode("utf-8"))
            for sym in self._bpe_gpt2(mapped):
                ids.append(self.vocab[sym])
        return ids

    def _encode_spm(self, text: str) -> list[int]:
        """llama.cpp-style SentencePiece BPE: spaces -> '▁', then repeatedly merge the
        adjacent pair whose concatenation is a vocab token with the highest score;
        leftover symbols not in the vocab fall back to <0xXX> byte tokens."""
        if self.add_space_prefix:
            text = " " + text
        syms = list(text.replace(" ", "\u2581"))
        while len(syms) > 1:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                tid = self.vocab.get(syms[i] + syms[i + 1])
                if tid is not None and (best is None or self.scores[tid] > best):
                    best, best_i = self.scores[tid], i
            if best_i < 0:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        ids = []
        for s in syms:
            if s in self.vocab:
                ids.append(self.vocab[s])
            else:
                ids.extend(self.vocab[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
        return ids

    # ---- decode ----
    def piece_bytes(self, tid: int) -> bytes:
        tok = self.tokens[tid]
        if self.types[tid] == TOKEN_TYPE_CONTROL:
            return tok.encode("utf-8")  # special tokens are shown verbatim
        if self.kind == "gpt2":
            # Inverse GPT-2 byte map; characters outside it (rare) kept as UTF-8.
            return b"".join(bytes([self.u2b[c]]) if c in self.u2b else c.encode("utf-8") for c in tok)
        m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", tok)
        if m and self.types[tid] == TOKEN_TYPE_BYTE:
            return bytes([int(m.group(1), 16)])
        return tok.replace("\u2581", " ").encode("utf-8")

    def decode(self, ids) -> str:
        return b"".join(self.piece_bytes(int(t)) for t in ids).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def _ids(s: str) -> list[int]:
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--prompt", help="text to tokenize (approximate tokenizer) instead of --tokens")
    ap.add_argument("--bos", choices=["auto", "yes", "no"], default="auto",
                    help="prepend BOS to --prompt/--tokenize text (auto: GGUF add_bos_token)")
    ap.add_argument("--positions", help="comma-separated positions (default 0..n-1)")
    ap.add_argument("--out", help="write float32 LE logits [n_tokens, n_vocab] here")
    ap.add_argument("--last-only", action="store_true", help="only the last position's logits")
    ap.add_argument("--greedy", type=int, default=0, metavar="N", help="greedily generate N tokens")
    ap.add_argument("--stop-at-eos", action="store_true", help="stop --greedy at the EOS token")
    ap.add_argument("--text-of", nargs="?", const="", default=None, metavar="IDS",
                    help="with IDS: print their text and exit; bare: also print the text")
    ap.add_argument("--tokenize", metavar="TEXT", help="print the ids of TEXT and exit")
    ap.add_argument("--info", action="store_true", help="print hyperparameters to stderr")
    ap.add_argument("--act-quant", action="store_true",
                    help="round linear-layer inputs to int8 blocks as the engine's CPU matmul does")
    args = ap.parse_args(argv)
    global ACT_QUANT
    ACT_QUANT = args.act_quant

    t0 = time.time()
    model = load_model(args.model)
    # The tokenizer is only needed for text in/out; building the GPT-2 merge table
    # takes a second or two, so skip it for a plain --tokens ... --out run.
    need_tok = not (args.tokens and args.out and args.text_of is None and not args.greedy)
    tok = Tokenizer(model) if need_tok else None
    if args.info:
        print(model.describe(), file=sys.stderr)
        print(f"loaded+dequantized in {model.load_seconds:.1f}s", file=sys.stderr)
    add_bos = None if args.bos == "auto" else args.bos == "yes"

    if args.text_of:
        print(tok.decode(_ids(args.text_of)))
        return 0
    if args.tokenize is not None:
        print(",".join(map(str, tok.encode(args.tokenize, add_bos))))
        return 0

    if args.tokens:
        tokens = _ids(args.tokens)
    elif args.prompt is not None:
        tokens = tok.encode(args.prompt, add_bos)
        print("prompt ids:", ",".join(map(str, tokens)))
    else:
        ap.error("need --tokens or --prompt")
    positions = _ids(args.positions) if args.positions else None

    if args.greedy:
        if positions is not None:
            ap.error("--positions is not supported with --greedy")
        t1 = time.time()
        stop = (tok.eos,) if args.stop_at_eos and tok.eos is not None else ()
        new = greedy(model, tokens, args.greedy, stop)
        print("generated ids:", ",".join(map(str, new)))
        if args.text_of is not None:
            print("prompt text:   ", repr(tok.decode(tokens)))
            print("generated text:", repr(tok.decode(new)))
        print(f"[load {model.load_seconds:.1f}s, generate {time.time() - t1:.1f}s]", file=sys.stderr)
        return 0

    t1 = time.time()
    logits = forward(model, tokens, positions, last_only=args.last_only)
    t_fwd = time.time() - t1
    if args.out:
        logits.astype("<f4").tofile(args.out)
        print(f"wrote {logits.shape[0]}x{logits.shape[1]} float32 logits to {args.out}", file=sys.stderr)
    else:
        first = len(tokens) - logits.shape[0]
        for r in range(logits.shape[0]):
            i = first + r
            top = np.argsort(-logits[r])[:5]
            desc = "  ".join(f"{int(t)}:{tok.decode([t])!r}({logits[r, t]:.3f})" for t in top)
            print(f"[{i}] tok {tokens[i]} {tok.decode([tokens[i]])!r} -> {desc}")
        if args.text_of is not None:
            print("text:", repr(tok.decode(tokens)))
    print(f"[load {model.load_seconds:.1f}s, forward {t_fwd:.1f}s, total {time.time() - t0:.1f}s]",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
