"""ctypes declarations of the stable C API (include/tandem/tandem.h) and where libtandem is.

ctypes, not a compiled extension: the C API is plain C99 and stable across minor versions
(struct_size versioning), so a binding needs no compiler, no CPython ABI tag (one wheel for
every Python 3.11+) and no build-time dependency beyond the library itself. ctypes also
releases the GIL around every foreign call, so other Python threads run while a
generation does; the streaming callback takes the GIL back only for its few lines.

The structs below mirror tandem.h field for field; the library fills in defaults for any
field a newer header adds, and tests/test_c_api.cpp holds the C side to that.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint64, c_void_p)

# The soname of the library this package was written against: before 1.0 each minor
# version may change the ABI (cmake/install.cmake), so a different minor is refused.
ABI_VERSION = "0.1"
LIBRARY_ENV = "TANDEM_LIBRARY"  # a libtandem.so to use instead of the packaged one

c_status = c_int


class LoadParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("model_path", c_char_p),
        ("draft_model_path", c_char_p),
        ("threads", c_int32),
        ("context", c_int32),
        ("kv_type", c_char_p),
        ("device", c_char_p),
        ("pin_threads", c_int32),
        ("gpu_mem_bytes", c_uint64),
        # appended after 0.1.0 (struct_size tells the library which fields are there)
        ("draft_vocab", c_int32),
        ("draft_vocab_counts", c_char_p),
        ("draft_type", c_char_p),
        ("weight_type", c_char_p),
    ]


class GenerateParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("max_tokens", c_int32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repetition_penalty", c_float),
        ("repetition_window", c_int32),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("seed", c_uint64),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_size_t),
        ("add_special", c_int32),
        ("parse_special", c_int32),
        ("ignore_eos", c_int32),
        ("draft_mode", c_int32),
        ("draft_max", c_int32),
        ("draft_min", c_int32),
        ("draft_p_min", c_float),
        ("ngram_min", c_int32),
        ("ngram_max", c_int32),
        ("verify_mode", c_int32),
        ("grammar", c_char_p),
        ("logprobs", c_int32),
        ("policy", c_char_p),
        ("alpha_prior", c_float),
        ("start_budget", c_float),
        ("lookup", c_int32),
        ("lookup_min", c_int32),
        ("tree_width", c_int32),
        ("tree_nodes", c_int32),
        ("prompt_logprobs", c_int32),
        ("logit_bias_tokens", POINTER(c_int32)),
        ("logit_bias_values", POINTER(c_float)),
        ("n_logit_bias", c_size_t),
        ("stop_token_ids", POINTER(c_int32)),
        ("n_stop_token_ids", c_size_t),
    ]


class Result(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("text", c_void_p),  # bytes with text_len: the text may contain NUL bytes
        ("text_len", c_size_t),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_size_t),
        ("prompt_tokens", POINTER(c_int32)),
        ("n_prompt_tokens", c_size_t),
        ("finish_reason", c_int32),
        ("prefill_ms", c_double),
        ("decode_ms", c_double),
        ("prefill_tokens_per_s", c_double),
        ("decode_tokens_per_s", c_double),
        ("spec_drafts", c_int64),
        ("spec_drafted_tokens", c_int64),
        ("spec_accepted_tokens", c_int64),
        ("spec_acceptance_rate", c_double),
        ("spec_mean_accepted_length", c_double),
        ("spec_target_passes", c_int64),
        ("spec_draft_forwards", c_int64),
        ("spec_draft_ms", c_double),
        ("spec_target_ms", c_double),
        ("spec_verify_ms", c_double),
        ("spec_drafted_per_position", POINTER(c_int64)),
        ("spec_accepted_per_position", POINTER(c_int64)),
        ("spec_n_positions", c_size_t),
        ("logprobs", c_void_p),
        ("n_logprobs", c_size_t),
        ("spec_lookup_steps", c_int64),
        ("spec_lookup_drafted_tokens", c_int64),
        ("spec_lookup_accepted_tokens", c_int64),
        ("seed", c_uint64),
        ("spec_tree_steps", c_int64),
        ("prompt_logprobs", c_void_p),
        ("n_prompt_logprobs", c_size_t),
    ]


class ModelInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("path", c_char_p),
        ("architecture", c_char_p),
        ("name", c_char_p),
        ("backend", c_char_p),
        ("draft_path", c_char_p),
        ("draft_name", c_char_p),
        ("n_vocab", c_int32),
        ("n_layer", c_int32),
        ("n_embd", c_int32),
        ("n_head", c_int32),
        ("n_head_kv", c_int32),
        ("context", c_int32),
        ("weight_bytes", c_uint64),
        ("kv_bytes", c_uint64),
        ("backend_note", c_char_p),
        # appended after 0.1.0
        ("draft_vocab", c_int32),
        ("draft_type", c_char_p),
        ("weight_type", c_char_p),
    ]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class Logprob(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float)]


class TokenLogprobs(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float), ("top", POINTER(Logprob)), ("n_top", c_size_t)]


StreamFn = CFUNCTYPE(c_int, c_void_p, c_size_t, c_int32, c_void_p)
# tandem_stream_logprobs_fn: the token's logprobs (a TokenLogprobs*, NULL when not asked for).
StreamLogprobsFn = CFUNCTYPE(c_int, c_void_p, c_size_t, c_int32, c_void_p, c_void_p)


def _candidates() -> list[pathlib.Path]:
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        return [pathlib.Path(explicit)]
    here = pathlib.Path(__file__).resolve().parent / "_lib"
    return [here / f"libtandem.so.{ABI_VERSION}"]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    def fn(name: str, restype: object, *argtypes: object) -> None:
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("tandem_version", c_char_p)
    fn("tandem_last_error", c_char_p)
    fn("tandem_status_string", c_char_p, c_status)
    fn("tandem_finish_reason_string", c_char_p, c_int32)
    fn("tandem_load_params_init", c_status, POINTER(LoadParams), c_size_t)
    fn("tandem_generate_params_init", c_status, POINTER(GenerateParams), c_size_t)
    fn("tandem_engine_load", c_status, POINTER(LoadParams), POINTER(c_void_p))
    fn("tandem_engine_free", None, c_void_p)
    fn("tandem_engine_info", c_status, c_void_p, POINTER(ModelInfo))
    fn("tandem_engine_cancel", c_status, c_void_p)
    fn("tandem_engine_calibrate", c_status, c_void_p, c_int32, c_char_p, POINTER(c_int32))
    fn("tandem_generate", c_status, c_void_p, c_char_p, POINTER(GenerateParams), StreamFn, c_void_p,
       POINTER(POINTER(Result)))
    fn("tandem_generate_tokens", c_status, c_void_p, POINTER(c_int32), c_size_t, POINTER(GenerateParams), StreamFn,
       c_void_p, POINTER(POINTER(Result)))
    fn("tandem_generate_logprobs", c_status, c_void_p, c_char_p, POINTER(GenerateParams), StreamLogprobsFn,
       c_void_p, POINTER(POINTER(Result)))
    fn("tandem_generate_tokens_logprobs", c_status, c_void_p, POINTER(c_int32), c_size_t, POINTER(GenerateParams),
       StreamLogprobsFn, c_void_p, POINTER(POINTER(Result)))
    fn("tandem_result_free", None, POINTER(Result))
    fn("tandem_tokenize", c_status, c_void_p, c_char_p, c_int, c_int, POINTER(c_int32), c_size_t, POINTER(c_size_t))
    fn("tandem_detokenize", c_status, c_void_p, POINTER(c_int32), c_size_t, c_void_p, c_size_t, POINTER(c_size_t))
    fn("tandem_json_schema_to_grammar", c_status, c_char_p, c_void_p, c_size_t, POINTER(c_size_t))
    fn("tandem_fim_tokenize", c_status, c_void_p, c_char_p, c_char_p, POINTER(c_int32), c_size_t, POINTER(c_size_t))
    fn("tandem_chat_render", c_status, c_void_p, POINTER(ChatMessage), c_size_t, c_void_p, c_size_t,
       POINTER(c_size_t))
    fn("tandem_chat_tokenize", c_status, c_void_p, POINTER(ChatMessage), c_size_t, POINTER(c_int32), c_size_t,
       POINTER(c_size_t))
    return lib


_LIB: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """libtandem, loaded and declared on first use (importing the package loads nothing)."""
    global _LIB
    if _LIB is None:
        tried = []
        for path in _candidates():
            if not path.exists():
                tried.append(f"{path} (missing)")
                continue
            try:
                loaded = ctypes.CDLL(str(path))
            except OSError as e:  # e.g. a system library it needs is not installed
                raise ImportError(f"tandem: cannot load {path}: {e} (run scripts/setup.sh for its dependencies)") from e
            try:
                _LIB = _declare(loaded)
            except AttributeError as e:
                raise ImportError(f"tandem: {path} lacks a function this package needs ({e}): "
                                  f"it is older than the package; rebuild it or reinstall the package") from e
            break
        if _LIB is None:
            raise ImportError("tandem: libtandem not found: " + "; ".join(tried) +
                              f". Install the package with `pip install ./python` or set {LIBRARY_ENV}.")
    return _LIB
