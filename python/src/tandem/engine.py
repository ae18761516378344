"""Engine: a loaded model (and optional draft) over the C API, with generation, streaming,
chat and the tokenizer."""
from __future__ import annotations

import codecs
import ctypes
import json
import math
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from ctypes import POINTER, byref, c_char_p, c_float, c_int32, c_size_t, c_void_p
from typing import Any, Unpack

from . import _native as N
from .errors import InvalidArgumentError, TandemError, error_for
from .types import (FinishReason, GenerateResult, LoadOptions, ModelInfo, SamplingOptions, SpeculativeMetrics,
                    Timings, TokenLogprob, TokenLogprobs)

_OK, _CANCELLED, _BUFFER_TOO_SMALL = 0, 1, -3
_DRAFT_MODES = {"none": 0, "model": 1, "ngram": 2}
_VERIFY_MODES = {"rejection": 0, "coupled": 1}
_FINISH: dict[int, FinishReason] = {0: "stop", 1: "length", 2: "cancelled"}
# Sampling options copied into tandem_generate_params as they are (bools become 0/1).
_PLAIN_FIELDS = ("max_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "repetition_window",
                 "presence_penalty", "frequency_penalty", "seed", "add_special", "parse_special", "ignore_eos",
                 "draft_max", "draft_min", "draft_p_min", "ngram_min", "ngram_max", "alpha_prior", "start_budget",
                 "lookup", "lookup_min", "tree_width", "tree_nodes", "logprobs", "prompt_logprobs")
_MAX_TOP_LOGPROBS = 20  # TANDEM_MAX_TOP_LOGPROBS
_SAMPLING_KEYS = frozenset(_PLAIN_FIELDS) | {"stop", "draft", "verify", "grammar", "json_schema", "policy",
                                             "logit_bias", "stop_token_ids"}
_POLICIES = ("fixed", "confidence", "adaptive", "goodput")
_SEED_RANDOM = 2**64 - 1  # TANDEM_SEED_RANDOM: the library draws a fresh seed
_LOAD_KEYS = frozenset({"threads", "context", "kv_type", "pin_threads", "gpu_mem_bytes", "draft_vocab",
                        "draft_vocab_counts", "draft_type", "weight_type"})


def _check(status: int) -> int:
    """Raises the mapped exception for a failed call; returns OK/CANCELLED."""
    if status < 0:
        raise error_for(status, (N.lib().tandem_last_error() or b"").decode("utf-8", "replace"))
    return status


def _unknown(given: Mapping[str, Any], known: frozenset[str], what: str) -> None:
    extra = sorted(set(given) - known)
    if extra:
        raise TypeError(f"{what}: unknown option(s) {', '.join(extra)}; known: {', '.join(sorted(known))}")


def _no_nul(text: str, what: str) -> bytes:
    # A C string ends at NUL: the rest would be dropped silently.
    if "\0" in text:
        raise InvalidArgumentError(f"{what} contains a NUL character")
    return text.encode("utf-8")


def json_schema_to_grammar(schema: Mapping[str, Any] | str) -> str:
    """The GBNF grammar of the JSON documents valid against `schema` (a dict or JSON text;
    {} or "" → any JSON object). Raises InvalidArgumentError naming what a grammar cannot
    express (pattern backreferences, not, if/then/else, ...)."""
    text = schema if isinstance(schema, str) else ("" if not schema else json.dumps(schema))
    raw = _no_nul(text, "the JSON schema")
    lib, n = N.lib(), c_size_t()
    while True:
        buf = ctypes.create_string_buffer(max(n.value + 1, 1))
        status = lib.tandem_json_schema_to_grammar(raw, buf, len(buf), byref(n))
        if status != _BUFFER_TOO_SMALL:
            _check(status)
            return buf.raw[:n.value].decode("utf-8")


