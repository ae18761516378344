"""tandem: speculative-decoding LLM inference (GGUF models) from Python.

    import tandem
    with tandem.Engine.load("model.gguf", draft="ngram") as engine:
        r = engine.generate("The capital of France is", max_tokens=16, temperature=0)
        print(r.text, r.speculative.acceptance_rate)
        for piece in engine.chat_stream([{"role": "user", "content": "Hi!"}]):
            print(piece, end="", flush=True)

A binding of the stable C API (include/tandem/tandem.h) through ctypes; see _native.py
for why. tandem.tune runs `tandem tune`, the measuring command, on this machine.
"""
from __future__ import annotations

from . import _native
from .engine import Engine, Stream, json_schema_to_grammar
from .errors import (BufferTooSmallError, GenerationError, InternalError, InvalidArgumentError, LoadError,
                     OutOfMemoryError, TandemError)
from .tune import tune
from .types import (GenerateResult, LoadOptions, ModelInfo, SamplingOptions, SpeculativeMetrics, Timings, TokenLogprob,
                    TokenLogprobs)

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the loaded libtandem (this package's is __version__)."""
    return (_native.lib().tandem_version() or b"").decode()


__all__ = [
    "Engine", "Stream", "GenerateResult", "TokenLogprobs", "TokenLogprob", "ModelInfo", "SpeculativeMetrics", "Timings", "LoadOptions",
    "SamplingOptions", "TandemError", "InvalidArgumentError", "LoadError", "BufferTooSmallError", "OutOfMemoryError",
    "GenerationError", "InternalError", "tune", "library_version", "json_schema_to_grammar", "__version__",
]
