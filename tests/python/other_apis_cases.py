"""OpenAI's Responses API and Anthropic's Messages API, driven by their official clients
(`openai`'s client.responses, the `anthropic` package) against `tandem serve`, with
speculation on: a greedy reply is the chat endpoint's reply to the same conversation, streamed
and not; function tools give calls whose arguments follow their schema; a JSON-schema answer
parses and validates; stop sequences, max tokens and malformed requests get each API's own
reasons and error shapes.

A mixin for test_server.py's MainServer (smollm2; `self.server`, `self.client`)."""
import json
import unittest

import jsonschema
from structured_cases import SANITIZED

try:
    import anthropic
except ImportError:  # reported by test_server.py's missing_prerequisite
    anthropic = None
import openai

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                         "country": {"type": "string", "maxLength": 30}},
        "required": ["name", "country"], "additionalProperties": False}
SPEC = {"speculative": {"mode": "model", "lookup": False}}
# The anthropic client takes no temperature here (its newer models fix it); the server does.
GREEDY = dict(SPEC, temperature=0)
SYSTEM = "Answer in one short sentence."
QUESTION = "What is the capital of France?"


# Under the sanitizers the long tool and schema generations are left to the release run; the
# translations and writers they go through run there in tests/test_other_apis.cpp and in the
# text cases here.
heavy = unittest.skipIf(SANITIZED, "release run only; under the sanitizers: test_other_apis.cpp and the text cases")