def constraint_grammar(grammar: str | None, json_schema: Mapping[str, Any] | str | None) -> bytes | None:
    if grammar is not None and json_schema is not None:
        raise InvalidArgumentError("give grammar or json_schema, not both")
    if grammar is not None:
        if not isinstance(grammar, str):
            raise TypeError("grammar must be a str (GBNF)")
        return _no_nul(grammar, "the grammar")
    if json_schema is not None:
        return json_schema_to_grammar(json_schema).encode("utf-8")
    return None


def _token_logprobs(lp: N.TokenLogprobs) -> TokenLogprobs:
    return TokenLogprobs(lp.token, lp.logprob, [TokenLogprob(t.token, t.logprob) for t in lp.top[:lp.n_top]])


def _logprobs_list(ptr: int | None, n: int) -> list[TokenLogprobs]:
    if not ptr or n == 0:
        return []
    arr = ctypes.cast(ptr, POINTER(N.TokenLogprobs))
    return [_token_logprobs(arr[i]) for i in range(n)]


class _Generation:
    """One tandem_generate* call's inputs, kept alive (ctypes does not own them) until it returns."""

    def __init__(self, prompt: str | Sequence[int], params: N.GenerateParams, keep: list[Any]) -> None:
        self.params, self.keep = params, keep
        self.logprobs = params.logprobs >= 0
        self.prompt_logprobs = params.prompt_logprobs >= 0
        if isinstance(prompt, str):
            self.text: bytes | None = _no_nul(prompt, "the prompt")
            self.tokens = None
        else:
            self.text = None
            self.tokens = (c_int32 * len(prompt))(*prompt)

    def run(self, handle: c_void_p, callback: Any) -> tuple[int, Any]:
        out = POINTER(N.Result)()
        lib = N.lib()
        if self.text is not None:
            status = lib.tandem_generate_logprobs(handle, self.text, byref(self.params), callback, None, byref(out))
        else:
            assert self.tokens is not None
            status = lib.tandem_generate_tokens_logprobs(handle, self.tokens, len(self.tokens), byref(self.params),
                                                         callback, None, byref(out))
        return status, out


def _result(ptr: Any, gen: _Generation) -> GenerateResult:
    """Copies a tandem_result into Python objects and frees it."""
    try:
        r = ptr.contents
        text = ctypes.string_at(r.text, r.text_len).decode("utf-8", "replace") if r.text else ""
        n_pos = r.spec_n_positions
        spec = SpeculativeMetrics(
            drafts=r.spec_drafts, drafted_tokens=r.spec_drafted_tokens, accepted_tokens=r.spec_accepted_tokens,
            acceptance_rate=r.spec_acceptance_rate, mean_accepted_length=r.spec_mean_accepted_length,
            target_passes=r.spec_target_passes, draft_forwards=r.spec_draft_forwards, draft_ms=r.spec_draft_ms,
            target_ms=r.spec_target_ms, verify_ms=r.spec_verify_ms,
            drafted_per_position=r.spec_drafted_per_position[:n_pos],
            accepted_per_position=r.spec_accepted_per_position[:n_pos],
            lookup_steps=r.spec_lookup_steps, lookup_drafted_tokens=r.spec_lookup_drafted_tokens,
            lookup_accepted_tokens=r.spec_lookup_accepted_tokens, tree_steps=r.spec_tree_steps)
        return GenerateResult(
            text=text, tokens=r.tokens[:r.n_tokens], prompt_tokens=r.prompt_tokens[:r.n_prompt_tokens],
            finish_reason=_FINISH.get(r.finish_reason, "stop"),
            timings=Timings(r.prefill_ms, r.decode_ms, r.prefill_tokens_per_s, r.decode_tokens_per_s),
            speculative=spec, seed=r.seed,
            logprobs=_logprobs_list(r.logprobs, r.n_logprobs) if gen.logprobs else None,
            prompt_logprobs=_logprobs_list(r.prompt_logprobs, r.n_prompt_logprobs) if gen.prompt_logprobs else None)
    finally:
        N.lib().tandem_result_free(ptr)


