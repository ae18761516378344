"""The package's API on a tiny random-weight model: loading and its errors, the tokenizer,
generation (text and token prompts, stop strings), speculation giving the plain greedy
tokens, streaming, cancellation by leaving the loop, chat, closing, tune. (The GIL: test_smollm2.py,
where one library call lasts long enough to tell.)"""
from __future__ import annotations

import json
import threading
import time

import pytest

import tandem

# Ids that repeat, so n-gram lookup finds continuations (as tests/test_c_api.cpp does).
REPETITIVE = [17, 42, 99, 150, 7, 230, 64, 5] * 3


def greedy(n: int) -> dict:
    return {"max_tokens": n, "temperature": 0.0, "ignore_eos": True}


def test_versions_agree() -> None:
    assert tandem.__version__ == tandem.library_version()


def test_load_errors_are_mapped(tmp_path, tiny_path: str) -> None:
    with pytest.raises(tandem.LoadError) as e:
        tandem.Engine.load(str(tmp_path / "missing.gguf"))
    assert isinstance(e.value, OSError) and e.value.status == -2 and "missing.gguf" in str(e.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF not really")
    with pytest.raises(tandem.LoadError):
        tandem.Engine.load(str(bad))
    with pytest.raises(TypeError, match="unknown option"):
        tandem.Engine.load(tiny_path, thread=1)  # type: ignore[call-arg]
    with pytest.raises(tandem.TandemError) as e2:
        tandem.Engine.load(tiny_path, device="tpu")
    assert "tpu" in str(e2.value)
    with pytest.raises(tandem.TandemError):
        tandem.Engine.load(tiny_path, kv_type="int3")  # type: ignore[arg-type]


def test_info(tiny: tandem.Engine, tiny_path: str) -> None:
    i = tiny.info
    assert i.path == tiny_path and i.architecture == "llama" and i.n_vocab == 320 and i.context == 512
    assert i.draft_path == "" and "cpu" in i.backend


def test_tokenizer_round_trip_and_errors(tiny: tandem.Engine) -> None:
    text = "Hello world, hello tandem!"
    ids = tiny.tokenize(text, add_special=False)
    assert ids and all(0 <= t < 320 for t in ids)
    assert tiny.detokenize(ids) == text
    assert tiny.detokenize_bytes(ids) == text.encode()
    assert tiny.tokenize("") == [] or tiny.tokenize("") == tiny.tokenize("", add_special=True)
    with pytest.raises(tandem.InvalidArgumentError) as e:
        tiny.detokenize([5, 320])
    assert isinstance(e.value, ValueError) and "320" in str(e.value)
    with pytest.raises(tandem.InvalidArgumentError, match="NUL"):
        tiny.tokenize("a\0b")


def test_generate_text_and_tokens(tiny: tandem.Engine) -> None:
    a = tiny.generate("The capital of", **greedy(12))
    b = tiny.generate("The capital of", **greedy(12))
    assert a.tokens == b.tokens and len(a.tokens) == 12 and a.finish_reason == "length"
    # (The text leaves out control tokens such as <|im_end|>, which random weights emit.)
    assert a.text and a.text in tiny.detokenize(a.tokens)
    assert a.prompt_tokens == tiny.tokenize("The capital of", parse_special=True)
    c = tiny.generate(a.prompt_tokens, **greedy(12))
    assert c.tokens == a.tokens
    assert a.timings.decode_ms > 0 and a.timings.prefill_ms > 0
    assert a.speculative.drafted_tokens == 0
    with pytest.raises(TypeError, match="unknown option"):
        tiny.generate("x", temprature=0.5)  # type: ignore[call-arg]
    with pytest.raises(tandem.InvalidArgumentError, match="draft"):
        tiny.generate("x", draft="medusa")  # type: ignore[arg-type]
    with pytest.raises(tandem.InvalidArgumentError):
        tiny.generate([1, 999], max_tokens=2)
    with pytest.raises(tandem.InvalidArgumentError):
        tiny.generate("x", max_tokens=4, draft_max=-1)


def test_stop_strings(tiny: tandem.Engine) -> None:
    full = tiny.generate("Once", **greedy(24))
    stop = full.text[len(full.text) // 2:][:3]
    assert stop
    cut = tiny.generate("Once", **greedy(24), stop=[stop, "\x01never"])
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[:full.text.index(stop)]


def test_sampling_is_seeded(tiny: tandem.Engine) -> None:
    a = tiny.generate("Once", max_tokens=16, temperature=1.0, seed=7, ignore_eos=True)
    b = tiny.generate("Once", max_tokens=16, temperature=1.0, seed=7, ignore_eos=True)
    assert a.tokens == b.tokens
    assert a.seed == 7


def test_unseeded_calls_draw_fresh_seeds_and_report_them(tiny: tandem.Engine) -> None:
    # No seed (or None): a fresh one per call, reported; given back, it reproduces the text.
    # (The fixture's distributions are peaked: two calls may well agree, sixteen not all.)
    def hot(seed: int | None) -> tandem.GenerateResult:
        return tiny.generate("Once", max_tokens=24, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, ignore_eos=True,
                             seed=seed)

    runs = [tiny.generate("Once", max_tokens=24, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, ignore_eos=True)
            for _ in range(8)] + [hot(None) for _ in range(8)]
    assert len({r.seed for r in runs}) == len(runs)
    assert len({tuple(r.tokens) for r in runs}) > 1, "sixteen unseeded calls at temperature 1 gave one text"
    for r in runs[:4]:
        assert hot(r.seed).tokens == r.tokens
    for bad in (-1, 2**64 - 1, 1.5, True):
        with pytest.raises(tandem.InvalidArgumentError):
            tiny.generate("Once", seed=bad, max_tokens=1)  # type: ignore[arg-type]


def test_logprobs_are_the_tokens_and_stream_with_them(tiny: tandem.Engine) -> None:
    plain = tiny.generate("Once", **greedy(10))
    assert plain.logprobs is None and plain.prompt_logprobs is None
    r = tiny.generate("Once", **greedy(10), logprobs=3)
    assert r.tokens == plain.tokens and r.logprobs is not None and len(r.logprobs) == len(r.tokens)
    for token, lp in zip(r.tokens, r.logprobs):
        # Greedy: the token is the most likely one, its logprob the first alternative's.
        assert lp.token == token and len(lp.top) == 3
        assert lp.top[0].token == token and lp.top[0].logprob == lp.logprob <= 0.0
        assert [t.logprob for t in lp.top] == sorted((t.logprob for t in lp.top), reverse=True)
        assert len({t.token for t in lp.top}) == 3
    s = tiny.stream("Once", **greedy(10), logprobs=3)
    seen = []
    for _ in s:
        assert s.logprobs is not None and len(s.logprobs) == len(s.tokens)
        seen = list(s.logprobs)
    assert s.logprobs == r.logprobs and seen == r.logprobs[:len(seen)] and seen
    assert tiny.stream("Once", **greedy(2)).logprobs is None
    for bad in (-1, 21, 1.5, True):
        with pytest.raises(tandem.InvalidArgumentError, match="logprobs"):
            tiny.generate("Once", max_tokens=1, logprobs=bad)  # type: ignore[arg-type]
        with pytest.raises(tandem.InvalidArgumentError, match="prompt_logprobs"):
            tiny.generate("Once", max_tokens=1, prompt_logprobs=bad)  # type: ignore[arg-type]


def test_logit_bias_forces_and_bans_tokens(tiny: tandem.Engine) -> None:
    plain = tiny.generate("Once", **greedy(6))
    forced = tiny.generate("Once", **greedy(6), logit_bias={7: 100.0})
    assert forced.tokens == [7] * 6
    banned = tiny.generate("Once", **greedy(6), logit_bias={plain.tokens[0]: -100})
    assert len(banned.tokens) == 6 and plain.tokens[0] not in banned.tokens
    # The logprobs describe the biased distribution: the forced token is all but certain.
    lp = tiny.generate("Once", **greedy(2), logit_bias={7: 100.0}, logprobs=1).logprobs
    assert lp is not None and all(t.token == 7 and t.logprob > -1e-3 for t in lp)
    with pytest.raises(tandem.InvalidArgumentError, match="logit_bias"):
        tiny.generate("Once", max_tokens=1, logit_bias={10**6: 1.0})
    with pytest.raises(tandem.InvalidArgumentError, match="logit_bias"):
        tiny.generate("Once", max_tokens=1, logit_bias={1: float("nan")})
    with pytest.raises(tandem.InvalidArgumentError, match="logit_bias"):
        tiny.generate("Once", max_tokens=1, logit_bias={"1": 1.0})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="logit_bias"):
        tiny.generate("Once", max_tokens=1, logit_bias=[(1, 1.0)])  # type: ignore[arg-type]


def test_stop_token_ids_end_the_output_at_the_token(tiny: tandem.Engine) -> None:
    plain = tiny.generate("Once", **greedy(8))
    assert len(plain.tokens) == 8
    stop = plain.tokens[4]
    at = plain.tokens.index(stop)
    r = tiny.generate("Once", **greedy(8), stop_token_ids=[stop])
    assert r.tokens == plain.tokens[:at + 1] and r.finish_reason == "stop"
    assert r.text == tiny.generate("Once", **greedy(at)).text  # the stop token adds no text
    # (greedy() sets ignore_eos, which does not lift stop token ids; without it the same cut.)
    assert tiny.generate("Once", **{**greedy(8), "ignore_eos": False}, stop_token_ids=[stop]).tokens == r.tokens
    with pytest.raises(tandem.InvalidArgumentError, match="stop token id"):
        tiny.generate("Once", max_tokens=1, stop_token_ids=[10**6])
    with pytest.raises(tandem.InvalidArgumentError, match="stop_token_ids"):
        tiny.generate("Once", max_tokens=1, stop_token_ids=["1"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="stop_token_ids"):
        tiny.generate("Once", max_tokens=1, stop_token_ids=5)  # type: ignore[arg-type]


def test_prompt_logprobs_score_a_text_as_its_generation_drew_it(tiny: tandem.Engine) -> None:
    # At temperature 1 with no cuts, a sampled token's logprob is the raw distribution's, which
    # is what scoring the prompt gives: the generated text scored as a prompt must agree.
    free = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "ignore_eos": True, "seed": 11}
    r = tiny.generate("Once upon", max_tokens=12, logprobs=2, prompt_logprobs=2, **free)  # type: ignore[arg-type]
    assert r.logprobs is not None and r.prompt_logprobs is not None
    assert [lp.token for lp in r.prompt_logprobs] == r.prompt_tokens[1:]
    text = r.prompt_tokens + r.tokens
    scored = tiny.generate(text, max_tokens=0, prompt_logprobs=2, add_special=False)
    assert scored.tokens == [] and scored.text == "" and scored.logprobs is None
    assert scored.prompt_logprobs is not None and len(scored.prompt_logprobs) == len(text) - 1
    assert scored.prompt_logprobs[:len(r.prompt_logprobs)] == r.prompt_logprobs
    for got, drawn in zip(scored.prompt_logprobs[len(r.prompt_tokens) - 1:], r.logprobs, strict=True):
        assert got.token == drawn.token
        assert got.logprob == pytest.approx(drawn.logprob, abs=1e-4)
        assert [t.token for t in got.top] == [t.token for t in drawn.top]
        assert all(len(e.top) == 2 and e.logprob <= 0.0 for e in (got, drawn))


def test_policies_and_calibration(tiny_path: str, tmp_path) -> None:
    # The speculation policy per call, and the cost model the adaptive ones decide with.
    with tandem.Engine.load(tiny_path, draft=tiny_path, threads=1) as e:
        cache = str(tmp_path / "costs.json")
        assert e.calibrate(k_max=2, cache_path=cache) is False
        assert e.calibrate(k_max=2, cache_path=cache) is True
        plain = e.generate(REPETITIVE, **greedy(24), draft="none")
        for policy in ("fixed", "confidence", "adaptive", "goodput"):
            r = e.generate(REPETITIVE, **greedy(24), policy=policy)
            assert r.tokens == plain.tokens, policy
        fixed = e.generate(REPETITIVE, **greedy(24), policy="fixed")
        hopeless = e.generate(REPETITIVE, **greedy(24), policy="adaptive", alpha_prior=0.01)
        assert hopeless.tokens == plain.tokens
        assert hopeless.speculative.drafted_tokens < fixed.speculative.drafted_tokens
        with pytest.raises(tandem.InvalidArgumentError, match="policy"):
            e.generate("x", max_tokens=2, policy="medusa")  # type: ignore[arg-type]
        with pytest.raises(tandem.InvalidArgumentError, match="alpha_prior"):
            e.generate("x", max_tokens=2, policy="goodput", alpha_prior=2.0)


@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_speculation_gives_the_plain_greedy_tokens(tiny_path: str, draft: str) -> None:
    # The model drafting for itself: a plumbing test of the draft-model path.
    with tandem.Engine.load(tiny_path, draft=tiny_path if draft == "model" else "ngram", threads=1) as e:
        plain = e.generate(REPETITIVE, **greedy(32), draft="none")
        spec = e.generate(REPETITIVE, **greedy(32), draft_max=4)
        assert spec.tokens == plain.tokens and spec.text == plain.text
        m = spec.speculative
        assert m.drafts > 0 and m.drafted_tokens > 0 and m.target_passes > 0
        assert m.acceptance_rate == pytest.approx(m.accepted_tokens / m.drafted_tokens)
        assert sum(m.drafted_per_position) == m.drafted_tokens and len(m.drafted_per_position) == 4
        if draft == "model":
            assert e.info.draft_path == tiny_path and m.draft_forwards > 0 and m.accepted_tokens > 0
            # Prompt lookup (on by default) drafts some steps on this repetitive prompt; off, none.
            assert 0 < m.lookup_steps <= m.drafts and m.lookup_accepted_tokens <= m.lookup_drafted_tokens
            assert m.lookup_drafted_tokens <= m.drafted_tokens
            off = e.generate(REPETITIVE, **greedy(32), draft_max=4, lookup=False)
            assert off.tokens == plain.tokens and off.speculative.lookup_steps == 0
            assert off.speculative.lookup_drafted_tokens == 0
        else:
            assert m.lookup_steps == 0  # the n-gram proposer is the draft itself, not a lookup ahead of one
        # Token trees: the same tokens, the steps counted.
        tree = e.generate(REPETITIVE, **greedy(32), draft_max=3, tree_width=3, tree_nodes=9, policy="fixed")
        assert tree.tokens == plain.tokens and tree.speculative.tree_steps > 0
        assert spec.speculative.tree_steps == 0
        with pytest.raises(tandem.InvalidArgumentError, match="tree_width"):
            e.generate("x", max_tokens=2, tree_width=0)


def test_reduced_draft_vocabulary(tiny: tandem.Engine, tiny_path: str, tmp_path) -> None:
    # FR-Spec through the package: the draft's head over its N first-ranked tokens, the
    # target's greedy tokens unchanged; ranked by token ids or by a counts file.
    plain = tiny.generate(REPETITIVE, **greedy(24))
    with tandem.Engine.load(tiny_path, draft=tiny_path, threads=1, draft_vocab=160) as e:
        assert e.info.draft_vocab == 160
        r = e.generate(REPETITIVE, **greedy(24), draft_max=4)
        assert r.tokens == plain.tokens and r.speculative.drafted_tokens > 0
    counts = tmp_path / "counts.txt"
    ranked = sorted(set(REPETITIVE) | set(plain.tokens))
    counts.write_text("tandem-token-counts 1 320\n" + "".join(f"{t} {1000 - i}\n" for i, t in enumerate(ranked)))
    with tandem.Engine.load(tiny_path, draft=tiny_path, threads=1, draft_vocab=len(ranked),
                            draft_vocab_counts=str(counts)) as e:
        assert e.info.draft_vocab == len(ranked)
        r = e.generate(REPETITIVE, **greedy(24), draft_max=4)
        # Every token the target picks is in the draft's vocabulary, so the self-draft agrees.
        assert r.tokens == plain.tokens and r.speculative.accepted_tokens > 0
    with pytest.raises(tandem.InvalidArgumentError, match="draft model"):
        tandem.Engine.load(tiny_path, threads=1, draft_vocab=64)
    counts.write_text("tandem-token-counts 1 999\n1 5\n")  # counts for another vocabulary
    with pytest.raises(tandem.TandemError, match="999"):
        tandem.Engine.load(tiny_path, draft=tiny_path, threads=1, draft_vocab=64, draft_vocab_counts=str(counts))


def test_weight_type_quantizes_the_target_at_load(tiny: tandem.Engine, tiny_path: str) -> None:
    # The tiny model's float matrices quantized to Q8_0 as they load: fewer bytes, the same
    # interface; "auto" is the drafts' choice, refused for a target.
    assert tiny.info.weight_type == "keep"
    with tandem.Engine.load(tiny_path, threads=1, weight_type="q8_0") as e:
        assert e.info.weight_type == "q8_0"
        assert e.info.weight_bytes < tiny.info.weight_bytes
        assert len(e.generate(REPETITIVE, **greedy(8)).tokens) == 8
    with pytest.raises(tandem.InvalidArgumentError, match="for drafts"):
        tandem.Engine.load(tiny_path, threads=1, weight_type="auto")  # type: ignore[arg-type]


def test_stream_matches_generate(tiny: tandem.Engine) -> None:
    ref = tiny.generate("Stream me", **greedy(20))
    s = tiny.stream("Stream me", **greedy(20))
    assert s.result is None
    pieces = list(s)
    assert "".join(pieces) == ref.text and all(pieces)
    assert s.finished and s.result is not None and s.result.tokens == ref.tokens
    assert s.tokens == ref.tokens
    # A stop string the text's end begins holds that end back until the generation ends, and
    # the library's last callback then only flushes it: no token is counted twice.
    assert len(ref.text) >= 2
    for extra in ({}, {"logprobs": 0}):
        held = tiny.stream("Stream me", **greedy(20), stop=[ref.text[-2:] + "\x01"], **extra)
        assert "".join(held) == ref.text
        assert held.tokens == ref.tokens
        assert held.logprobs is None or len(held.logprobs) == len(ref.tokens)


def test_breaking_out_of_the_loop_stops_the_generation(tiny: tandem.Engine) -> None:
    n = 0
    for _ in tiny.stream("Go on", max_tokens=100_000, temperature=0.0, ignore_eos=True):
        n += 1
        if n == 3:
            break
    # Leaving the loop dropped the stream, which cancelled and joined the generation.
    assert tiny._active == 0
    # The engine is free at once: a new generation does not wait behind the old one.
    t0 = time.monotonic()
    assert len(tiny.generate("x", **greedy(2)).tokens) == 2
    assert time.monotonic() - t0 < 10


def test_close_cancels_and_reports(tiny: tandem.Engine) -> None:
    with tiny.stream("Go on", max_tokens=100_000, temperature=0.0, ignore_eos=True) as s:
        first = next(s)
        assert first
    assert s.finished and s.result is not None
    assert s.result.finish_reason == "cancelled" and 1 <= len(s.result.tokens) < 1000
    with pytest.raises(StopIteration):
        next(s)


def test_fim_prompt_needs_a_code_model(tiny: tandem.Engine) -> None:
    # (The markers' prompt itself: tests/test_c_api.cpp with Qwen2.5-Coder.)
    with pytest.raises(tandem.InvalidArgumentError, match="fill-in-the-middle"):
        tiny.fim_prompt("def f(x):\n    return ", "\n")
    with pytest.raises(tandem.InvalidArgumentError, match="NUL"):
        tiny.fim_prompt("a\0", "b")


def test_chat_uses_the_model_template(tiny: tandem.Engine) -> None:
    conv = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert tiny.apply_chat_template(conv) == (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ids = tiny.chat_tokens(conv)
    assert ids == tiny.tokenize(tiny.apply_chat_template(conv), add_special=False, parse_special=True)
    r = tiny.chat(conv, **greedy(5))
    assert r.prompt_tokens == ids and len(r.tokens) == 5
    assert "".join(tiny.chat_stream(conv, **greedy(5))) == r.text
    with pytest.raises(TypeError):
        tiny.chat("hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="message 0"):
        tiny.chat([{"role": "user"}])


def test_closed_engine_refuses_calls_and_close_cancels_streams(tiny_path: str) -> None:
    e = tandem.Engine.load(tiny_path, threads=1)
    s = e.stream("Go on", max_tokens=100_000, temperature=0.0, ignore_eos=True)
    assert next(s)
    e.close()  # cancels the stream's generation and waits for it
    rest = list(s)
    assert s.result is not None and s.result.finish_reason == "cancelled"
    assert len(rest) < 1000
    with pytest.raises(tandem.InvalidArgumentError, match="closed"):
        e.generate("x")
    e.close()  # idempotent


def test_tune_reports_a_recommendation(tiny_path: str, tmp_path) -> None:
    cfg = tmp_path / "tuned.json"
    report = tandem.tune(tiny_path, "ngram", draft_max="1..2", temps=[0.0], policies=["fixed"], max_tokens=8,
                         threads=1, write_config=cfg, extra_args=["--no-calibrate"], timeout=300)
    assert isinstance(report, dict) and report
    assert cfg.exists() and cfg.stat().st_size > 0
    with pytest.raises(tandem.TandemError, match="tune failed"):
        tandem.tune(str(tmp_path / "missing.gguf"), timeout=60)


def test_constrained_output_follows_the_grammar_and_schema(tiny: tandem.Engine) -> None:
    r = tiny.generate("Is it?", grammar='root ::= "yes" | "no"', max_tokens=20, temperature=1.0, seed=3)
    assert r.text in ("yes", "no") and r.finish_reason == "stop"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    for draft in ("none", "ngram"):
        r = tiny.generate("JSON:", json_schema=schema, max_tokens=200, temperature=0.0, draft=draft)
        assert r.finish_reason == "stop"
        assert json.loads(r.text) in ({"ok": True}, {"ok": False})
    assert "root ::=" in tandem.json_schema_to_grammar(schema)
    with pytest.raises(tandem.InvalidArgumentError, match="not"):
        tandem.json_schema_to_grammar({"not": {"type": "string"}})
    with pytest.raises(tandem.InvalidArgumentError, match="1:"):
        tiny.generate("x", grammar="root ::= (", max_tokens=4)
    with pytest.raises(tandem.InvalidArgumentError, match="not both"):
        tiny.generate("x", grammar='root ::= "a"', json_schema={}, max_tokens=4)
