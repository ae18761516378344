#!/usr/bin/env python3
"""End-to-end tests of `tandem serve` with the official OpenAI client and raw HTTP.

Starts real servers on 127.0.0.1 (port 0: the server picks a free port and logs it) on
SmolLM2-135M and checks: the OpenAI surface (chat and completions, streaming or not,
usage, stop strings), every error case (malformed JSON, wrong types, missing fields,
unknown model, prompt too long, body too large, queue full, API key, shutting down),
client disconnects cancelling their sequence, the request timeout, greedy outputs that
do not depend on batching or speculation, a 32-stream load test, a KV budget so small
that sequences are preempted (and still finish with the same text), and graceful
shutdown on SIGTERM, and the inference gateway's metrics (queue, batch, KV utilization and
their vLLM aliases) scraped under more requests than --max-seqs.

    python3 tests/python/test_server.py --tandem build/release/apps/tandem [-k pattern]

Missing prerequisites follow the policy of the C++ model tests (tests/support/paths.hpp):
exit code 77 (ctest: skipped) when SmolLM2 is not in this run's model set
(TANDEM_TEST_MODELS), or when the model or the `openai` module is missing and
TANDEM_ALLOW_SKIP=1 accepts that deliberately; otherwise a missing one fails (exit 1).
"""
import argparse
import atexit
import concurrent.futures as cf
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from other_apis_cases import OtherApiCases
from structured_cases import SANITIZED, StructuredOutputCases

SKIP = 77
# Waits scale by this (scripts/test.sh sets it under the sanitizers, where everything runs
# several times slower). SANITIZED (TIME_SCALE > 1, structured_cases.py): the suite checks the
# memory safety of the server's own paths; the tests whose cost is the engine generating the
# same outputs many ways (identity across batching, speculation and seeds) run in the release
# run only, and their engine paths run under ASan in the C++ tests each names.
TIME_SCALE = float(os.environ.get("TANDEM_TEST_TIME_SCALE") or 1)


def release_only(covered_by):
    return unittest.skipIf(SANITIZED, f"release run only; under the sanitizers: {covered_by}")


MODEL_KEY = "smollm2"  # in scripts/models.json
MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "models.json")
with open(MANIFEST) as f:
    MODEL_FILE = json.load(f)["models"][MODEL_KEY]["file"]
API_KEY = "test-key"

try:
    import openai
except ImportError:  # reported by main()
    openai = None

ARGS = None  # parsed command line


def model_path():
    root = os.environ.get("TANDEM_MODELS") or os.path.expanduser("~/.cache/tandem/models")
    return os.path.join(root, MODEL_FILE)


def missing_prerequisite():
    """None when the tests can run, else (exit code, message) as tests/support/paths.hpp decides."""
    allow_skip = os.environ.get("TANDEM_ALLOW_SKIP") == "1"
    model_set = os.environ.get("TANDEM_TEST_MODELS") or "all"
    with open(MANIFEST) as f:
        known = list(json.load(f)["models"])
    keys = [k.strip() for k in model_set.split(",") if k.strip()] if model_set not in ("all", "none") else []
    unknown = [k for k in keys if k not in known]
    if unknown:
        return 1, (f"FAILED: TANDEM_TEST_MODELS={model_set} names an unknown model '{unknown[0]}' "
                   f"(known: {', '.join(known)}, or all, none)")
    if model_set != "all" and MODEL_KEY not in keys:
        return SKIP, f"SKIPPED: model '{MODEL_KEY}' is not in this run's model set (TANDEM_TEST_MODELS={model_set})"
    if not os.path.exists(model_path()):
        fetch = f"python3 scripts/fetch_models.py --models {MODEL_KEY}"
        if allow_skip:
            return SKIP, (f"SKIPPED: model '{MODEL_KEY}' not downloaded ({model_path()}); skipped because "
                          f"TANDEM_ALLOW_SKIP=1. To test it: {fetch}")
        return 1, (f"FAILED: model '{MODEL_KEY}' not downloaded ({model_path()}). Run: {fetch} — or set "
                   f"TANDEM_ALLOW_SKIP=1 to skip the tests of missing models deliberately, or leave "
                   f"'{MODEL_KEY}' out of TANDEM_TEST_MODELS (now {model_set})")
    try:
        import anthropic  # noqa: F401  (other_apis_cases drives /v1/messages with it)
    except ImportError:
        if allow_skip:
            return SKIP, "SKIPPED: the Python module 'anthropic' is not installed; TANDEM_ALLOW_SKIP=1"
        return 1, ("FAILED: the Python module 'anthropic' is not installed: run scripts/setup.sh (or pip install "
                   "anthropic), or set TANDEM_ALLOW_SKIP=1 to skip this test deliberately")
    if openai is None:
        # scripts/setup.sh installs it; a run without it tests nothing of the server.
        if allow_skip:
            return SKIP, "SKIPPED: the Python module 'openai' is not installed (pip install openai); TANDEM_ALLOW_SKIP=1"
        return 1, ("FAILED: the Python module 'openai' is not installed: run scripts/setup.sh (or pip install "
                   "openai), or set TANDEM_ALLOW_SKIP=1 to skip this test deliberately")
    return None


# ---- a server process ---------------------------------------------------------------


class Server:
    """`tandem serve` on a free loopback port; its log goes to a temporary file."""

    def __init__(self, name, *extra):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"tandem-{name}-", suffix=".log", delete=False)
        cmd = [ARGS.tandem, "serve", "-m", model_path(), "--host", "127.0.0.1", "--port", "0",
               "--threads", str(ARGS.threads), "--model-id", "smollm2", *extra]
        # A private cache: the servers that load a draft calibrate their cost model afresh.
        env = dict(os.environ, TANDEM_CACHE=CACHE_DIR)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = None
        deadline = time.time() + 120 * TIME_SCALE
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {name} exited with {self.proc.returncode}:\n{self.text()}")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.1)
        if self.port is None:
            self.kill()
            raise RuntimeError(f"server {name} did not start:\n{self.text()}")
        self.base = f"http://127.0.0.1:{self.port}"

    def text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def client(self, **kw):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=kw.pop("api_key", API_KEY), max_retries=0,
                             timeout=kw.pop("timeout", 120) * TIME_SCALE, **kw)

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout * TIME_SCALE)

    def request(self, method, path, body=None, headers=None, auth=True):
        """One raw request on a fresh connection: (status, headers, parsed JSON or text)."""
        h = {"Content-Type": "application/json"}
        if auth:
            h["Authorization"] = f"Bearer {API_KEY}"
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read().decode("utf-8", errors="replace")
            try:
                data = json.loads(data)
            except ValueError:
                pass
            return r.status, dict(r.getheaders()), data
        finally:
            c.close()

    def metrics(self):
        status, _, text = self.request("GET", "/metrics", auth=False)
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_metric(self, name, predicate, timeout=20):
        deadline = time.time() + timeout * TIME_SCALE
        while True:
            v = self.metrics().get(name, 0.0)
            if predicate(v) or time.time() > deadline:
                return v
            time.sleep(0.1)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout * TIME_SCALE)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def finish(self, sig=signal.SIGTERM):
        """Stops the server; prints its log if it did not exit cleanly; removes the log."""
        rc = self.stop(sig)
        if rc != 0:
            print(f"--- server {self.name} exited with {rc}; its log:\n{self.text()}", file=sys.stderr)
        os.unlink(self.log.name)
        return rc


def sse_events(resp_lines):
    """Yields the data of each SSE event from an iterator of raw lines."""
    for raw in resp_lines:
        line = raw.decode() if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if line.startswith("data: "):
            yield line[6:]


def raw_stream(server, path, body):
    """POSTs a streaming request; returns (status, list of event payloads)."""
    c = server.conn(timeout=120)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, [r.read().decode()]
        return 200, list(sse_events(iter(r.readline, b"")))
    finally:
        c.close()


PROMPTS = [
    "The capital of France is",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "Once upon a time, there was a little",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Water boils at a temperature of",
    "My favourite colours are red, green and",
    "Monday, Tuesday, Wednesday,",
    "The quick brown fox jumps over the lazy dog. The quick brown",
    "In 1969, the first humans landed on",
    "A B C D E F G H",
    "The largest planet in the solar system is",
    "Roses are red, violets are blue,",
    "import numpy as np\nimport",
    "To make a cup of tea, first",
    "The opposite of hot is",
]


CACHE_DIR = tempfile.mkdtemp(prefix="tandem-server-test-cache-")
atexit.register(shutil.rmtree, CACHE_DIR, True)
# TANDEM_TEST_CACHE_SEED: a cache folder to start from, e.g. one where a release build has
# calibrated the cost model for these models, so a sanitized server need not (the key is the
# model files and the backend, not the build; calibrating under TSan takes over 8 minutes).
if os.environ.get("TANDEM_TEST_CACHE_SEED"):
    shutil.copytree(os.environ["TANDEM_TEST_CACHE_SEED"], CACHE_DIR, dirs_exist_ok=True)


