#!/usr/bin/env python3
"""`tandem serve` on the CUDA backend, end to end, without a GPU.

The server binary runs with --device cuda-emulated (the CUDA backend's kernels under the
SIMT emulator, docs/cuda.md) on a tiny random-weight pair that tandem_make_fixture writes:
a target and a draft of another shape, both in the backend's one arena and their KV in
one pool. Over raw HTTP it checks that serving works unchanged there: greedy text does not
depend on speculation (none, n-gram, the draft model) or on batching; a seeded coupled
sample is the same text with and without speculation; streaming gives the non-streamed
text; a KV budget small enough to preempt loses nothing; a client that disconnects
mid-stream is cancelled; JSON Schema answers (their grammar's masks applied on the device)
do not depend on speculation either, nor do logprobs (reached on the device too); /metrics
shows device verification, the one KV pool and no scratch allocated in the step path;
SIGTERM drains and exits 0.

    python3 tests/python/test_server_cuda.py --tandem build/release/apps/tandem \
        --fixture build/release/tandem_make_fixture

Needs only the standard library (no model download, no openai module): it never skips.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

TIME_SCALE = float(os.environ.get("TANDEM_TEST_TIME_SCALE") or 1)
ARGS = None
MODELS = None  # (target, draft) paths
KV_MEM = 192 * 1024  # bytes: 32 blocks of 6 KiB; a sequence here takes about 3, a whole context 26


class Server:
    """`tandem serve` on a free loopback port; its log goes to a temporary file."""

    def __init__(self, *extra):
        self.log = tempfile.NamedTemporaryFile(prefix="tandem-cuda-serve-", suffix=".log", delete=False)
        target, draft = MODELS
        cmd = [ARGS.tandem, "serve", "-m", target, "--model-draft", draft, "--device", "cuda-emulated",
               "--gpu-mem", "64MiB", "--kv-mem", str(KV_MEM), "--host", "127.0.0.1", "--port", "0",
               "--threads", "1", "--model-id", "tiny", "-c", "256", *extra]
        # The cost model it calibrates goes next to the models, not into the user's cache
        # (whose file would gain an entry for every run's temporary model paths).
        env = dict(os.environ, TANDEM_CACHE=os.path.dirname(target))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = None
        deadline = time.time() + 120 * TIME_SCALE
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.text()}")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.1)
        if self.port is None:
            self.proc.kill()
            raise RuntimeError(f"server did not start:\n{self.text()}")

    def text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def request(self, method, path, body=None, timeout=300):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout * TIME_SCALE)
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        text = r.read().decode("utf-8", errors="replace")
        conn.close()
        return r.status, text

    def post(self, path, body):
        status, text = self.request("POST", path, body)
        if status != 200:
            raise AssertionError(f"{path} -> {status}: {text}")
        return json.loads(text)

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, timeout=120):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout * TIME_SCALE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def complete(server, prompt, n, mode="none", **kw):
    spec = dict(kw.pop("speculative", {}), mode=mode)
    body = dict(model="tiny", prompt=prompt, max_tokens=n, temperature=0, speculative=spec, **kw)
    r = server.post("/v1/completions", body)
    return r["choices"][0]["text"], r


PROMPTS = ["The quick brown fox", "def main():\n    return", "1, 2, 3, 4,", "Once upon a time",
           "SELECT * FROM", "hello hello hello", "a b c d e f", "Tandem decoding"]


class ServeOnEmulatedCuda(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_0_health_models_and_the_cuda_backend(self):
        status, _ = self.server.request("GET", "/health")
        self.assertEqual(status, 200)
        status, text = self.server.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertIn("tiny", text)
        m = self.server.metrics()
        # One pool for both caches, of at most the budget (not one budget per cache).
        self.assertGreater(m["tandem_kv_bytes_total"], 0)
        self.assertLessEqual(m["tandem_kv_bytes_total"], KV_MEM)

    def test_1_greedy_text_is_the_same_with_any_proposer_alone_and_batched(self):
        n = 24
        plain = {p: complete(self.server, p, n)[0] for p in PROMPTS}
        self.assertGreater(len(set(plain.values())), 2, "prompts should give different texts")
        for mode in ("model", "ngram"):
            for p in PROMPTS[:4]:
                self.assertEqual(complete(self.server, p, n, mode)[0], plain[p], f"{mode} {p!r}")
        # All at once (more than fit the KV budget: preemption), proposers mixed.
        jobs = [(p, ("model", "ngram", "none")[i % 3]) for i, p in enumerate(PROMPTS * 2)]
        with cf.ThreadPoolExecutor(len(jobs)) as ex:
            batched = list(ex.map(lambda j: complete(self.server, j[0], n, j[1])[0], jobs))
        for (p, mode), text in zip(jobs, batched):
            self.assertEqual(text, plain[p], f"batched {mode} {p!r}")
        m = self.server.metrics()
        self.assertGreater(m["tandem_spec_draft_tokens_total"], 0)
        self.assertGreater(m["tandem_device_verified_steps_total"], 0, "no step was decided on the device")
        self.assertGreater(m["tandem_preemptions_total"], 0, "the budget should have preempted someone")
        self.assertEqual(m["tandem_scratch_growths_total"], 0, "a step allocated scratch")

    def test_2_coupled_samples_do_not_depend_on_speculation(self):
        def sampled(p, seed, mode):
            body = dict(model="tiny", prompt=p, max_tokens=16, temperature=0.9, top_p=0.95, top_k=40, seed=seed,
                        speculative={"mode": mode, "verify": "coupled", "draft_max": 3})
            return self.server.post("/v1/completions", body)["choices"][0]["text"]

        plain = {(p, s): sampled(p, s, "none") for p in PROMPTS[:3] for s in (1, 2)}
        self.assertGreater(len(set(plain.values())), 3, "seeds should give different texts")
        for mode in ("model", "ngram"):
            for (p, s), text in plain.items():
                self.assertEqual(sampled(p, s, mode), text, f"{mode} {p!r} seed {s}")

    def test_3_chat_streamed_is_the_text_not_streamed(self):
        body = dict(model="tiny", messages=[{"role": "user", "content": "Say something."}], max_tokens=20,
                    temperature=0, speculative={"mode": "model"})
        whole = self.server.post("/v1/chat/completions", body)["choices"][0]["message"]["content"]
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=300 * TIME_SCALE)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(dict(body, stream=True)),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        pieces, done = [], False
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            delta = json.loads(line[6:])["choices"][0]["delta"]
            pieces.append(delta.get("content") or "")
        conn.close()
        self.assertTrue(done)
        self.assertEqual("".join(pieces), whole)

    def test_4_a_client_that_disconnects_mid_stream_is_cancelled(self):
        before = self.server.metrics().get("tandem_requests_cancelled_total", 0)
        s = socket.create_connection(("127.0.0.1", self.server.port))
        body = json.dumps(dict(model="tiny", prompt="Count:", max_tokens=200, temperature=0, stream=True,
                               speculative={"mode": "model"}))
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        got = b""
        while got.count(b"data: ") < 2:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "the server closed the stream early")
            got += chunk
        s.close()
        deadline = time.time() + 60 * TIME_SCALE
        while time.time() < deadline and self.server.metrics().get("tandem_requests_cancelled_total", 0) <= before:
            time.sleep(0.1)
        self.assertGreater(self.server.metrics().get("tandem_requests_cancelled_total", 0), before)
        # The server goes on serving.
        self.assertTrue(complete(self.server, "still there?", 4)[0] is not None)
        m = self.server.metrics()
        self.assertEqual(m["tandem_scratch_growths_total"], 0)

    def test_5_structured_answers_are_decided_on_the_device(self):
        """JSON Schema answers (response_format): their grammar's masks go to the device, so
        their steps are verified there too, and the greedy text and a seed's coupled text do
        not depend on speculation; a finished answer is the schema's JSON (an object, which
        this random-weight model pads with whitespace up to the budget, and an enum, which
        ends within it)."""
        schemas = [{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer"}},
                    "required": ["answer", "n"], "additionalProperties": False},
                   {"enum": ["yes", "no", "maybe so"]}]

        def ask(prompt, schema, mode, temperature=0.0, seed=None):
            body = dict(model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=24,
                        temperature=temperature, speculative={"mode": mode, "verify": "coupled", "draft_max": 3},
                        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
            if seed is not None:
                body["seed"] = seed
            choice = self.server.post("/v1/chat/completions", body)["choices"][0]
            return choice["message"]["content"], choice["finish_reason"]

        before = self.server.metrics()["tandem_device_verified_steps_total"]
        finished = 0
        for schema, temperature, seed in ((schemas[0], 0.0, None), (schemas[1], 0.0, None), (schemas[1], 0.9, 5)):
            for p in PROMPTS[:2]:
                plain = ask(p, schema, "none", temperature, seed)
                for mode in ("model", "ngram"):
                    self.assertEqual(ask(p, schema, mode, temperature, seed), plain, f"{mode} {p!r} T={temperature}")
                if plain[1] != "stop":
                    continue
                answer = json.loads(plain[0])
                if "enum" in schema:
                    self.assertIn(answer, schema["enum"])
                else:
                    self.assertIn(answer["answer"], ("yes", "no"))
                    self.assertIsInstance(answer["n"], int)
                finished += 1
        self.assertGreater(finished, 0, "no answer finished: the schema's end went untested")
        m = self.server.metrics()
        self.assertGreater(m["tandem_device_verified_steps_total"], before, "no constrained step was decided on the device")
        self.assertEqual(m["tandem_scratch_growths_total"], 0)

    def test_6_logprobs_are_reached_on_the_device(self):
        """Requests with logprobs decode on the device like any other (each committed token's
        logprob and alternatives come down with the verdict): the greedy text and a seed's
        coupled text, with their logprobs, do not depend on speculation, and the steps were
        verified on the device."""
        def ask(mode, temperature, seed):
            body = dict(model="tiny", messages=[{"role": "user", "content": PROMPTS[2]}], max_tokens=12,
                        temperature=temperature, seed=seed, logprobs=True, top_logprobs=3,
                        speculative={"mode": mode, "verify": "coupled", "draft_max": 3})
            choice = self.server.post("/v1/chat/completions", body)["choices"][0]
            return choice["message"]["content"], choice["logprobs"]

        before = self.server.metrics()["tandem_device_verified_steps_total"]
        for temperature, seed in ((0.0, 1), (0.9, 7)):
            text, lp = ask("none", temperature, seed)
            content = lp["content"]
            self.assertGreater(len(content), 0)
            for t in content:
                self.assertLessEqual(t["logprob"], 0.0)
                self.assertEqual(len(t["top_logprobs"]), 3)
                self.assertGreaterEqual(t["top_logprobs"][0]["logprob"], t["top_logprobs"][-1]["logprob"])
            self.assertEqual(ask("model", temperature, seed), (text, lp), f"T={temperature}")
        m = self.server.metrics()
        self.assertGreater(m["tandem_device_verified_steps_total"], before, "no step with logprobs was verified on the device")
        self.assertEqual(m["tandem_scratch_growths_total"], 0)

    def test_9_sigterm_drains_and_exits_cleanly(self):
        with cf.ThreadPoolExecutor(2) as ex:
            f = ex.submit(complete, self.server, "last words", 16, "model")
            time.sleep(0.2)
            code = self.server.stop()
            text, _ = f.result()
        self.assertEqual(code, 0, self.server.text()[-2000:])
        self.assertIsInstance(text, str)


def main():
    global ARGS, MODELS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--fixture", required=True, help="tandem_make_fixture")
    ap.add_argument("-k", dest="pattern")
    ARGS, rest = ap.parse_known_args()
    work = tempfile.mkdtemp(prefix="tandem-cuda-serve-")
    subprocess.run([ARGS.fixture, "--pair", work], check=True)
    MODELS = (os.path.join(work, "target.gguf"), os.path.join(work, "draft.gguf"))
    argv = [sys.argv[0]] + rest + (["-k", ARGS.pattern] if ARGS.pattern else [])
    result = unittest.main(argv=argv, exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
