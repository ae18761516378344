"""The package on SmolLM2-135M: greedy text, n-gram and draft-model speculation giving the
same tokens as plain decoding, chat with the model's template, streaming, and the GIL
released during the library's work."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import tandem


def longest_stall(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Runs fn on another thread; returns the longest this thread was kept from running."""
    done = threading.Event()
    out: list[Any] = []

    def work() -> None:
        out.append(fn())
        done.set()

    t = threading.Thread(target=work)
    t.start()
    last, gap = time.monotonic(), 0.0
    while not done.is_set():
        now = time.monotonic()
        gap, last = max(gap, now - last), now
    t.join()
    return gap, out[0]


def test_the_gil_is_released_while_generating(smollm2: tandem.Engine) -> None:
    # A prompt's prefill is one library call with no callback into Python: had ctypes held
    # the GIL (a PyDLL), this thread would stand still for all of it (measured: a gap the
    # length of the prefill); released, it only waits for the interpreter's switch interval.
    prompt = "The history of the city, told street by street. " * 20
    gap, r = longest_stall(lambda: smollm2.generate(prompt, max_tokens=2, temperature=0))
    prefill_s = r.timings.prefill_ms / 1000
    assert prefill_s > 0.05, "the prefill is too quick to tell; lengthen the prompt"
    assert gap < 0.5 * prefill_s, (gap, prefill_s)


def test_greedy_knows_paris(smollm2: tandem.Engine) -> None:
    r = smollm2.generate("The capital of France is", max_tokens=8, temperature=0)
    assert "Paris" in r.text
    assert r.timings.decode_tokens_per_s > 0


def test_ngram_speculation_is_lossless(smollm2: tandem.Engine) -> None:
    prompt = ("one two three four five six seven eight. one two three four five six seven eight. "
              "one two three four five six seven eight. one two")  # continues by repeating itself
    plain = smollm2.generate(prompt, max_tokens=32, temperature=0, ignore_eos=True)
    spec = smollm2.generate(prompt, max_tokens=32, temperature=0, ignore_eos=True, draft="ngram", draft_max=4)
    assert spec.tokens == plain.tokens
    assert spec.speculative.drafted_tokens > 0 and spec.speculative.accepted_tokens > 0


def test_draft_model_speculation_is_lossless(smollm2_path: str, smollm2: tandem.Engine) -> None:
    plain = smollm2.generate("Write a haiku about rain.", max_tokens=24, temperature=0, ignore_eos=True)
    # draft_type="keep": the draft's weights as stored, the same as the target's (the default,
    # "auto", would re-quantize the file's Q8_0/Q6_K matrices to Q4_0 for the draft).
    with tandem.Engine.load(smollm2_path, draft=smollm2_path, threads=2, draft_type="keep") as e:
        assert e.info.draft_type == "keep"
        spec = e.generate("Write a haiku about rain.", max_tokens=24, temperature=0, ignore_eos=True)
    assert spec.tokens == plain.tokens
    m = spec.speculative
    assert m.draft_forwards > 0 and m.drafted_tokens > 0
    # The model drafting for itself agrees with itself almost always.
    assert m.acceptance_rate > 0.8
    # The default: a cheaper draft (auto), the same output.
    with tandem.Engine.load(smollm2_path, draft=smollm2_path, threads=2) as e:
        assert e.info.draft_type == "auto" and e.info.draft_vocab == 0
        auto = e.generate("Write a haiku about rain.", max_tokens=24, temperature=0, ignore_eos=True)
        assert auto.tokens == plain.tokens and auto.speculative.drafted_tokens > 0
        with pytest.raises(tandem.InvalidArgumentError, match="auto"):
            tandem.Engine.load(smollm2_path, draft=smollm2_path, threads=2, draft_type="q3_k")  # type: ignore[typeddict-item]


def test_chat_and_stream(smollm2: tandem.Engine) -> None:
    conv = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    prompt = smollm2.apply_chat_template(conv)
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    r = smollm2.chat(conv, max_tokens=16, temperature=0)
    assert "Paris" in r.text and r.finish_reason in ("stop", "length")
    assert "".join(smollm2.chat_stream(conv, max_tokens=16, temperature=0)) == r.text