def run_tandem(args, timeout):
    """`tandem ARGS...` run to its end with this run's private cost cache, output captured."""
    return subprocess.run([ARGS.tandem, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, TANDEM_CACHE=CACHE_DIR))


def complete(client, prompt, max_tokens, mode=None, **kw):
    extra = dict(kw.pop("extra_body", {}))
    if mode:
        extra["speculative"] = {"mode": mode}
    r = client.completions.create(model="smollm2", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                  extra_body=extra or None, **kw)
    return r


class Timed(unittest.TestCase):
    """Prints how long each test took (the suite must stay within a few minutes)."""

    def setUp(self):
        self._t0 = time.time()

    def tearDown(self):
        print(f"  [{time.time() - self._t0:.1f} s] ", end="", file=sys.stderr, flush=True)


# ---- server A: the main one (API key, ngram and self-draft speculation) -----------------


class MainServer(StructuredOutputCases, OtherApiCases, Timed):
    server = None
    API_KEY = API_KEY

    @classmethod
    def setUpClass(cls):
        cls.server = Server("main", "--api-key", API_KEY, "--ctx", "2048", "--max-seqs", "16", "--policy", "fixed",
                            "--model-draft", model_path(), "--draft", "none", "--draft-max", "4")
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.finish()
        assert rc == 0, f"server exited with {rc}"

    # -- the surface --
    def test_models_and_health(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["smollm2"])
        self.assertEqual(self.client.models.retrieve("smollm2").id, "smollm2")
        self.assertEqual(self.client.models.retrieve(MODEL_FILE).id, "smollm2")  # the file name is an alias
        status, _, body = self.server.request("GET", "/health", auth=False)
        self.assertEqual((status, body), (200, {"status": "ok"}))

    def test_chat(self):
        r = self.client.chat.completions.create(
            model="smollm2", max_tokens=12, temperature=0,
            messages=[{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Name a colour."},
                      {"role": "assistant", "content": "Blue."},
                      {"role": "user", "content": "Another one?"}])
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, "smollm2")
        self.assertEqual(len(r.choices), 1)
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertGreater(len(c.message.content), 0)
        self.assertGreater(r.usage.prompt_tokens, 10)
        self.assertLessEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat_stream_matches_non_stream(self):
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        full = self.client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=16, temperature=0)
        chunks = list(self.client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=16,
                                                          temperature=0, stream=True,
                                                          stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, full.choices[0].message.content)
        finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finals), 1)
        self.assertEqual(finals[0].choices[0].finish_reason, full.choices[0].finish_reason)
        self.assertEqual(chunks[-1].choices, [])  # the usage chunk
        self.assertEqual(chunks[-1].usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(chunks[-1].usage.prompt_tokens, full.usage.prompt_tokens)
        self.assertEqual(len({c.id for c in chunks}), 1)

    def test_completion_stream_and_stop(self):
        r = complete(self.client, "The capital of France is", 8)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id.startswith("cmpl-"))
        text = r.choices[0].text
        parts = list(self.client.completions.create(model="smollm2", prompt="The capital of France is",
                                                    max_tokens=8, temperature=0, stream=True))
        self.assertEqual("".join(p.choices[0].text for p in parts if p.choices), text)
        # A stop string cuts the text before it and finishes with "stop".
        cut = text.find(".")
        if cut > 0:
            s = complete(self.client, "The capital of France is", 8, stop=["."])
            self.assertEqual(s.choices[0].text, text[:cut])
            self.assertEqual(s.choices[0].finish_reason, "stop")
        # Prompt as a list of one string, and as token ids.
        self.assertEqual(complete(self.client, ["The capital of France is"], 8).choices[0].text, text)
        ids = complete(self.client, [504, 3575, 282, 4649, 314], 4)  # some token ids
        self.assertEqual(ids.usage.prompt_tokens, 5)

    def test_seeded_sampling_is_reproducible(self):
        kw = dict(model="smollm2", prompt="Once upon a time", max_tokens=12, temperature=0.9, top_p=0.95,
                  seed=1234, extra_body={"top_k": 40, "min_p": 0.05})
        a = self.client.completions.create(**kw).choices[0].text
        b = self.client.completions.create(**kw).choices[0].text
        self.assertEqual(a, b)
        r = self.client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=6,
                                           presence_penalty=1.0, frequency_penalty=0.5, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 6)

    def test_unseeded_requests_draw_fresh_seeds_and_report_them(self):
        """No seed: each request (and each of its n choices) draws its own, reported as "seed"; sent back, it
        reproduces the choices; a given seed is reported as given."""
        # Temperature 1.8: flat enough that two independent draws of 24 tokens (8 under the
        # sanitizers, where the requests are what is checked) never agree.
        body = {"model": "smollm2", "prompt": "Some words:", "max_tokens": 8 if SANITIZED else 24, "temperature": 1.8,
                "top_p": 1.0, "n": 2}

        def complete(extra=None, stream=False):
            status, _, data = self.server.request("POST", "/v1/completions", {**body, **(extra or {}),
                                                                               "stream": stream})
            self.assertEqual(status, 200, data)
            if not stream:
                return data["seed"], [c["text"] for c in sorted(data["choices"], key=lambda c: c["index"])]
            chunks = [json.loads(line[6:]) for line in data.splitlines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
            texts = ["", ""]
            for c in chunks:
                for ch in c["choices"]:
                    texts[ch["index"]] += ch["text"]
            seeds = {c["seed"] for c in chunks}
            self.assertEqual(len(seeds), 1, "every chunk carries the one seed")
            return seeds.pop(), texts

        seed_a, a = complete()
        seed_b, b = complete()
        self.assertNotEqual(seed_a, seed_b)
        self.assertNotEqual(a, b, "two unseeded requests at temperature 1.8 gave the same texts")
        self.assertNotEqual(a[0], a[1], "the choices of one request share their draws")
        self.assertEqual(complete({"seed": seed_a}), (seed_a, a))
        self.assertEqual(complete({"seed": seed_a, "speculative": {"mode": "model"}}), (seed_a, a))
        seed_s, s = complete(stream=True)
        self.assertEqual(complete({"seed": seed_s}), (seed_s, s))
        self.assertEqual(complete({"seed": 7})[0], 7)

    @release_only("Speculative.UnseededRequestsDrawFreshSeedsAndReportThem (test_speculative)")
    def test_cli_generate_draws_fresh_seeds_and_reports_them(self):
        """`tandem generate` without --seed: a fresh seed each run, printed ("seed" with --json, [seed] on stderr);
        --seed with it gives the same text."""
        def generate(*extra, json_out=True):
            out = run_tandem(["generate", "-m", model_path(), "--temp", "1.8", "--top-k", "0",
                                  "--top-p", "1", "--min-p", "0", "-n", "24", "--threads", str(ARGS.threads),
                                  *(["--json"] if json_out else []), "-p", "Some words:", *extra],
                                 timeout=300 * TIME_SCALE)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out

        a = json.loads(generate().stdout)
        b = json.loads(generate().stdout)
        self.assertNotEqual(a["seed"], b["seed"])
        self.assertNotEqual(a["tokens"], b["tokens"], "two unseeded runs at temperature 1.8 gave the same 24 tokens")
        self.assertEqual(json.loads(generate("--seed", str(a["seed"])).stdout)["tokens"], a["tokens"])
        plain = generate(json_out=False)
        m = re.search(r"\[seed\] (\d+)", plain.stderr)
        self.assertIsNotNone(m, plain.stderr)
        again = generate("--seed", m.group(1), json_out=False)
        self.assertEqual(again.stdout, plain.stdout)

    @release_only("Logprobs.MatchTheTargetsLogitsAndDoNotDependOnSpeculation (test_logprobs)")
    def test_cli_generate_lists_logprobs(self):
        """`tandem generate --logprobs N --json`: one entry a generated token, its own logprob and the N
        most likely (greedy: the token first), the same with n-gram drafts; without --json it is refused."""
        def generate(*extra):
            out = run_tandem(["generate", "-m", model_path(), "--temp", "0", "-n", "16",
                                  "--threads", str(ARGS.threads), "--json", "--logprobs", "3", "-p", "One, two, three,",
                                  *extra], timeout=300 * TIME_SCALE)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)

        plain = generate("--draft", "none")
        self.assertEqual(len(plain["logprobs"]), len(plain["tokens"]))
        for tok, lp in zip(plain["tokens"], plain["logprobs"]):
            self.assertEqual(lp["token"], tok)
            self.assertEqual(len(lp["top"]), 3)
            self.assertEqual(lp["top"][0], [tok, lp["logprob"]])
            self.assertLessEqual(lp["logprob"], 0.0)
            self.assertGreaterEqual(lp["top"][1][1], lp["top"][2][1])
        spec = generate("--draft", "ngram")
        self.assertEqual((spec["tokens"], spec["logprobs"]), (plain["tokens"], plain["logprobs"]))
        bare = run_tandem(["generate", "-m", model_path(), "-n", "2", "--logprobs", "3", "-p", "x"],
                              timeout=60 * TIME_SCALE)
        self.assertNotEqual(bare.returncode, 0)
        self.assertIn("--json", bare.stderr)

    # -- errors --
    def test_client_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "x"}],
                                                temperature=5)
        with self.assertRaises(openai.BadRequestError):  # above --max-seqs (16)
            self.client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "x"}], n=17)
        with self.assertRaises(openai.AuthenticationError):
            self.server.client(api_key="wrong").models.list()

    def test_tokenize_and_detokenize_as_vllm_and_llama_server_have_them(self):
        """/tokenize counts what a completion or chat request reads (vLLM's {"prompt"} and {"messages"},
        llama-server's {"content", "with_pieces"}); /detokenize gives the text back; bad input is a 400 in
        the API's error shape."""
        text = "The quick brown fox jumps over the lazy dog. Ünïcödé and   spaces\tand tabs."
        status, _, t = self.server.request("POST", "/tokenize", {"model": "smollm2", "prompt": text})
        self.assertEqual(status, 200, t)
        self.assertEqual(t["count"], len(t["tokens"]))
        self.assertEqual(t["max_model_len"], 2048)
        r = self.client.completions.create(model="smollm2", prompt=text, max_tokens=1, temperature=0)
        self.assertEqual(t["count"], r.usage.prompt_tokens, "the tokens a completion reads")
        status, _, d = self.server.request("POST", "/detokenize", {"model": "smollm2", "tokens": t["tokens"]})
        self.assertEqual(status, 200, d)
        self.assertEqual(d["prompt"], d["content"])
        self.assertTrue(d["prompt"].endswith(text), d["prompt"])
        # llama-server's form: no special tokens by default, pieces on request, joined they are the text.
        ascii_text = "def add(a, b):\n    return a + b  # plain ASCII: each piece is whole characters"
        status, _, p = self.server.request("POST", "/tokenize", {"content": ascii_text, "with_pieces": True})
        self.assertEqual(status, 200, p)
        self.assertEqual("".join(x["piece"] for x in p["tokens"]), ascii_text)
        self.assertEqual([x["id"] for x in p["tokens"]], self.server.request(
            "POST", "/tokenize", {"content": ascii_text})[2]["tokens"])
        # Chat messages through the template, as the chat endpoint reads them.
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
        status, _, c = self.server.request("POST", "/tokenize", {"model": "smollm2", "messages": msgs})
        self.assertEqual(status, 200, c)
        chat = self.client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=1, temperature=0)
        self.assertEqual(c["count"], chat.usage.prompt_tokens)
        for path, body, param in (("/tokenize", "{not json", ""), ("/tokenize", {"prompt": 5}, "prompt"),
                                  ("/tokenize", {"model": "smollm2"}, "prompt"),
                                  ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
                                  ("/detokenize", {"tokens": [1, 10 ** 9]}, "tokens"),
                                  ("/detokenize", {"tokens": "1 2"}, "tokens"), ("/detokenize", {}, "tokens")):
            status, _, e = self.server.request("POST", path, body)
            self.assertEqual(status, 400, (path, body, e))
            self.assertEqual(e["error"]["type"], "invalid_request_error", e)
            if param:
                self.assertEqual(e["error"]["param"], param, e)
        status, _, _ = self.server.request("GET", "/tokenize")
        self.assertEqual(status, 405)
        status, _, _ = self.server.request("POST", "/tokenize", {"prompt": "x"}, auth=False)
        self.assertEqual(status, 401)

    def test_raw_errors(self):
        chat = "/v1/chat/completions"
        msgs = [{"role": "user", "content": "x"}]
        cases = [
            ("malformed JSON", chat, '{"messages": [', 400, "invalid_json"),
            ("not an object", chat, "[1, 2]", 400, "invalid_json"),
            ("missing messages", chat, {"model": "smollm2"}, 400, "missing_required_parameter"),
            ("messages wrong type", chat, {"messages": "hi"}, 400, "invalid_type"),
            ("max_tokens wrong type", chat, {"messages": msgs, "max_tokens": "5"}, 400, "invalid_type"),
            ("temperature wrong type", chat, {"messages": msgs, "temperature": "hot"}, 400, "invalid_type"),
            ("stream wrong type", chat, {"messages": msgs, "stream": "yes"}, 400, "invalid_type"),
            ("stop wrong type", chat, {"messages": msgs, "stop": 5}, 400, "invalid_type"),
            ("role missing", chat, {"messages": [{"content": "x"}]}, 400, "missing_required_parameter"),
            ("unknown model", chat, {"model": "nope", "messages": msgs}, 404, "model_not_found"),
            ("n above the limit", chat, {"messages": msgs, "n": 17}, 400, "invalid_value"),
            ("top_logprobs without logprobs", chat, {"messages": msgs, "top_logprobs": 2}, 400, "invalid_value"),
            ("top_logprobs above 20", chat, {"messages": msgs, "logprobs": True, "top_logprobs": 21}, 400,
             "invalid_value"),
            ("best_of streamed", "/v1/completions", {"prompt": "x", "best_of": 2, "stream": True}, 400,
             "invalid_value"),
            ("response_format unknown", chat, {"messages": msgs, "response_format": {"type": "xml"}}, 400,
             "unsupported_value"),
            ("schema keyword no grammar expresses", chat, {"messages": msgs, "response_format": {
                "type": "json_schema", "json_schema": {"schema": {"type": "string", "not": {"const": "a"}}}}}, 400,
             "unsupported_value"),
            ("tools on completions", "/v1/completions", {"prompt": "x", "tools": [
                {"type": "function", "function": {"name": "f"}}]}, 400, "unsupported_value"),
            ("legacy functions", chat, {"messages": msgs, "functions": [{"name": "f"}]}, 400, "unsupported_value"),
            ("tool_choice without tools", chat, {"messages": msgs, "tool_choice": "required"}, 400, None),
            ("bad speculative mode", chat, {"messages": msgs, "speculative": {"mode": "x"}}, 400, "invalid_value"),
            ("missing prompt", "/v1/completions", {"max_tokens": 3}, 400, "missing_required_parameter"),
            ("prompt too long", "/v1/completions", {"prompt": "hello " * 2100}, 400, "context_length_exceeded"),
            ("token id out of range", "/v1/completions", {"prompt": [10**7]}, 400, "invalid_value"),
        ]
        for what, path, body, status, code in cases:
            with self.subTest(what):
                s, h, b = self.server.request("POST", path, body)
                self.assertEqual(s, status, b)
                self.assertEqual(h.get("Content-Type"), "application/json")
                self.assertEqual(set(b["error"]), {"message", "type", "param", "code"})
                self.assertEqual(b["error"]["code"], code)
                self.assertTrue(b["error"]["message"])
        s, _, b = self.server.request("GET", "/v1/models", auth=False)
        self.assertEqual((s, b["error"]["code"]), (401, "invalid_api_key"))
        s, h, b = self.server.request("GET", chat)
        self.assertEqual((s, h.get("Allow")), (405, "POST"))
        s, _, b = self.server.request("GET", "/nowhere")
        self.assertEqual((s, b["error"]["code"]), (404, "not_found"))
        # After all that the server still serves.
        self.assertEqual(self.server.request("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0], 200)

    def test_malformed_http_gets_400_and_connection_survives_for_others(self):
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=30) as s:
            s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
            data = s.recv(4096)
        self.assertTrue(data.startswith(b"HTTP/1.1 400"), data)
        self.assertEqual(self.server.request("GET", "/health", auth=False)[0], 200)

    def test_keep_alive_and_pipelining(self):
        body = json.dumps({"prompt": "Hi", "max_tokens": 2, "temperature": 0}).encode()
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
               b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=60) as s:
            s.sendall(req + req)  # two requests back to back on one connection
            data = b""
            deadline = time.time() + 60
            while data.count(b"HTTP/1.1 200") < 2 and time.time() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        self.assertEqual(data.count(b"HTTP/1.1 200"), 2, data)

    # -- cancellation --
    def test_client_disconnect_cancels(self):
        before = self.server.metrics()
        # Three choices: the disconnect cancels every one of them.
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "stream": True, "n": 3,
                           "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        data = b""
        while b"data: " not in data:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "stream ended before the first chunk")
            data += chunk
        s.close()
        key = "tandem_requests_cancelled_total"
        v = self.server.wait_metric(key, lambda v: v >= before.get(key, 0) + 3)
        self.assertEqual(v, before.get(key, 0) + 3)
        after = self.server.metrics()
        self.assertGreater(after["tandem_http_client_disconnects_total"],
                           before["tandem_http_client_disconnects_total"])
        self.assertEqual(self.server.wait_metric("tandem_running_sequences", lambda v: v == 0), 0)
        # Far fewer than 400 tokens were generated before the cancel took effect.
        self.assertLess(after["tandem_generation_tokens_total"] - before["tandem_generation_tokens_total"], 300)
        self.assertEqual(self.server.request("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0], 200)

    # -- concurrency --
    def test_concurrent_clients(self):
        def one(i):
            c = self.client
            if i % 4 == 0:
                return c.chat.completions.create(model="smollm2", max_tokens=8,
                                                 messages=[{"role": "user", "content": f"Count to {i}"}]
                                                 ).choices[0].finish_reason
            if i % 4 == 1:
                parts = list(c.chat.completions.create(model="smollm2", max_tokens=8, stream=True,
                                                       messages=[{"role": "user", "content": f"Say {i}"}]))
                return [p for p in parts if p.choices and p.choices[0].finish_reason][0].choices[0].finish_reason
            if i % 4 == 2:
                return c.completions.create(model="smollm2", prompt=PROMPTS[i], max_tokens=8).choices[0].finish_reason
            parts = list(c.completions.create(model="smollm2", prompt=PROMPTS[i], max_tokens=8, stream=True))
            return [p for p in parts if p.choices[0].finish_reason][0].choices[0].finish_reason

        with cf.ThreadPoolExecutor(8) as ex:
            reasons = list(ex.map(one, range(16)))
        self.assertTrue(all(r in ("stop", "length") for r in reasons), reasons)

    @release_only("Scheduler.GreedyOutputDoesNotDependOnBatching")
    def test_greedy_same_alone_and_batched(self):
        """Batching and speculation never change greedy output."""
        n = 10
        solo = [complete(self.client, p, n, "none").choices[0].text for p in PROMPTS]
        # Speculation alone must not change it either (checked on a few, to save time).
        self.assertEqual([complete(self.client, p, n, "ngram").choices[0].text for p in PROMPTS[:4]], solo[:4])
        for mode in ("none", "ngram"):
            with cf.ThreadPoolExecutor(16) as ex:
                batched = list(ex.map(lambda p: complete(self.client, p, n, mode).choices[0].text, PROMPTS))
            for p, a, b in zip(PROMPTS, solo, batched):
                self.assertEqual(a, b, f"{mode}: prompt {p!r} alone vs in a batch of 16")
        m = self.server.metrics()
        self.assertGreater(m["tandem_spec_drafts_total"], 0)
        self.assertIn('tandem_spec_accepted_per_position_total{position="0"}', m)
        # The draft-model proposer (SmolLM2 drafting for itself) in a small batch.
        subset = PROMPTS[:4]
        with cf.ThreadPoolExecutor(4) as ex:
            model = list(ex.map(lambda p: complete(self.client, p, n, "model").choices[0].text, subset))
        self.assertEqual(model, solo[:4])

    @release_only("test_coupled.cpp")
    def test_coupled_sampling_same_seed_same_text_whatever_speculation_and_batch(self):
        """verify=coupled: a seed gives one text, with or without speculation, any k or policy, alone or in a batch."""
        n = 12

        def sampled(prompt, seed, spec):
            r = self.client.completions.create(
                model="smollm2", prompt=prompt, max_tokens=n, temperature=0.9, top_p=0.95, seed=seed,
                extra_body={"speculative": dict(spec, verify="coupled")})
            return r.choices[0].text

        plain = {(p, s): sampled(p, s, {"mode": "none"}) for p in PROMPTS[:3] for s in (1, 2)}
        self.assertGreater(len(set(plain.values())), 3, "seeds should give different texts")
        specs = [{"mode": "ngram", "draft_max": 8}, {"mode": "model", "draft_max": 3},
                 {"mode": "ngram", "draft_max": 4, "policy": "adaptive"}]
        for spec in specs:
            for (p, s), text in plain.items():
                self.assertEqual(sampled(p, s, spec), text, f"{spec} prompt {p!r} seed {s}")
        # A batch of 16: the same requests at once, proposers and k mixed.
        jobs = [(p, s, specs[i % len(specs)]) for i, (p, s) in enumerate(list(plain) * 2)]
        with cf.ThreadPoolExecutor(16) as ex:
            batched = list(ex.map(lambda j: sampled(*j), jobs))
        for (p, s, spec), text in zip(jobs, batched):
            self.assertEqual(text, plain[(p, s)], f"batched {spec} prompt {p!r} seed {s}")

    # -- logprobs and n > 1 (identical with speculation off, n-gram and the draft model) --
    MODES = ("none", "ngram", "model")

    @staticmethod
    def chat_logprobs(lp):
        """A choice's logprobs as plain values: [(token, logprob, bytes, [(token, logprob), ...])]."""
        return [(t.token, t.logprob, tuple(t.bytes), tuple((a.token, a.logprob) for a in t.top_logprobs))
                for t in lp.content]

    @release_only("test_logprobs.cpp")
    def test_chat_logprobs_streamed_and_not_identical_across_speculation(self):
        msgs = [{"role": "user", "content": "Count from one to ten."}]
        for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": 3}):
            seen = {}
            for mode in self.MODES:
                kw = dict(model="smollm2", messages=msgs, max_tokens=6, logprobs=True, top_logprobs=3,
                          extra_body={"speculative": {"mode": mode, "verify": "coupled"}}, **sampling)
                full = self.client.chat.completions.create(**kw)
                lps = self.chat_logprobs(full.choices[0].logprobs)
                # An end-of-turn token counts in usage but has no entry (its text is not content).
                self.assertEqual(len(lps) + (full.choices[0].finish_reason == "stop"), full.usage.completion_tokens)
                for token, logprob, raw, top in lps:
                    self.assertLessEqual(logprob, 0.0)
                    self.assertEqual(len(top), 3)
                    self.assertEqual(list(top), sorted(top, key=lambda a: -a[1]))
                    self.assertEqual(bytes(raw).decode("utf-8", "replace"), token)
                    if sampling["temperature"] == 0:
                        self.assertEqual(top[0][0], token, "greedy takes the most likely token")
                if full.choices[0].finish_reason == "length":  # (an end-of-turn token has no text)
                    self.assertEqual("".join(t[0] for t in lps), full.choices[0].message.content)
                chunks = list(self.client.chat.completions.create(stream=True, **kw))
                streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                            for e in self.chat_logprobs(c.choices[0].logprobs)]
                self.assertEqual(streamed, lps, f"{mode}: streamed logprobs")
                seen[mode] = (full.choices[0].message.content, lps)
            self.assertEqual(seen["ngram"], seen["none"], f"{sampling}: n-gram vs none")
            self.assertEqual(seen["model"], seen["none"], f"{sampling}: draft model vs none")
        m = self.server.metrics()
        self.assertGreater(m["tandem_spec_accepted_tokens_total"], 0)

    def test_completion_logprobs_shape(self):
        prompt = "The days of the week are Monday, Tuesday,"
        for mode in self.MODES:
            r = self.client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, temperature=0, logprobs=2,
                                               extra_body={"speculative": {"mode": mode}})
            lp = r.choices[0].logprobs
            if mode == "none":
                first = lp
            self.assertEqual(len(lp.tokens) + (r.choices[0].finish_reason == "stop"), r.usage.completion_tokens)
            self.assertEqual("".join(lp.tokens), r.choices[0].text)
            self.assertEqual(len(lp.token_logprobs), len(lp.tokens))
            self.assertEqual(lp.text_offset, [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))])
            for tok, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
                self.assertLessEqual(len(top), 3)  # two alternatives, and the chosen one
                self.assertEqual(top[tok], logprob)
                self.assertEqual(max(top.values()), logprob)  # greedy
            self.assertEqual((lp.tokens, lp.token_logprobs, lp.top_logprobs), (first.tokens, first.token_logprobs,
                                                                               first.top_logprobs), mode)
            chunks = list(self.client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, temperature=0,
                                                         logprobs=2, stream=True,
                                                         extra_body={"speculative": {"mode": mode}}))
            streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
            offsets = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
            self.assertEqual((streamed, offsets), (lp.tokens, lp.text_offset))
        # Without logprobs: null.
        self.assertIsNone(complete(self.client, prompt, 2).choices[0].logprobs)

    def test_completion_echo_scores_the_prompt(self):
        """`echo` (what lm-evaluation-harness's loglikelihood sends): the text starts with the prompt,
        and with logprobs the prompt's tokens come first, the first with none. Each prompt token's
        logprob is the target's given the tokens before it: a greedy output read back as a prompt
        gets exactly the logprobs it was generated with (`tandem generate --json --logprobs`), its
        read rows being its decoded ones bit for bit. max_tokens 0 only scores; a prompt already in
        the prefix cache is scored all the same; the first prompt token's entry is null."""
        gen = run_tandem(["generate", "-m", model_path(), "--temp", "0", "-n", "8", "--threads",
                              str(ARGS.threads), "--json", "--logprobs", "3", "--draft", "none", "-p",
                              "The capital of France is"], timeout=300 * TIME_SCALE)
        self.assertEqual(gen.returncode, 0, gen.stderr)
        g = json.loads(gen.stdout)
        ids = g["prompt_tokens"] + g["tokens"]
        n_p = len(g["prompt_tokens"])
        # (Under the sanitizers one speculation mode: the scoring is the engine's, the same in each.)
        for mode in self.MODES[-1:] if SANITIZED else self.MODES:
            for max_tokens in (0, 2):
                r = self.client.completions.create(model="smollm2", prompt=ids, max_tokens=max_tokens, temperature=0,
                                                   logprobs=3, echo=True, extra_body={"speculative": {"mode": mode}})
                c = r.choices[0]
                lp = c.logprobs
                self.assertEqual(r.usage.prompt_tokens, len(ids))
                self.assertEqual(r.usage.completion_tokens, max_tokens)
                self.assertEqual(len(lp.tokens), len(ids) + max_tokens)
                self.assertEqual("".join(lp.tokens), c.text)
                self.assertTrue(c.text.startswith("The capital of France is" + g["text"]), c.text)
                self.assertEqual(lp.text_offset, [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))])
                self.assertIsNone(lp.token_logprobs[0])
                self.assertIsNone(lp.top_logprobs[0])
                for i, want in enumerate(g["logprobs"]):
                    self.assertEqual(lp.token_logprobs[n_p + i], want["logprob"], f"{mode} token {i}")
                    self.assertEqual(sorted(lp.top_logprobs[n_p + i].values(), reverse=True),
                                     [v for _, v in want["top"]], f"{mode} token {i}")
                for v, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
                    self.assertLessEqual(v, 0.0)
                    self.assertIn(v, top.values())
                    self.assertLessEqual(len(top), 4)
        # Without logprobs: the text, streamed or not.
        r = self.client.completions.create(model="smollm2", prompt="One, two,", max_tokens=3, temperature=0, echo=True)
        self.assertTrue(r.choices[0].text.startswith("One, two,"), r.choices[0].text)
        self.assertIsNone(r.choices[0].logprobs)
        chunks = list(self.client.completions.create(model="smollm2", prompt="One, two,", max_tokens=3, temperature=0,
                                                     echo=True, stream=True))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), r.choices[0].text)
        # With logprobs, streamed: the prompt and its logprobs in the first chunk, then the tokens';
        # together they are the response's (n = 2: each choice echoes its prompt once).
        for max_tokens in (0, 3):
            kw = dict(model="smollm2", prompt="One, two,", max_tokens=max_tokens, temperature=0, echo=True,
                      logprobs=2)
            whole = self.client.completions.create(**kw).choices[0]
            got = {0: [], 1: []}
            for ch in self.client.completions.create(stream=True, n=2, **kw):
                for c in ch.choices:
                    if c.logprobs is not None or c.text:
                        got[c.index].append(c)
            for index, parts in got.items():
                self.assertTrue(parts[0].text.startswith("One, two,") and parts[0].logprobs.token_logprobs[0] is None,
                                f"choice {index}: {parts[0]}")
                self.assertEqual("".join(c.text for c in parts), whole.text)
                self.assertEqual([t for c in parts for t in c.logprobs.tokens], whole.logprobs.tokens)
                self.assertEqual([v for c in parts for v in c.logprobs.token_logprobs], whole.logprobs.token_logprobs)
                self.assertEqual([o for c in parts for o in c.logprobs.text_offset], whole.logprobs.text_offset)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="smollm2", prompt="x", max_tokens=0)
        self.assertEqual(e.exception.body["param"], "max_tokens")

    def test_logit_bias_forces_and_bans_tokens(self):
        """logit_bias as OpenAI takes it: +100 makes greedy decoding repeat a token, -100 keeps a
        token out of the text (with speculation too); an id outside the vocabulary is a 400."""
        status, _, t = self.server.request("POST", "/tokenize", {"content": " the"})
        self.assertEqual(status, 200)
        (the,) = t["tokens"]
        kw = dict(model="smollm2", prompt="My favourite colour is", max_tokens=6, temperature=0)
        forced = self.client.completions.create(logit_bias={str(the): 100}, **kw)
        self.assertEqual(forced.choices[0].text, " the" * 6)
        plain = self.client.completions.create(**kw)
        status, _, first = self.server.request("POST", "/tokenize", {"content": plain.choices[0].text})
        banned_id = first["tokens"][0]
        status, _, piece = self.server.request("POST", "/detokenize", {"tokens": [banned_id]})
        self.assertTrue(plain.choices[0].text.startswith(piece["content"]))
        for mode in self.MODES:
            banned = self.client.completions.create(logit_bias={str(banned_id): -100},
                                                    extra_body={"speculative": {"mode": mode}}, **kw)
            self.assertFalse(banned.choices[0].text.startswith(piece["content"]), (mode, banned.choices[0].text))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(logit_bias={"100000000": 1}, **kw)
        self.assertEqual(e.exception.body["param"], "logit_bias")
        # The CLI's --logit-bias (ID=BIAS, or llama.cpp's ID+BIAS / ID-BIAS).
        def cli(*bias):
            return run_tandem(["generate", "-m", model_path(), "--temp", "0", "-n", "3", "--json",
                                   "-p", "My favourite colour is", *bias],
                                  timeout=60 * TIME_SCALE)
        for form in (f"{the}=100", f"{the}+100"):
            out = cli("--logit-bias", form)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(json.loads(out.stdout)["tokens"], [the] * 3, form)
        for bad in ("x=1", f"{the}=abc", f"{the}=inf"):
            out = cli("-l", bad)
            self.assertNotEqual(out.returncode, 0, bad)
            self.assertIn("--logit-bias", out.stderr, bad)

    def test_stop_token_ids_end_the_output(self):
        """vLLM's stop_token_ids: the output ends at the first listed token (finish_reason "stop",
        the token's text left out), with speculation too; ids outside the vocabulary are a 400.
        The CLI's --stop-token-id does the same."""
        kw = dict(model="smollm2", prompt="The colours of the rainbow are red,", max_tokens=16, temperature=0)
        plain = self.client.completions.create(**kw)
        status, _, t = self.server.request("POST", "/tokenize", {"content": plain.choices[0].text})
        self.assertEqual(status, 200)
        ids = t["tokens"]
        self.assertGreaterEqual(len(ids), 6)
        stop = ids[4]
        status, _, head = self.server.request("POST", "/detokenize", {"tokens": ids[:ids.index(stop)]})
        for mode in self.MODES:
            r = self.client.completions.create(extra_body={"stop_token_ids": [stop], "speculative": {"mode": mode}}, **kw)
            self.assertEqual(r.choices[0].finish_reason, "stop", mode)
            self.assertEqual(r.choices[0].text, head["content"], mode)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(extra_body={"stop_token_ids": [100000000]}, **kw)
        self.assertEqual(e.exception.body["param"], "stop_token_ids")
        out = run_tandem(["generate", "-m", model_path(), "--temp", "0", "-n", "16", "--json",
                              "-p", kw["prompt"], "--stop-token-id", str(stop)],
                             timeout=60 * TIME_SCALE)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["tokens"][-1], stop)

    def test_completion_suffix_needs_a_fill_in_the_middle_model(self):
        """`suffix` fills in the middle with a code model's FIM markers (tests/test_speculative.cpp
        runs Qwen2.5-Coder's); SmolLM2 has none, which the 400 says, as it does for token prompts."""
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="smollm2", prompt="def f(x):\n    return ", suffix="\nprint(f(2))",
                                           max_tokens=4)
        self.assertEqual(e.exception.body["param"], "suffix")
        self.assertIn("fill-in-the-middle", e.exception.body["message"])
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="smollm2", prompt=[1, 2, 3], suffix="x", max_tokens=4)
        self.assertEqual(e.exception.body["param"], "suffix")

    def test_n_choices_streamed_and_not_across_speculation(self):
        msgs = [{"role": "user", "content": "Write a word."}]
        before = self.server.metrics()["tandem_prefix_cache_hit_tokens_total"]
        seen = {}
        for mode in self.MODES:
            kw = dict(model="smollm2", messages=msgs, max_tokens=6, temperature=1.0, seed=11, logprobs=True,
                      extra_body={"speculative": {"mode": mode, "verify": "coupled"}})
            r = self.client.chat.completions.create(n=3, **kw)
            self.assertEqual([c.index for c in r.choices], [0, 1, 2])
            texts = [c.message.content for c in r.choices]
            self.assertEqual(r.usage.completion_tokens,
                             sum(len(c.logprobs.content) + (c.finish_reason == "stop") for c in r.choices))
            one = self.client.chat.completions.create(**kw)
            self.assertEqual(r.usage.prompt_tokens, one.usage.prompt_tokens)  # the prompt counts once
            self.assertEqual(texts[0], one.choices[0].message.content, "choice 0 is the n = 1 request")
            chunks = list(self.client.chat.completions.create(n=3, stream=True, stream_options={"include_usage": True},
                                                              **kw))
            streamed, finishes = ["", "", ""], [[], [], []]
            for c in chunks:
                for ch in c.choices:
                    streamed[ch.index] += ch.delta.content or ""
                    if ch.finish_reason:
                        finishes[ch.index].append(ch.finish_reason)
            self.assertEqual(streamed, texts)
            self.assertEqual(finishes, [[c.finish_reason] for c in r.choices])
            self.assertEqual(chunks[-1].usage.completion_tokens, r.usage.completion_tokens)
            seen[mode] = texts
        self.assertEqual(seen["ngram"], seen["none"])
        self.assertEqual(seen["model"], seen["none"])
        self.assertGreater(len(set(seen["none"])), 1, "each choice has its own random stream")
        # The later choices took the prompt's blocks from the prefix cache.
        self.assertGreater(self.server.metrics()["tandem_prefix_cache_hit_tokens_total"], before)
        # Completions: n and best_of (the best by mean token logprob, without logprobs shown).
        c = self.client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=5, temperature=1.0,
                                           seed=2, n=2, best_of=3)
        self.assertEqual([x.index for x in c.choices], [0, 1])
        self.assertTrue(all(x.logprobs is None for x in c.choices))
        c = self.client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=5, temperature=1.0,
                                           seed=2, n=2, best_of=3, logprobs=0)
        means = [sum(x.logprobs.token_logprobs) / len(x.logprobs.token_logprobs) for x in c.choices]
        self.assertGreaterEqual(means[0], means[1])

    def test_load_32_streams(self):
        rng = random.Random(7)
        jobs = []
        for i in range(32):
            prompt = " ".join(PROMPTS[rng.randrange(len(PROMPTS))] for _ in range(rng.choice([1, 1, 2, 5])))
            n = rng.randint(2, 16)
            # Under the sanitizers the 32 concurrent streams are what is checked, not their length.
            jobs.append((i % 2 == 0, prompt, min(n, 6) if SANITIZED else n))

        def one(job):
            chat, prompt, max_tokens = job
            if chat:
                path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
            else:
                path, body = "/v1/completions", {"prompt": prompt}
            body.update(max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
            status, events = raw_stream(self.server, path, body)
            if status != 200 or events[-1] != "[DONE]":
                return f"status {status}, last {events[-1:]}"
            objs = [json.loads(e) for e in events[:-1]]
            usage = objs[-1].get("usage")
            if not usage or usage["completion_tokens"] > max_tokens:
                return f"bad usage {usage}"
            if [o for o in objs if "error" in o]:
                return "error event"
            return None

        t0 = time.time()
        with cf.ThreadPoolExecutor(32) as ex:
            errors = [e for e in ex.map(one, jobs) if e]
        self.assertEqual(errors, [])
        print(f"\n  32 streams in {time.time() - t0:.1f} s", file=sys.stderr)


# ---- server B: small limits (queue, timeout, body size) ------------------------------


# The limits server's idle timeout: longer than test_connections_above_the_limit_get_503
# keeps its first held connection waiting (a few requests' time, more on a sanitized server),
# and short, for test_idle_connection_is_closed waits it out. A server timer: the sanitizers
# slow the requests around it, not the timer itself.
IDLE_TIMEOUT_S = 3 * min(int(TIME_SCALE), 2)


class LimitsServer(Timed):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("limits", "--api-key", API_KEY, "--max-seqs", "1", "--max-queue", "1",
                            "--request-timeout", "2", "--max-body", "4096", "--ctx", "1024",
                            "--max-tokens", "1000", "--max-connections", "6", "--header-timeout", "1",
                            "--body-timeout", "1", "--idle-timeout", str(IDLE_TIMEOUT_S),
                            "--max-template-output", "2000")

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.finish()
        assert rc == 0, f"server exited with {rc}"

    def test_body_too_large(self):
        s, _, b = self.server.request("POST", "/v1/completions", json.dumps({"prompt": "x" * 10000}))
        self.assertEqual((s, b["error"]["code"]), (413, "payload_too_large"))
        self.assertEqual(self.server.request("GET", "/health", auth=False)[0], 200)

    def test_queue_full(self):
        body = {"prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": True}
        with cf.ThreadPoolExecutor(5) as ex:
            results = list(ex.map(lambda _: self.server.request("POST", "/v1/completions", body), range(5)))
        statuses = [r[0] for r in results]
        self.assertIn(429, statuses)
        self.assertIn(200, statuses)
        for s, h, b in results:
            if s == 429:
                self.assertEqual(h.get("Retry-After"), "1")
                self.assertEqual(b["error"]["code"], "queue_full")
        self.assertGreaterEqual(self.server.metrics()['tandem_http_responses_total{code="429"}'], 1)

    def test_request_timeout(self):
        self.server.wait_metric("tandem_running_sequences", lambda v: v == 0)
        t0 = time.time()
        s, _, b = self.server.request("POST", "/v1/completions",
                                      {"prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": True})
        self.assertEqual(s, 200, b)
        self.assertEqual(b["choices"][0]["finish_reason"], "length")
        self.assertLess(b["usage"]["completion_tokens"], 1000)
        self.assertLess(time.time() - t0, 30)
        self.assertGreaterEqual(self.server.metrics()["tandem_http_request_timeouts_total"], 1)


    def raw_socket(self):
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=30 * TIME_SCALE)

    @staticmethod
    def read_response(sock):
        """One response (headers and a Content-Length body) from a kept-alive connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"(?i)content-length: *(\d+)", head)
        while m and len(body) < int(m.group(1)):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    @staticmethod
    def read_all(sock):
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk
        return data

    def test_max_tokens_per_request(self):
        # (A request that does not ask gets the limit: tests/test_openai_protocol.cpp.)
        s, _, b = self.server.request("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 1001})
        self.assertEqual((s, b["error"]["code"], b["error"]["param"]), (400, "invalid_value", "max_tokens"))
        self.assertIn("limit of 1000 tokens", b["error"]["message"])
        s, _, b = self.server.request("POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": "Count to a thousand."}],
                                       "max_completion_tokens": 5000})
        self.assertEqual((s, b["error"]["param"]), (400, "max_completion_tokens"))
        s, _, b = self.server.request("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 1000})
        self.assertEqual(s, 200, b)

    def test_template_output_limit(self):
        s, _, b = self.server.request("POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": "word " * 500}], "max_tokens": 4})
        self.assertEqual((s, b["error"]["code"]), (400, "invalid_messages"), b)
        self.assertIn("output exceeds the limit of 2000 bytes", b["error"]["message"])

    def test_slow_headers_get_408_and_close(self):
        with self.raw_socket() as sock:
            t0 = time.time()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            # One header byte every 0.2 s: never done, always busy (slow-loris).
            got = b""
            sock.settimeout(0.2)
            while time.time() - t0 < 20 * TIME_SCALE:
                try:
                    sock.sendall(b"X")
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                except socket.timeout:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
            elapsed = time.time() - t0
        self.assertTrue(got.startswith(b"HTTP/1.1 408"), got[:200])
        self.assertIn(b"request_timeout", got)
        self.assertLess(elapsed, 10 * TIME_SCALE)
        self.assertGreaterEqual(self.server.metrics()["tandem_http_read_timeouts_total"], 1)

    def test_slow_body_gets_408(self):
        with self.raw_socket() as sock:
            t0 = time.time()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"prompt\":")
            got = self.read_all(sock)
            elapsed = time.time() - t0
        self.assertTrue(got.startswith(b"HTTP/1.1 408"), got[:200])
        self.assertLess(elapsed, 10 * TIME_SCALE)

    def test_idle_connection_is_closed(self):
        with self.raw_socket() as sock:
            t0 = time.time()
            self.assertEqual(self.read_all(sock), b"")  # closed without a word
            elapsed = time.time() - t0
        self.assertGreater(elapsed, IDLE_TIMEOUT_S - 0.5)
        self.assertLess(elapsed, IDLE_TIMEOUT_S + 14 * TIME_SCALE)

    def test_connections_above_the_limit_get_503(self):
        # Wait for earlier tests' connections to be gone (the open-connections gauge counts
        # the /metrics request itself).
        self.server.wait_metric("tandem_http_open_connections", lambda v: v <= 1)
        held = []
        try:
            # Each held connection answers a request first (and stays open: keep-alive), so the
            # server has certainly counted all six before the next ones arrive (a fixed pause
            # was not enough on a slow, e.g. thread-sanitized, server). One may still meet a 503
            # while the server has yet to see an earlier connection (the metrics request's)
            # close: it is opened again.
            deadline = time.time() + 20 * TIME_SCALE
            while len(held) < 6:
                sock = self.raw_socket()
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                got = self.read_response(sock)
                if got.startswith(b"HTTP/1.1 200"):
                    held.append(sock)
                    continue
                sock.close()
                self.assertTrue(got.startswith(b"HTTP/1.1 503") and time.time() < deadline,
                                f"held connection {len(held)}: {got[:200]!r}")
                time.sleep(0.1)
            refused = []
            for _ in range(3):
                with self.raw_socket() as sock:
                    refused.append(self.read_all(sock))
            for got in refused:
                head, _, body = got.partition(b"\r\n\r\n")
                self.assertTrue(head.startswith(b"HTTP/1.1 503"), got[:200])
                self.assertIn(b"Retry-After: 1", head)
                self.assertEqual(json.loads(body)["error"]["code"], "too_many_connections")
            # The held connections still work.
            held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            held[0].settimeout(10 * TIME_SCALE)
            self.assertTrue(held[0].recv(65536).startswith(b"HTTP/1.1 200"))
        finally:
            for sock in held:
                sock.close()
        deadline = time.time() + 20 * TIME_SCALE
        while self.server.request("GET", "/health", auth=False)[0] == 503 and time.time() < deadline:
            time.sleep(0.1)  # until the server has seen the held connections close
        self.server.wait_metric("tandem_http_open_connections", lambda v: v <= 1)
        self.assertGreaterEqual(self.server.metrics()["tandem_http_rejected_connections_total"], 3)


# ---- server C: KV budget too small for the batch; then graceful shutdown --------------


class TightKvServer(Timed):
    @classmethod
    def setUpClass(cls):
        # ~6 MiB of f16 KV is ~270 SmolLM2 tokens: 16 sequences of ~40 tokens cannot all fit.
        cls.server = Server("tightkv", "--api-key", API_KEY, "--ctx", "256", "--kv-mem", "6MiB", "--max-seqs", "16",
                            "--no-prefix-cache", "--drain-timeout", "60")

    @classmethod
    def tearDownClass(cls):
        cls.server.finish()  # test_2_graceful_shutdown has stopped it and checked the exit status

    def test_1_preemption_keeps_every_stream_and_its_text(self):
        client = self.server.client()
        n = 24

        def one(p):
            parts = list(client.completions.create(model="smollm2", prompt=p, max_tokens=n, temperature=0,
                                                   stream=True, extra_body={"ignore_eos": True}))
            return "".join(x.choices[0].text for x in parts if x.choices), parts[-1].choices[0].finish_reason

        with cf.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, PROMPTS))
        self.assertTrue(all(r == "length" for _, r in results), results)
        m = self.server.metrics()
        print(f"\n  preemptions: {m['tandem_preemptions_total']:.0f}, KV blocks {m['tandem_kv_blocks_total']:.0f}",
              file=sys.stderr)
        self.assertGreater(m["tandem_preemptions_total"], 0)
        self.assertEqual(m["tandem_requests_finished_total"], 16)
        # Recomputed sequences continue exactly where they were: same greedy text as alone.
        alone = [complete(client, p, n, extra_body={"ignore_eos": True}).choices[0].text for p in PROMPTS[:4]]
        self.assertEqual([t for t, _ in results[:4]], alone)

    def test_2_graceful_shutdown(self):
        keep = self.server.conn()
        keep.request("GET", "/health")
        self.assertEqual(keep.getresponse().read(), b'{"status":"ok"}')
        c = self.server.conn(timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Once upon a time", "max_tokens": 200,
                                                              "stream": True, "ignore_eos": True}),
                  headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
        r = c.getresponse()
        lines = iter(r.readline, b"")
        events = sse_events(lines)
        first = next(events)
        self.assertIn("text", json.loads(first)["choices"][0])
        # The stream must still be running while draining is checked: 200 tokens take seconds even on
        # a fast machine, and the signal is handled within milliseconds.
        self.server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        # Open connections get 503 for new work; /health says draining; no new connections.
        keep.request("POST", "/v1/completions", body=json.dumps({"prompt": "x"}),
                     headers={"Authorization": f"Bearer {API_KEY}"})
        resp = keep.getresponse()
        self.assertEqual(resp.status, 503)
        self.assertEqual(json.loads(resp.read())["error"]["code"], "service_unavailable")
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", self.server.port), timeout=5).close()
        # The running stream is drained to its end.
        rest = list(events)
        self.assertEqual(rest[-1], "[DONE]")
        self.assertEqual(json.loads(rest[-2])["choices"][0]["finish_reason"], "length")
        self.assertEqual(self.server.proc.wait(60), 0)


# ---- server E: `serve --policy confidence` -------------------------------------------------


@release_only("Scheduler.TheConfidencePolicyMeansWhatItMeansInGenerate (test_scheduler)")
class ConfidencePolicyServer(Timed):
    """The server's default policy means what `tandem generate --policy` means: "confidence" drafts under its
    default p_min (0.5), cutting drafts where the draft is unsure."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("confidence", "--api-key", API_KEY, "--ctx", "1024", "--model-draft", model_path(),
                            "--draft", "model", "--draft-max", "4", "--policy", "confidence")
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.finish()
        assert rc == 0, f"server exited with {rc}"

    def test_confidence_policy_drafts_as_in_generate(self):
        """Shorter drafts than "fixed" in the metrics, as many per draft as `tandem generate --policy confidence`."""
        prompt = "The history of the printing press begins"

        def served(speculative):
            before = self.server.metrics()
            r = self.client.completions.create(model="smollm2", prompt=prompt, max_tokens=48, temperature=0,
                                               extra_body={"speculative": {"lookup": False, **speculative}})
            after = self.server.metrics()
            drafts = after["tandem_spec_drafts_total"] - before["tandem_spec_drafts_total"]
            drafted = after["tandem_spec_draft_tokens_total"] - before["tandem_spec_draft_tokens_total"]
            self.assertGreater(drafts, 0, speculative)
            return r.choices[0].text, drafted / drafts

        def generated(policy):
            out = run_tandem(["generate", "-m", model_path(), "--model-draft", model_path(),
                                  "--draft", "model", "--draft-max", "4", "--policy", policy, "--no-lookup",
                                  "--temp", "0", "-n", "48", "--threads", str(ARGS.threads), "--json", "-p", prompt],
                                 timeout=300 * TIME_SCALE)
            self.assertEqual(out.returncode, 0, out.stderr)
            sp = json.loads(out.stdout)["speculative"]
            return sp["drafted_tokens"] / sp["drafts"]

        text_conf, conf = served({})  # the server's default policy
        text_fixed, fixed = served({"policy": "fixed"})
        self.assertEqual(text_conf, text_fixed)
        self.assertLess(conf, fixed - 0.25, "serve --policy confidence drafted as 'fixed' does")
        self.assertAlmostEqual(conf, generated("confidence"), delta=0.5)