class OtherApiCases:
    def _chat_reference(self, max_tokens, stop=None):
        r = self.client.chat.completions.create(
            model="smollm2", temperature=0, max_tokens=max_tokens, stop=stop,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage

    # ---- OpenAI Responses ----------------------------------------------------------------

    def test_responses_api_text_streamed_and_not(self):
        ref, ref_finish, ref_usage = self._chat_reference(24)
        r = self.client.responses.create(model="smollm2", instructions=SYSTEM, input=QUESTION, temperature=0,
                                         max_output_tokens=24, extra_body=SPEC)
        self.assertEqual(r.object, "response")
        self.assertTrue(r.id.startswith("resp_"))
        self.assertEqual(r.output_text, ref, "the Responses API and chat completions read the same conversation")
        self.assertEqual(r.status, "incomplete" if ref_finish == "length" else "completed")
        if r.status == "incomplete":
            self.assertEqual(r.incomplete_details.reason, "max_output_tokens")
        self.assertEqual((r.usage.input_tokens, r.usage.output_tokens),
                         (ref_usage.prompt_tokens, ref_usage.completion_tokens))
        self.assertEqual(r.output[0].type, "message")
        self.assertEqual(r.output[0].content[0].type, "output_text")
        # The input as a list of message items, content as parts: the same reply.
        r2 = self.client.responses.create(
            model="smollm2", temperature=0, max_output_tokens=24, extra_body=SPEC,
            input=[{"role": "developer", "content": SYSTEM},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
        self.assertEqual(r2.output_text, ref)
        # Streamed: the events in order, the deltas adding up to the same text.
        events = list(self.client.responses.create(model="smollm2", instructions=SYSTEM, input=QUESTION,
                                                   temperature=0, max_output_tokens=24, stream=True,
                                                   extra_body=SPEC))
        types = [e.type for e in events]
        self.assertEqual(types[:2], ["response.created", "response.in_progress"])
        self.assertIn(types[-1], ("response.completed", "response.incomplete"))
        for t in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                  "response.output_text.done", "response.content_part.done", "response.output_item.done"):
            self.assertIn(t, types)
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertEqual(text, ref)
        self.assertEqual(events[-1].response.output_text, ref)
        self.assertEqual(events[-1].response.usage.output_tokens, ref_usage.completion_tokens)

    @heavy
    def test_responses_api_function_tools_and_json_schema(self):
        tools = [{"type": "function", "name": "get_weather", "description": "Current weather", "parameters": WEATHER},
                 {"type": "function", "name": "get_time", "description": "Current time",
                  "parameters": {"type": "object", "properties": {}}}]
        r = self.client.responses.create(model="smollm2", input="What is the weather in Paris?", tools=tools,
                                         tool_choice="required", temperature=0, max_output_tokens=200,
                                         extra_body=SPEC)
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertGreaterEqual(len(calls), 1, r.output)
        for c in calls:
            self.assertIn(c.name, ("get_weather", "get_time"))
            self.assertTrue(c.call_id)
            if c.name == "get_weather":
                jsonschema.validate(json.loads(c.arguments), WEATHER)
        # A named function, streamed; then the call's output goes back in as the next input.
        events = list(self.client.responses.create(
            model="smollm2", input="What is the weather in Paris?", tools=tools, temperature=0,
            tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
            max_output_tokens=200, stream=True, extra_body=SPEC))
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        self.assertEqual(len(done), 1)
        jsonschema.validate(json.loads(done[0].arguments), WEATHER)
        call = [o for o in events[-1].response.output if o.type == "function_call"][0]
        follow = self.client.responses.create(
            model="smollm2", tools=tools, temperature=0, max_output_tokens=20, extra_body=SPEC,
            input=[{"role": "user", "content": "What is the weather in Paris?"},
                   {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                   {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees, sunny"}])
        self.assertIn(follow.status, ("completed", "incomplete"))
        # text.format: a JSON Schema answer.
        r = self.client.responses.create(
            model="smollm2", input="Name a European capital and its country, as JSON.", temperature=0,
            max_output_tokens=100, extra_body=SPEC,
            text={"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}})
        jsonschema.validate(json.loads(r.output_text), CITY)

    def test_responses_api_errors_in_openais_shape(self):
        for body, param in (({"model": "smollm2"}, "input"),
                            ({"model": "smollm2", "input": 5}, "input"),
                            ({"model": "smollm2", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
                            ({"model": "smollm2", "input": "x", "tools": [{"type": "web_search"}]}, "tools"),
                            ({"model": "smollm2", "input": "x", "max_output_tokens": 0}, "max_completion_tokens")):
            status, _, e = self.server.request("POST", "/v1/responses", body)
            self.assertEqual(status, 400, (body, e))
            self.assertEqual(e["error"]["type"], "invalid_request_error", e)
            self.assertEqual(e["error"]["param"], param, e)
        with self.assertRaises(openai.BadRequestError):
            self.client.responses.create(model="smollm2", input=[])
        with self.assertRaises(openai.NotFoundError):
            self.client.responses.create(model="gpt-4o", input="x")

    # ---- Anthropic Messages --------------------------------------------------------------

    def _anthropic(self, key=None):
        return anthropic.Anthropic(base_url=f"http://127.0.0.1:{self.server.port}",
                                   api_key=key or self.API_KEY, max_retries=0)

    def test_messages_api_text_streamed_and_not(self):
        client = self._anthropic()
        ref, ref_finish, ref_usage = self._chat_reference(24)
        m = client.messages.create(model="smollm2", max_tokens=24, system=SYSTEM,
                                   messages=[{"role": "user", "content": QUESTION}], extra_body=GREEDY)
        self.assertEqual(m.type, "message")
        self.assertEqual(m.role, "assistant")
        self.assertEqual([b.type for b in m.content], ["text"])
        self.assertEqual(m.content[0].text, ref)
        self.assertEqual(m.stop_reason, "max_tokens" if ref_finish == "length" else "end_turn")
        self.assertEqual((m.usage.input_tokens, m.usage.output_tokens),
                         (ref_usage.prompt_tokens, ref_usage.completion_tokens))
        # System as blocks, content as blocks: the same reply.
        m2 = client.messages.create(model="smollm2", max_tokens=24, extra_body=GREEDY,
                                    system=[{"type": "text", "text": SYSTEM}],
                                    messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
        self.assertEqual(m2.content[0].text, ref)
        # Streamed with the client's helper.
        with client.messages.stream(model="smollm2", max_tokens=24, system=SYSTEM,
                                    messages=[{"role": "user", "content": QUESTION}], extra_body=GREEDY) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        self.assertEqual(text, ref)
        self.assertEqual(final.content[0].text, ref)
        self.assertEqual(final.stop_reason, m.stop_reason)
        self.assertEqual(final.usage.output_tokens, m.usage.output_tokens)
        # A stop sequence inside the reply: the reply ends before it, and says which.
        word = ref.split()[1] if len(ref.split()) > 1 else ref.split()[0]
        cut, _, _ = self._chat_reference(24, stop=[word])
        m3 = client.messages.create(model="smollm2", max_tokens=24, system=SYSTEM,
                                    stop_sequences=["never-appears", word],
                                    messages=[{"role": "user", "content": QUESTION}], extra_body=GREEDY)
        self.assertEqual((m3.stop_reason, m3.stop_sequence), ("stop_sequence", word))
        self.assertEqual(m3.content[0].text, cut)

    @heavy
    def test_messages_api_tools(self):
        client = self._anthropic()
        tools = [{"name": "get_weather", "description": "Current weather", "input_schema": WEATHER},
                 {"name": "get_time", "description": "Current time", "input_schema": {"type": "object",
                                                                                     "properties": {}}}]
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        m = client.messages.create(model="smollm2", max_tokens=200, tools=tools,
                                   tool_choice={"type": "any"}, messages=msgs, extra_body=GREEDY)
        self.assertEqual(m.stop_reason, "tool_use")
        uses = [b for b in m.content if b.type == "tool_use"]
        self.assertGreaterEqual(len(uses), 1, m.content)
        for u in uses:
            self.assertTrue(u.id.startswith("toolu_"))
            if u.name == "get_weather":
                jsonschema.validate(u.input, WEATHER)
        # A named tool, streamed: the input arrives as JSON deltas the client assembles.
        with client.messages.stream(model="smollm2", max_tokens=200, tools=tools, messages=msgs,
                                    tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                                    extra_body=GREEDY) as s:
            final = s.get_final_message()
        use = [b for b in final.content if b.type == "tool_use"]
        self.assertEqual([u.name for u in use], ["get_weather"])
        jsonschema.validate(use[0].input, WEATHER)
        self.assertEqual(final.stop_reason, "tool_use")
        # The result goes back in; the model may answer in text now.
        follow = client.messages.create(model="smollm2", max_tokens=20, tools=tools, extra_body=GREEDY,
                                        messages=msgs + [{"role": "assistant", "content": final.content},
                                                         {"role": "user", "content": [
                                                             {"type": "tool_result", "tool_use_id": use[0].id,
                                                              "content": "18 degrees, sunny"}]}])
        self.assertIn(follow.stop_reason, ("end_turn", "max_tokens", "tool_use"))

    def test_messages_api_errors_in_anthropics_shape(self):
        for body, what in (({"model": "smollm2", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
                           ({"model": "smollm2", "max_tokens": 5, "messages": []}, "messages"),
                           ({"model": "smollm2", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]},
                            "role"),
                           ("{not json", "JSON")):
            status, _, e = self.server.request("POST", "/v1/messages", body)
            self.assertEqual(status, 400, (body, e))
            self.assertEqual(e["type"], "error", e)
            self.assertEqual(e["error"]["type"], "invalid_request_error", e)
            self.assertIn(what, e["error"]["message"], e)
        client = self._anthropic()
        with self.assertRaises(anthropic.BadRequestError) as cm:
            client.messages.create(model="smollm2", max_tokens=0, messages=[{"role": "user", "content": "x"}])
        self.assertEqual(cm.exception.body["error"]["type"], "invalid_request_error")
        with self.assertRaises(anthropic.NotFoundError) as cm:
            client.messages.create(model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        self.assertEqual(cm.exception.body["error"]["type"], "not_found_error")
        with self.assertRaises(anthropic.AuthenticationError):
            self._anthropic("wrong-key").messages.create(model="smollm2", max_tokens=5,
                                                         messages=[{"role": "user", "content": "x"}])
