"""The package's value types: the keyword options of Engine.load and generate, and results."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict


class LoadOptions(TypedDict, total=False):
    """Keyword options of Engine.load beyond model, draft and device (tandem_load_params)."""

    threads: int          # 0: one per available core
    context: int          # max tokens per sequence; 0: min(the model's, 4096)
    kv_type: Literal["f16", "f32"]
    pin_threads: bool     # bind each CPU worker thread to one core
    gpu_mem_bytes: int    # CUDA: device memory for models, caches and scratch; 0: 90% of free
    draft_vocab: int      # the draft's logits over its N most frequent tokens only (FR-Spec); 0: all
    draft_vocab_counts: str  # a counts file (`tandem draft-vocab`) ranking them; default: token id order
    # The draft's matrix weights at load: "auto" (default: those stored above 5 bits per weight
    # become Q4_0), "keep" (as stored), or "q4_0", "q4_1", "q5_0", "q5_1", "q8_0" for all.
    # Outputs are unchanged either way: the target verifies.
    draft_type: Literal["auto", "keep", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k"]
    # The target's matrix weights quantized at load (for float models, e.g. a Hugging Face
    # folder's bf16): "keep" (default) or one of the types; the output is the quantized model's.
    weight_type: Literal["keep", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k"]


class SamplingOptions(TypedDict, total=False):
    """Keyword options of generate/stream/chat (tandem_generate_params); unset ones keep the library's defaults."""

    max_tokens: int                   # default 128
    temperature: float                # default 0.8; <= 0: greedy
    top_k: int                        # default 40; <= 0: off
    top_p: float                      # default 0.95; >= 1: off
    min_p: float                      # default 0.05; <= 0: off
    repetition_penalty: float         # default 1 (off)
    repetition_window: int            # default 64; < 0: the whole history
    presence_penalty: float
    frequency_penalty: float
    # OpenAI's logit_bias: token id -> value added to its logit after the penalties, before
    # temperature and the cuts (about -100 bans a token, +100 all but forces it; greedy takes
    # the biased argmax). Ids outside the vocabulary raise InvalidArgumentError.
    logit_bias: Mapping[int, float]
    seed: int | None                  # None (default): a fresh random seed per call, reported in the result
    stop: str | Sequence[str]         # generation ends before the first occurrence
    add_special: bool                 # default True: prepend BOS etc. as the model says
    parse_special: bool               # default True: special-token texts become special tokens
    ignore_eos: bool
    # Tokens that end the output when generated, as an end-of-generation token does (vLLM's
    # stop_token_ids; ignore_eos does not lift them): the last token, with no text of its own.
    stop_token_ids: Sequence[int]
    # Speculative decoding: changes speed only, never the output's distribution (and
    # greedy output not at all).
    draft: Literal["none", "model", "ngram"]  # default: what Engine.load was given
    draft_max: int                    # tokens drafted per step, default 4
    draft_min: int
    draft_p_min: float
    ngram_min: int
    ngram_max: int
    verify: Literal["coupled", "rejection"]  # default "coupled"
    # How many tokens to draft per step: "fixed" (default: always draft_max), "confidence",
    # "adaptive", "goodput" (the CLI's default; Engine.calibrate gives them this machine's costs).
    policy: Literal["fixed", "confidence", "adaptive", "goodput"]
    alpha_prior: float                # adaptive/goodput: acceptance expected before evidence (0: 0.6)
    start_budget: float               # adaptive/goodput: output share a first draft may risk (0: 0.02; < 0: any)
    lookup: bool                      # draft model: prompt lookup's drafts where they pay more (default True)
    lookup_min: int                   # shortest match prompt lookup drafts from (default 3)
    tree_width: int                   # draft model: > 1 drafts token trees this wide (default 1: chains)
    tree_nodes: int                   # nodes of a tree (0: tree_width x draft_max, at most 64)
    # Constrained output (docs/constrained.md), at most one: a GBNF grammar, or the JSON
    # documents valid against a JSON Schema (a dict or its JSON text; {} → any JSON object).
    grammar: str
    json_schema: Mapping[str, Any] | str
    # Log-probabilities (GenerateResult.logprobs, Stream.logprobs): each generated token's
    # and this many (0..20) most likely alternatives, of the target's distribution the token
    # was drawn from (after penalties, temperature and the cuts; greedy: the log-softmax),
    # whatever the speculation. None (default): none.
    logprobs: int | None
    # GenerateResult.prompt_logprobs: each prompt token after the first, given the tokens
    # before it (the target's raw distribution at temperature 1), and this many alternatives.
    # With max_tokens=0 the call only scores the prompt. None (default): none.
    prompt_logprobs: int | None


FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class Timings:
    prefill_ms: float                 # the prompt's forward pass, up to the first sampled token
    decode_ms: float                  # every later token
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


@dataclass(frozen=True)
class SpeculativeMetrics:
    """Zero without speculation. acceptance_rate = accepted_tokens / drafted_tokens."""

    drafts: int = 0                   # verification steps that carried at least one draft token
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_rate: float = 0.0
    mean_accepted_length: float = 0.0  # tokens per draft step, the corrected/bonus token included
    target_passes: int = 0
    draft_forwards: int = 0
    draft_ms: float = 0.0
    target_ms: float = 0.0
    verify_ms: float = 0.0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    lookup_steps: int = 0             # steps that verified prompt lookup's draft (counted in the totals above)
    lookup_drafted_tokens: int = 0
    lookup_accepted_tokens: int = 0
    tree_steps: int = 0  # steps that verified a token tree (its nodes counted in drafted_tokens)


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float                    # natural log; -inf for a token the sampling cut


@dataclass(frozen=True)
class TokenLogprobs:
    """One token's log-probability and the most likely alternatives at its position."""

    token: int
    logprob: float
    top: list[TokenLogprob]           # most likely first


@dataclass(frozen=True)
class GenerateResult:
    text: str                         # cut before a stop string
    tokens: list[int]                 # the generated tokens (a stop string's included)
    prompt_tokens: list[int]
    finish_reason: FinishReason
    timings: Timings
    speculative: SpeculativeMetrics
    seed: int                         # the seed the text was drawn with: passing it again reproduces the text
    logprobs: list[TokenLogprobs] | None = None         # one per token of `tokens` (the logprobs option)
    prompt_logprobs: list[TokenLogprobs] | None = None  # one per prompt token after the first (prompt_logprobs)


@dataclass(frozen=True)
class ModelInfo:
    path: str
    architecture: str
    name: str
    backend: str                      # e.g. "cpu (avx2, 4 threads)"
    backend_note: str                 # why device "auto" chose the CPU, else ""
    draft_path: str                   # "" without a draft model
    draft_name: str
    n_vocab: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    context: int                      # max tokens per sequence
    weight_bytes: int
    kv_bytes: int
    draft_vocab: int                  # the draft's reduced vocabulary; 0: the whole one
    draft_type: str                   # "keep", "auto" or the type the draft was re-quantized to; "" without one
    weight_type: str                  # "keep" or the type the target's matrices were quantized to at load


Message = dict[str, str]  # {"role": ..., "content": ...}, as OpenAI's chat API writes them
