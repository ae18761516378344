"""Structured output and tool calls through `tandem serve`, with the official OpenAI client
(mixed into test_server.py's MainServer, which has n-gram and draft-model speculation).

Every JSON-mode and schema-constrained answer must parse and validate against its schema
(jsonschema, from PyPI, as the independent check) on 50 sampled answers per schema at
T = 1, spread over speculation off, n-gram and draft model; greedy answers under a schema
are identical with speculation on and off; tool_choice "required" yields tool calls whose
arguments validate against the tool's parameters, streamed and not.
"""
import concurrent.futures as cf
import datetime
import glob
import json
import os
import uuid

try:
    import jsonschema
    import openai
except ImportError:  # reported by test_server.main()
    jsonschema = openai = None

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "json_schemas")
MODES = [None, "ngram", "model"]
# 12 sampled answers per schema in the release run (every one must validate: a property of
# each answer, not a statistic; the C++ tests walk the same grammars thousands of times), and
# under the sanitizers (TIME_SCALE > 1), where these tests check memory safety, one batch of
# three (one per speculation mode).
SANITIZED = float(os.environ.get("TANDEM_TEST_TIME_SCALE") or 1) > 1
SAMPLES = 1 if SANITIZED else 12
# Under the sanitizers, two of the schemas (nested objects, oneOf): the grammar engine under
# ASan is the C++ tests' and the fuzzers' (test_grammar, test_json_schema). The recursive one
# (tree) is left to the release run: at T = 1 most of its answers run to max_tokens and are
# drawn again, minutes under ASan for the same code paths.
SANITIZED_SCHEMAS = ("person_address", "shape_oneof")


def load_schemas():
    out = {}
    for path in sorted(glob.glob(os.path.join(SCHEMA_DIR, "*.json"))):
        with open(path) as f:
            s = json.load(f)
        s.pop("examples", None)
        out[os.path.basename(path)[:-5]] = s
    return out


def check_formats(doc, schema):
    """The string formats the grammar enforces, checked with Python's own parsers."""
    if isinstance(schema, dict):
        fmt = schema.get("format")
        if isinstance(doc, str) and fmt == "uuid":
            uuid.UUID(doc)
        elif isinstance(doc, str) and fmt == "date":
            datetime.date.fromisoformat(doc)
        elif isinstance(doc, str) and fmt == "date-time":
            datetime.datetime.fromisoformat(doc.replace("Z", "+00:00"))
        if isinstance(doc, dict):
            for k, v in doc.items():
                sub = schema.get("properties", {}).get(k)
                if sub is not None:
                    check_formats(v, sub)