class Engine:
    """A loaded model. Thread-safe: generations on one engine run one at a time (later
    ones wait), tokenizer and chat-template calls run any time. Close it (or use `with`)
    to free its memory at once; otherwise the garbage collector does."""

    def __init__(self, handle: c_void_p, default_draft: str) -> None:
        # Engine.load makes engines; this is not meant to be called directly.
        self._handle: c_void_p | None = handle
        self._default_draft = default_draft
        self._lock = threading.Condition()
        self._active = 0  # calls in flight: close() waits for them before freeing
        self._info: ModelInfo | None = None

    # ---- lifetime ---------------------------------------------------------------------
    @classmethod
    def load(cls, model: str | os.PathLike[str], draft: str | os.PathLike[str] | None = None, device: str = "auto",
             **options: Unpack[LoadOptions]) -> Engine:
        """Loads `model` (a GGUF file or a Hugging Face model folder). `draft`: a draft model
        (GGUF file or folder; it must share the target's vocabulary), "ngram" for prompt-lookup
        drafting, or None for plain decoding; it is the default proposer of every generation (override per call with
        draft="none"/"model"/"ngram"). `device`: "auto", "cpu", "cuda"."""
        _unknown(options, _LOAD_KEYS, "Engine.load")
        lib = N.lib()
        p = N.LoadParams()
        _check(lib.tandem_load_params_init(byref(p), ctypes.sizeof(p)))
        model_b = os.fsencode(model)
        p.model_path = model_b
        draft_b = None
        if draft is None:
            default = "none"
        elif os.fspath(draft) == "ngram":
            default = "ngram"
        else:
            default = "model"
            draft_b = os.fsencode(draft)
        p.draft_model_path = draft_b
        device_b = device.encode()
        p.device = device_b
        kv_b = None
        if "threads" in options:
            p.threads = options["threads"]
        if "context" in options:
            p.context = options["context"]
        if "kv_type" in options:
            kv_b = options["kv_type"].encode()
            p.kv_type = kv_b
        if "pin_threads" in options:
            p.pin_threads = int(bool(options["pin_threads"]))
        if "gpu_mem_bytes" in options:
            p.gpu_mem_bytes = options["gpu_mem_bytes"]
        if "draft_vocab" in options:
            p.draft_vocab = options["draft_vocab"]
        counts_b = type_b = weight_b = None  # kept alive until the load returns
        if "draft_vocab_counts" in options:
            counts_b = os.fsencode(options["draft_vocab_counts"])
            p.draft_vocab_counts = counts_b
        if "draft_type" in options:
            type_b = options["draft_type"].encode()
            p.draft_type = type_b
        if "weight_type" in options:
            weight_b = options["weight_type"].encode()
            p.weight_type = weight_b
        handle = c_void_p()
        _check(lib.tandem_engine_load(byref(p), byref(handle)))
        return cls(handle, default)

    def close(self) -> None:
        """Cancels running generations, waits for them to return, and frees the engine.
        Idempotent; any later call raises InvalidArgumentError."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is None:
                return
            if self._active:
                N.lib().tandem_engine_cancel(handle)
            while self._active:
                self._lock.wait()
        N.lib().tandem_engine_free(handle)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass

    def _enter(self) -> c_void_p:
        with self._lock:
            if self._handle is None:
                raise InvalidArgumentError("the engine is closed")
            self._active += 1
            return self._handle

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1
            self._lock.notify_all()

    def _call(self, fn: Callable[[c_void_p], Any]) -> Any:
        handle = self._enter()
        try:
            return fn(handle)
        finally:
            self._leave()

    # ---- information ------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo:
        if self._info is None:
            i = N.ModelInfo()
            i.struct_size = ctypes.sizeof(i)
            self._call(lambda h: _check(N.lib().tandem_engine_info(h, byref(i))))

            def s(b: bytes | None) -> str:
                return (b or b"").decode("utf-8", "replace")

            self._info = ModelInfo(
                path=s(i.path), architecture=s(i.architecture), name=s(i.name), backend=s(i.backend),
                backend_note=s(i.backend_note), draft_path=s(i.draft_path), draft_name=s(i.draft_name),
                n_vocab=i.n_vocab, n_layer=i.n_layer, n_embd=i.n_embd, n_head=i.n_head, n_head_kv=i.n_head_kv,
                context=i.context, weight_bytes=i.weight_bytes, kv_bytes=i.kv_bytes, draft_vocab=i.draft_vocab,
                draft_type=s(i.draft_type), weight_type=s(i.weight_type))
        return self._info

    def cancel(self) -> None:
        """Cancels every generation running or waiting on this engine now (from any thread)."""
        self._call(lambda h: _check(N.lib().tandem_engine_cancel(h)))

    def calibrate(self, k_max: int = 0, cache_path: str | os.PathLike[str] | None = None) -> bool:
        """Measures the target's and the draft's forward passes (a few seconds), or takes them
        from the cost cache, and installs the cost model the "adaptive" and "goodput" policies
        decide with (what `tandem generate` does before its first request). k_max: the longest
        draft to cover (0: 8); cache_path: None for the default cache file, "" for none.
        Returns True when the cache had it."""
        path_b = None if cache_path is None else os.fsencode(cache_path)
        cached = ctypes.c_int32(0)
        self._call(lambda h: _check(N.lib().tandem_engine_calibrate(h, k_max, path_b, byref(cached))))
        return bool(cached.value)

    # ---- tokenizer --------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of `text`; add_special prepends BOS etc. as the model's metadata says."""
        data = _no_nul(text, "the text")

        def run(h: c_void_p) -> list[int]:
            lib, n = N.lib(), c_size_t()
            while True:  # the size can only be known by asking; a second call fills the buffer
                buf = (c_int32 * max(n.value, 1))()
                status = lib.tandem_tokenize(h, data, int(add_special), int(parse_special), buf, len(buf), byref(n))
                if status != _BUFFER_TOO_SMALL:
                    _check(status)
                    return buf[:n.value]
        return self._call(run)  # type: ignore[no-any-return]

    def detokenize_bytes(self, tokens: Sequence[int]) -> bytes:
        """The raw bytes of the tokens' texts (a UTF-8 character cut between tokens stays cut)."""
        ids = (c_int32 * len(tokens))(*tokens)

        def run(h: c_void_p) -> bytes:
            lib, n = N.lib(), c_size_t()
            while True:
                buf = ctypes.create_string_buffer(n.value + 1)
                status = lib.tandem_detokenize(h, ids, len(ids), buf, len(buf), byref(n))
                if status != _BUFFER_TOO_SMALL:
                    _check(status)
                    return buf.raw[:n.value]
        return self._call(run)  # type: ignore[no-any-return]

    def detokenize(self, tokens: Sequence[int]) -> str:
        """The tokens' text (an incomplete UTF-8 character becomes U+FFFD)."""
        return self.detokenize_bytes(tokens).decode("utf-8", "replace")

    def fim_prompt(self, prefix: str, suffix: str) -> list[int]:
        """A fill-in-the-middle prompt for a code model (Qwen2.5-Coder, StarCoder, CodeLlama, ...):
        its FIM markers around `prefix` (the text before the insertion point) and `suffix` (the
        text after it); `generate(ids)` then writes what goes between. InvalidArgumentError for
        a model without the markers."""
        pre, suf = _no_nul(prefix, "the prefix"), _no_nul(suffix, "the suffix")

        def run(h: c_void_p) -> list[int]:
            lib, n = N.lib(), c_size_t()
            while True:
                buf = (c_int32 * max(n.value, 1))()
                status = lib.tandem_fim_tokenize(h, pre, suf, buf, len(buf), byref(n))
                if status != _BUFFER_TOO_SMALL:
                    _check(status)
                    return buf[:n.value]
        return self._call(run)  # type: ignore[no-any-return]

    # ---- chat -------------------------------------------------------------------------
    @staticmethod
    def _messages(messages: Sequence[Mapping[str, str]]) -> tuple[Any, list[bytes]]:
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a sequence of {'role': ..., 'content': ...} mappings")
        arr = (N.ChatMessage * max(len(messages), 1))()
        keep: list[bytes] = []
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise TypeError(f"message {i} must be a mapping with str 'role' and 'content'")
            role, content = _no_nul(m["role"], f"message {i}'s role"), _no_nul(m["content"], f"message {i}'s content")
            keep += [role, content]
            arr[i].role, arr[i].content = role, content
        return arr, keep

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt the model's chat template makes of `messages`, ending with the assistant's turn."""
        arr, _keep = self._messages(messages)

        def run(h: c_void_p) -> str:
            lib, n = N.lib(), c_size_t()
            while True:
                buf = ctypes.create_string_buffer(n.value + 1)
                status = lib.tandem_chat_render(h, arr, len(messages), buf, len(buf), byref(n))
                if status != _BUFFER_TOO_SMALL:
                    _check(status)
                    return buf.raw[:n.value].decode("utf-8", "replace")
        return self._call(run)  # type: ignore[no-any-return]

    def chat_tokens(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The token ids of the chat prompt, exactly as `tandem serve` builds them."""
        arr, _keep = self._messages(messages)

        def run(h: c_void_p) -> list[int]:
            lib, n = N.lib(), c_size_t()
            while True:
                buf = (c_int32 * max(n.value, 1))()
                status = lib.tandem_chat_tokenize(h, arr, len(messages), buf, len(buf), byref(n))
                if status != _BUFFER_TOO_SMALL:
                    _check(status)
                    return buf[:n.value]
        return self._call(run)  # type: ignore[no-any-return]

    def chat(self, messages: Sequence[Mapping[str, str]], **sampling: Unpack[SamplingOptions]) -> GenerateResult:
        """The assistant's reply to `messages` (the model's chat template applied)."""
        opts: SamplingOptions = {**sampling, "add_special": False}  # the chat tokens carry BOS already
        return self.generate(self.chat_tokens(messages), **opts)

    def chat_stream(self, messages: Sequence[Mapping[str, str]], **sampling: Unpack[SamplingOptions]) -> Stream:
        opts: SamplingOptions = {**sampling, "add_special": False}
        return self.stream(self.chat_tokens(messages), **opts)

    # ---- generation -------------------------------------------------------------------
    def _params(self, sampling: Mapping[str, Any]) -> tuple[N.GenerateParams, list[Any]]:
        _unknown(sampling, _SAMPLING_KEYS, "generate")
        p = N.GenerateParams()
        _check(N.lib().tandem_generate_params_init(byref(p), ctypes.sizeof(p)))
        keep: list[Any] = []
        for key in _PLAIN_FIELDS:
            if key in sampling:
                v = sampling[key]
                if key == "seed":
                    if v is None:
                        continue  # the library draws a fresh one (GenerateResult.seed reports it)
                    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _SEED_RANDOM:
                        raise InvalidArgumentError(f"seed must be an int in 0..2**64-2 or None, not {v!r}")
                if key in ("logprobs", "prompt_logprobs"):
                    if v is None:
                        continue  # none (the library's -1)
                    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_TOP_LOGPROBS:
                        raise InvalidArgumentError(
                            f"{key} must be None or an int in 0..{_MAX_TOP_LOGPROBS} (alternatives per token), not {v!r}")
                if isinstance(v, bool) or key in ("add_special", "parse_special", "ignore_eos"):
                    v = int(bool(v))
                setattr(p, key, v)
        draft = sampling.get("draft", self._default_draft)
        if draft not in _DRAFT_MODES:
            raise InvalidArgumentError(f"draft must be one of {', '.join(_DRAFT_MODES)}, not {draft!r}")
        p.draft_mode = _DRAFT_MODES[draft]
        verify = sampling.get("verify", "coupled")
        if verify not in _VERIFY_MODES:
            raise InvalidArgumentError(f"verify must be one of {', '.join(_VERIFY_MODES)}, not {verify!r}")
        p.verify_mode = _VERIFY_MODES[verify]
        policy = sampling.get("policy")
        if policy is not None:
            if policy not in _POLICIES:
                raise InvalidArgumentError(f"policy must be one of {', '.join(_POLICIES)}, not {policy!r}")
            policy_b = policy.encode()
            keep.append(policy_b)
            p.policy = policy_b
        bias = sampling.get("logit_bias")
        if bias:
            if not isinstance(bias, Mapping):
                raise TypeError("logit_bias must be a mapping of token id to bias")
            ids, values = list(bias.keys()), list(bias.values())
            for t, b in zip(ids, values):
                if isinstance(t, bool) or not isinstance(t, int):
                    raise InvalidArgumentError(f"logit_bias keys must be token ids (int), not {t!r}")
                if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
                    raise InvalidArgumentError(f"logit_bias[{t}] must be a finite number, not {b!r}")
            if any(not -2**31 <= t < 2**31 for t in ids):
                raise InvalidArgumentError("logit_bias: a token id is outside the vocabulary")
            tokens = (c_int32 * len(ids))(*ids)
            biases = (c_float * len(values))(*values)
            keep += [tokens, biases]
            p.logit_bias_tokens = ctypes.cast(tokens, POINTER(c_int32))
            p.logit_bias_values = ctypes.cast(biases, POINTER(c_float))
            p.n_logit_bias = len(ids)
        stop_ids = sampling.get("stop_token_ids")
        if stop_ids:
            if isinstance(stop_ids, (str, bytes)) or not isinstance(stop_ids, Sequence):
                raise TypeError("stop_token_ids must be a sequence of token ids")
            for t in stop_ids:
                if isinstance(t, bool) or not isinstance(t, int):
                    raise InvalidArgumentError(f"stop_token_ids must be token ids (int), not {t!r}")
                if not -2**31 <= t < 2**31:
                    raise InvalidArgumentError(f"stop token id {t} is outside the vocabulary")
            stop_arr = (c_int32 * len(stop_ids))(*stop_ids)
            keep.append(stop_arr)
            p.stop_token_ids = ctypes.cast(stop_arr, POINTER(c_int32))
            p.n_stop_token_ids = len(stop_ids)
        stop = sampling.get("stop")
        if stop is not None:
            stops = [stop] if isinstance(stop, str) else list(stop)
            if not all(isinstance(s, str) for s in stops):
                raise TypeError("stop must be a str or a sequence of str")
            encoded = [_no_nul(s, "a stop string") for s in stops]
            arr = (c_char_p * max(len(encoded), 1))(*encoded)
            keep += [encoded, arr]
            p.stop = ctypes.cast(arr, POINTER(c_char_p))
            p.n_stop = len(encoded)
        grammar = constraint_grammar(sampling.get("grammar"), sampling.get("json_schema"))
        if grammar is not None:
            keep.append(grammar)
            p.grammar = grammar
        return p, keep

    def generate(self, prompt: str | Sequence[int], **sampling: Unpack[SamplingOptions]) -> GenerateResult:
        """Generates from a text (or token-id) prompt and returns the whole result.

        The library generates on a helper thread while this one waits (the GIL released):
        so Ctrl-C (KeyboardInterrupt, which Python delivers to the main thread) cancels the
        generation at its next token, waits for it to end, and is raised here."""
        s = self.stream(prompt, **sampling)
        try:
            for _ in s:
                pass
        except BaseException:
            s.close()
            raise
        assert s.result is not None  # a stream that ended without an error has its result
        return s.result

    def stream(self, prompt: str | Sequence[int], **sampling: Unpack[SamplingOptions]) -> Stream:
        """Generates on a background thread, yielding text pieces as they come. Breaking out
        of the loop (or close()) cancels the generation and frees its sequence."""
        params, keep = self._params(sampling)
        return Stream(self, _Generation(prompt, params, keep))