# ---- server D: the inference gateway's metrics under load ------------------------------


def metric_types(text):
    """{family: type} from the # TYPE lines of a /metrics page."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out[name] = kind
    return out


class GatewayMetricsServer(Timed):
    """The Model Server Protocol of the Gateway API Inference Extension (docs/deploy.md): the
    endpoint picker reads TotalQueuedRequests, TotalRunningRequests and KVCacheUtilization
    from /metrics. Here, under more requests than --max-seqs: each gauge has its type, the
    queue holds exactly the excess, running equals the batch, the KV utilization is what the
    allocator's own block counts say, and the vLLM aliases carry the same values."""

    MAX_SEQS = 2
    N_REQUESTS = 6
    LABEL = '{model_name="smollm2"}'

    @classmethod
    def setUpClass(cls):
        cls.server = Server("gateway", "--api-key", API_KEY, "--max-seqs", str(cls.MAX_SEQS), "--max-queue", "16",
                            "--ctx", "512", "--kv-mem", "32MiB", "--draft", "none", "--metrics-compat", "vllm")

    @classmethod
    def tearDownClass(cls):
        cls.server.finish()

    def scrape(self):
        status, _, text = self.server.request("GET", "/metrics", auth=False)
        self.assertEqual(status, 200)
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return metric_types(text), values

    def check_consistent(self, v):
        # KVCacheUtilization is the allocator's fill without the prefix-cache blocks no
        # sequence holds (evictable), over the budget; target only here (no draft model).
        used, idle, total = v["tandem_kv_blocks_used"], v["tandem_kv_prefix_idle_blocks"], v["tandem_kv_blocks_total"]
        self.assertGreater(total, 0)
        self.assertAlmostEqual(v["tandem_kv_cache_utilization"], (used - idle) / total, delta=1.0 / total)
        self.assertGreaterEqual(v["tandem_kv_cache_utilization"], 0.0)
        self.assertLessEqual(v["tandem_kv_cache_utilization"], 1.0)
        # The aliases are the same numbers, from the same snapshot.
        self.assertEqual(v["vllm:num_requests_waiting" + self.LABEL], v["tandem_queue_length"])
        self.assertEqual(v["vllm:num_requests_running" + self.LABEL], v["tandem_running_sequences"])
        self.assertEqual(v["vllm:kv_cache_usage_perc" + self.LABEL], v["tandem_kv_cache_utilization"])
        self.assertEqual(v["vllm:gpu_cache_usage_perc" + self.LABEL], v["tandem_kv_cache_utilization"])

    def test_protocol_gauges_under_load(self):
        types, idle = self.scrape()
        for name in ("tandem_queue_length", "tandem_running_sequences", "tandem_kv_cache_utilization",
                     "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                     "vllm:gpu_cache_usage_perc", "vllm:cache_config_info"):
            self.assertEqual(types.get(name), "gauge", name)
        for name in ("vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            self.assertEqual(types.get(name), "counter", name)
        for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
            self.assertEqual(types.get(name), "histogram", name)
        self.assertEqual((idle["tandem_queue_length"], idle["tandem_running_sequences"]), (0, 0))
        self.assertEqual(idle["tandem_kv_cache_utilization"], 0)
        self.check_consistent(idle)
        block_size = next(int(re.search(r'block_size="(\d+)"', k).group(1)) for k in idle
                          if k.startswith("tandem_cache_config_info{"))

        prompt = PROMPTS[2] + " " + PROMPTS[4]
        # One request first: the prompt's length in tokens (its usage).
        status, _, warm = self.server.request("POST", "/v1/completions",
                                              {"model": "smollm2", "prompt": prompt, "max_tokens": 1})
        self.assertEqual(status, 200, warm)
        n_prompt = warm["usage"]["prompt_tokens"]
        self.assertGreater(n_prompt, 0)

        body = {"model": "smollm2", "prompt": prompt, "max_tokens": 64, "stream": True, "ignore_eos": True}
        with cf.ThreadPoolExecutor(self.N_REQUESTS) as ex:
            futures = [ex.submit(raw_stream, self.server, "/v1/completions", body) for _ in range(self.N_REQUESTS)]
            # Every request is in: the batch is full and the excess waits. A request that has
            # arrived is queued until the scheduler's next step admits it, so a scrape can
            # land between the two (seen once under load: 1 running, the rest queued): wait
            # for the batch to fill, not only for the requests to arrive.
            deadline = time.time() + 30 * TIME_SCALE
            loaded = None
            while time.time() < deadline:
                _, v = self.scrape()
                if (v["tandem_queue_length"] + v["tandem_running_sequences"] == self.N_REQUESTS
                        and v["tandem_running_sequences"] == self.MAX_SEQS):
                    loaded = v
                    break
                time.sleep(0.02)
            self.assertIsNotNone(loaded, "the requests never were all in with the batch full at once")
            self.assertEqual(loaded["tandem_running_sequences"], self.MAX_SEQS)
            self.assertEqual(loaded["tandem_queue_length"], self.N_REQUESTS - self.MAX_SEQS)
            self.check_consistent(loaded)
            # The running sequences hold at least their prompts' blocks (shared prefix blocks
            # once: identical prompts), and the cache is not full.
            util = loaded["tandem_kv_cache_utilization"]
            self.assertGreaterEqual(util * loaded["tandem_kv_blocks_total"], n_prompt // block_size)
            self.assertGreater(util, 0)
            self.assertLess(util, 1)
            # While the batch drains, the queue only shrinks.
            last_queue = loaded["tandem_queue_length"]
            while not all(f.done() for f in futures):
                _, v = self.scrape()
                self.assertLessEqual(v["tandem_running_sequences"], self.MAX_SEQS)
                self.assertLessEqual(v["tandem_queue_length"], last_queue)
                last_queue = v["tandem_queue_length"]
                self.check_consistent(v)
                time.sleep(0.05)
            for f in futures:
                status, events = f.result()
                self.assertEqual((status, events[-1]), (200, "[DONE]"))

        # Idle again: nothing queued or running, and the blocks the prefix cache keeps are
        # free for the gateway (utilization 0) although the allocator still counts them.
        _, after = self.scrape()
        self.assertEqual((after["tandem_queue_length"], after["tandem_running_sequences"]), (0, 0))
        self.assertEqual(after["tandem_kv_cache_utilization"], 0)
        self.assertEqual(after["tandem_kv_blocks_used"], after["tandem_kv_prefix_idle_blocks"])
        self.assertGreater(after["tandem_kv_prefix_idle_blocks"], 0)
        self.assertGreater(after["tandem_kv_usage_ratio"], 0)
        self.check_consistent(after)
        self.assertGreaterEqual(after["vllm:generation_tokens_total" + self.LABEL], self.N_REQUESTS * 64)
        status, _, body = self.server.request("GET", "/health", auth=False)
        self.assertEqual((status, body), (200, {"status": "ok"}))


    def test_speculation_figures_per_request_and_in_vllm_names(self):
        """A request that asks gets its own drafts, drafted and accepted tokens and their split by
        position in its usage (streamed: the last chunk's), and /metrics carries the same counts under
        vLLM's spec_decode names; they move by exactly this request's figures."""
        prompt = "one two three four five one two three four five one two three four five one two three"
        body = {"model": "smollm2", "prompt": prompt, "max_tokens": 32, "temperature": 0, "ignore_eos": True,
                "speculative": {"mode": "ngram", "draft_max": 4}, "speculation_metrics": True}

        def counters():
            _, v = self.scrape()
            names = ("drafts", "draft_tokens", "accepted_tokens")
            ours = [v[f"tandem_spec_{n}_total"] for n in names]
            theirs = [v[f"vllm:spec_decode_num_{n}_total" + self.LABEL] for n in names]
            self.assertEqual(ours, theirs)
            per_pos = {k: x for k, x in v.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")}
            self.assertEqual(sum(per_pos.values()), v["tandem_spec_accepted_tokens_total"])
            return ours

        def check(spec):
            self.assertGreater(spec["num_drafts"], 0)
            self.assertGreater(spec["num_accepted_tokens"], 0, "n-gram drafts on a repeating prompt")
            self.assertLessEqual(spec["num_accepted_tokens"], spec["num_draft_tokens"])
            self.assertEqual(sum(spec["num_accepted_tokens_per_pos"]), spec["num_accepted_tokens"])
            self.assertEqual(sum(spec["num_draft_tokens_per_pos"]), spec["num_draft_tokens"])
            self.assertAlmostEqual(spec["acceptance_rate"], spec["num_accepted_tokens"] / spec["num_draft_tokens"])
            self.assertAlmostEqual(spec["mean_accepted_length"], 1 + spec["num_accepted_tokens"] / spec["num_drafts"])
            return [spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"]]

        before = counters()
        status, _, r = self.server.request("POST", "/v1/completions", body)
        self.assertEqual(status, 200, r)
        figures = check(r["usage"]["speculation"])
        self.assertEqual([a - b for a, b in zip(counters(), before)], figures)
        # Streamed: the usage chunk carries them; a request that does not ask gets none.
        status, events = raw_stream(self.server, "/v1/completions",
                                    dict(body, stream=True, stream_options={"include_usage": True}))
        self.assertEqual(status, 200)
        usage = [json.loads(e)["usage"] for e in events[:-1] if json.loads(e).get("usage")]
        self.assertEqual(len(usage), 1)
        self.assertEqual(check(usage[0]["speculation"]), figures, "the same request drafts the same")
        status, _, plain = self.server.request("POST", "/v1/completions", dict(body, speculation_metrics=False))
        self.assertEqual(status, 200, plain)
        self.assertNotIn("speculation", plain["usage"])


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True, help="path to the tandem executable")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-k", dest="pattern", action="append", help="only tests matching this substring")
    ap.add_argument("-v", action="store_true")
    ARGS, rest = ap.parse_known_args()
    missing = missing_prerequisite()
    if missing:
        print(missing[1])
        return missing[0]
    loader = unittest.TestLoader()
    if ARGS.pattern:
        loader.testNamePatterns = [f"*{p}*" for p in ARGS.pattern]
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in (MainServer, LimitsServer, TightKvServer,
                                                                            ConfidencePolicyServer,
                                                                            GatewayMetricsServer))
    t0 = time.time()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    print(f"server tests took {time.time() - t0:.0f} s")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