class StructuredOutputCases:
    def _chat(self, content, mode, **kw):
        extra = dict(kw.pop("extra_body", {}))
        if mode:
            extra["speculative"] = {"mode": mode}
        return self.client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": content}], extra_body=extra or None, **kw)

    def _sample(self, jobs):
        with cf.ThreadPoolExecutor(8) as pool:
            return list(pool.map(lambda a: self._chat(*a[0], **a[1]), jobs))

    def _complete_samples(self, prompt, response_format, seed0, max_tokens=300):
        """SAMPLES answers that ended by themselves, sampled at T = 1 over the three speculation
        modes in batches; answers cut by max_tokens (a prefix of a document, not one) are
        counted and replaced, up to three times SAMPLES attempts (at least 6)."""
        done, cut, i = [], 0, 0
        attempts = max(6, 3 * SAMPLES)
        while len(done) < SAMPLES and i < attempts:
            jobs = [((prompt, MODES[(i + j) % 3]),
                     dict(temperature=1.0, seed=seed0 + i + j, max_tokens=max_tokens, response_format=response_format))
                    for j in range(min(8, SAMPLES - len(done) + 2, attempts - i))]
            i += len(jobs)
            for r in self._sample(jobs):
                if r.choices[0].finish_reason == "length":
                    cut += 1
                else:
                    done.append(r.choices[0].message.content)
        self.assertGreaterEqual(len(done), SAMPLES, f"only {len(done)} of {i} answers ended within max_tokens")
        return done[:SAMPLES], cut

    def test_json_schema_outputs_validate(self):
        self.assertIsNotNone(jsonschema, "pip install jsonschema (scripts/setup.sh)")
        schemas = load_schemas()
        self.assertGreaterEqual(len(schemas), 6)
        if SANITIZED:
            schemas = {k: schemas[k] for k in SANITIZED_SCHEMAS}
        for name, schema in schemas.items():
            rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
            # (A recursive schema, the tree, could nest without end at T = 1: the prompt asks for a
            # small one.)
            docs, cut = self._complete_samples(f"Write one small example {schema.get('title', name)} as JSON.", rf, 0)
            for text in docs:
                doc = json.loads(text)
                jsonschema.validate(doc, schema)
                check_formats(doc, schema)
            print(f"  {name}: {len(docs)} valid ({cut} cut by max_tokens)", end="", flush=True)

    def test_json_object_outputs_parse(self):
        # A free-form object may run on at T = 1: a tighter budget wastes less on the ones that do.
        docs, _ = self._complete_samples("A JSON object with a city's name and country.", {"type": "json_object"}, 100, 160)
        for text in docs:
            self.assertIsInstance(json.loads(text), dict)

    def test_greedy_schema_output_is_the_same_with_speculation(self):
        schema = load_schemas()["person_address"]
        rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
        # Streamed and not under the release build; under the sanitizers streamed only (the
        # streaming path holds more of the server's code; the plain one is the other tests').
        for stream in ((True,) if SANITIZED else (False, True)):
            texts = []
            for mode in MODES:
                kw = dict(temperature=0, max_tokens=200, response_format=rf)
                if stream:
                    extra = {"speculative": {"mode": mode}} if mode else None
                    chunks = self.client.chat.completions.create(
                        model="smollm2", messages=[{"role": "user", "content": "A person, as JSON."}], stream=True,
                        extra_body=extra, **kw)
                    texts.append("".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices))
                else:
                    texts.append(self._chat("A person, as JSON.", mode, **kw).choices[0].message.content)
            self.assertEqual(texts[1], texts[0], "n-gram changed the constrained greedy output")
            self.assertEqual(texts[2], texts[0], "the draft model changed the constrained greedy output")
            jsonschema.validate(json.loads(texts[0]), schema)

    def test_grammar_extension_and_refusals(self):
        r = self._chat("Yes or no?", None, temperature=1.0, max_tokens=10,
                       extra_body={"grammar": 'root ::= "yes" | "no"'})
        self.assertIn(r.choices[0].message.content, ("yes", "no"))
        self.assertEqual(r.choices[0].finish_reason, "stop")
        bad = [({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(a)\\1"}}}},
                "pattern"),
               ({"response_format": {"type": "yaml"}}, "response_format"),
               ({"extra_body": {"grammar": "root ::= ("}}, "grammar")]
        for kw, word in bad:
            with self.assertRaises(openai.BadRequestError) as cm:
                self._chat("x", None, max_tokens=5, **kw)
            self.assertIn(word, str(cm.exception))

    def test_required_tool_calls(self):
        weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                                   "parameters": weather}},
                 {"type": "function", "function": {"name": "get_time", "description": "Current time",
                                                   "parameters": {"type": "object", "properties": {}}}}]
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        for i, mode in enumerate(MODES):
            extra = {"speculative": {"mode": mode}} if mode else None
            r = self.client.chat.completions.create(
                model="smollm2", messages=msgs, tools=tools, tool_choice="required", temperature=1.0, seed=i,
                max_tokens=200, extra_body=extra)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertGreaterEqual(len(c.message.tool_calls), 1)
            for call in c.message.tool_calls:
                self.assertTrue(call.id.startswith("call_"))
                self.assertEqual(call.type, "function")
                args = json.loads(call.function.arguments)
                if call.function.name == "get_weather":
                    jsonschema.validate(args, weather)
                else:
                    self.assertEqual(call.function.name, "get_time")
        # A named function, streamed: the call arrives as tool_calls deltas.
        chunks = list(self.client.chat.completions.create(
            model="smollm2", messages=msgs, tools=tools, temperature=0, max_tokens=200, stream=True,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False))
        calls = {}
        finish = None
        for ch in chunks:
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            for tc in d.tool_calls or []:
                e = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            finish = ch.choices[0].finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0]["name"], "get_weather")
        jsonschema.validate(json.loads(calls[0]["arguments"]), weather)
        # The tool's answer goes back in; the model may answer in text now (tool_choice auto).
        r = self.client.chat.completions.create(
            model="smollm2", tools=tools, temperature=0, max_tokens=30,
            messages=msgs + [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}])
        self.assertIn(r.choices[0].finish_reason, ("stop", "length", "tool_calls"))