_END = object()


class _StreamState:
    """What the generating thread shares with the consumer; it holds no reference to the
    Stream object, so dropping the Stream (breaking out of a for loop) can close it."""

    def __init__(self, logprobs: bool) -> None:
        self.logprobs = logprobs
        # (bytes, token, TokenLogprobs | None) per library callback; the last callback may only
        # flush held-back text (token None there when it can be told: logprobs were asked for).
        self.pieces: queue.Queue[Any] = queue.Queue()
        self.cancel = threading.Event()
        self.result: GenerateResult | None = None
        self.error: BaseException | None = None

    def on_token(self, text: int | None, n: int, token: int, lp: int | None, user: int | None) -> int:
        try:
            if self.cancel.is_set():
                return 1
            data = ctypes.string_at(text, n) if n and text else b""
            logprobs = _token_logprobs(ctypes.cast(lp, POINTER(N.TokenLogprobs)).contents) if lp else None
            self.pieces.put((data, None if self.logprobs and logprobs is None else token, logprobs))
            return 0
        except BaseException as e:  # noqa: BLE001 - reported to the consumer
            self.error = self.error or e
            return 1

    def run(self, engine: Engine, gen: _Generation, handle: c_void_p) -> None:
        callback = N.StreamLogprobsFn(self.on_token)
        try:
            status, out = gen.run(handle, callback)
            if status < 0:
                _check(status)
            self.result = _result(out, gen)
        except BaseException as e:  # noqa: BLE001 - reported to the consumer
            self.error = self.error or e
        finally:
            engine._leave()
            self.pieces.put(_END)


class Stream(Iterator[str]):
    """The text of a generation, piece by piece as it is produced (never an empty piece; one
    piece may hold several tokens' text, e.g. a UTF-8 character split across tokens).
    `tokens` grows as pieces are read, and with the logprobs option `logprobs` with it (one
    entry per token); `result` is set once the stream has ended, and then `tokens` and
    `logprobs` are the result's."""

    def __init__(self, engine: Engine, gen: _Generation) -> None:
        self._state = _StreamState(gen.logprobs)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._done = False
        self.tokens: list[int] = []
        self.logprobs: list[TokenLogprobs] | None = [] if gen.logprobs else None
        handle = engine._enter()
        self._thread = threading.Thread(target=self._state.run, args=(engine, gen, handle), daemon=True,
                                        name="tandem-stream")
        try:
            self._thread.start()
        except BaseException:
            engine._leave()
            raise

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> str:
        while not self._done:
            item = self._state.pieces.get()
            if item is _END:
                self._finish()
                break
            data, token, logprobs = item
            if token is not None:
                self.tokens.append(token)
            if logprobs is not None and self.logprobs is not None:
                self.logprobs.append(logprobs)
            text = self._decoder.decode(data)
            if text:
                return text
        tail = self._decoder.decode(b"", final=True)
        if tail:
            return tail
        raise StopIteration

    def _finish(self) -> None:
        self._thread.join()
        self._done = True
        r = self._state.result
        if r is not None:
            # (The library's last callback may only flush held-back text, repeating the last
            # token; the result's lists are exact.)
            self.tokens = list(r.tokens)
            if r.logprobs is not None:
                self.logprobs = list(r.logprobs)
        if self._state.error is not None:
            error, self._state.error = self._state.error, None
            raise error

    @property
    def result(self) -> GenerateResult | None:
        """The whole generation (text, tokens, metrics) once the stream has ended, else None."""
        return self._state.result if self._done else None

    @property
    def finished(self) -> bool:
        return self._done

    def close(self) -> None:
        """Cancels the generation (it stops before its next token) and waits for it to end.
        The result, if any, says finish_reason "cancelled"."""
        if self._done:
            return
        self._state.cancel.set()
        self._thread.join()
        self._done = True
        if self._state.result is not None:
            self.tokens = list(self._state.result.tokens)
            if self._state.result.logprobs is not None:
                self.logprobs = list(self._state.result.logprobs)
        # An error after cancelling is of no interest to a consumer that walked away.
        self._state.error = None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


__all__ = ["Engine", "Stream", "TandemError"]
