"""Structured output end to end: 200 requests with response_format json_schema / json_object on
stories260K (a model that has never seen JSON), each output parsed and validated against its
schema by python3-jsonschema; streaming equals the same JSON; refusals name what is wrong.

usage: structured_output_test.py BIN_DIR SHARED_DIR"""
from __future__ import annotations

import json
import os
import sys
import unittest
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from cluster import Cluster  # noqa: E402

try:
    import jsonschema  # Debian python3-jsonschema
except ImportError:  # pragma: no cover
    print("SKIP: python3-jsonschema is not installed (tests/run.sh installs it)")
    sys.exit(77)

BIN, SHARED = sys.argv[1], sys.argv[2]

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer"},
            "mood": {"enum": ["happy", "sad", "sleepy"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
        },
        "required": ["name", "age", "mood", "tags"],
        "additionalProperties": False,
    },
    "optional_and_nullable": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 30},
            "score": {"type": ["number", "null"]},
            "done": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 10},
        },
        "required": ["title", "done"],
        "additionalProperties": False,
    },
    "numbers": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 6},
    "nested": {
        "type": "object",
        "properties": {
            "story": {"type": "object", "properties": {
                "hero": {"type": "string", "maxLength": 12},
                "friends": {"type": "array", "items": {"$ref": "#/$defs/friend"}, "maxItems": 2}},
                "required": ["hero", "friends"]},
            "kind": {"const": "tale"},
        },
        "required": ["story", "kind"],
        "$defs": {"friend": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                                              "age": {"type": "integer"}},
                             "required": ["name"]}},
    },
    "union": {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "integer"}, {"type": "null"}]},
}


class StructuredOutputTest(unittest.TestCase):
    cluster: Cluster

    @classmethod
    def setUpClass(cls) -> None:
        tok = os.path.join(SHARED, "models/stories260K/tok512.bin")
        cls.cluster = Cluster(BIN, SHARED, worker_args=["--tokenizer", tok], frontends=1)
        cls.port = cls.cluster.http[0]

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.stop()

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def generate(self, i: int) -> tuple[str, dict | None, str, str]:
        names = list(SCHEMAS) + ["json_object"]
        name = names[i % len(names)]
        if name == "json_object":
            rf, schema = {"type": "json_object"}, {"type": "object"}
        else:
            schema = SCHEMAS[name]
            rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
        common = {"max_tokens": 96 + (i % 5) * 16, "temperature": 1.0, "seed": 1000 + i, "response_format": rf}
        if i % 2:
            status, body = self.post("/v1/chat/completions", dict(common, messages=[
                {"role": "user", "content": f"Tell me about a cat number {i} as JSON."}]))
            self.assertEqual(status, 200, body)
            choice = body["choices"][0]
            return name, schema, choice["message"]["content"], choice["finish_reason"]
        status, body = self.post("/v1/completions", dict(common, prompt=f"Once upon a time, {i} JSON"))
        self.assertEqual(status, 200, body)
        return name, schema, body["choices"][0]["text"], body["choices"][0]["finish_reason"]

    def test_200_outputs_parse_and_validate(self) -> None:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(self.generate, range(200)))
        failures = []
        for i, (name, schema, text, finish) in enumerate(results):
            try:
                value = json.loads(text)
                jsonschema.validate(value, schema)
                if name == "person":  # properties come in the schema's order
                    self.assertTrue(text.startswith('{"name":'), text)
                self.assertIn(finish, ("stop", "length"))
            except Exception as e:  # noqa: BLE001 - collected and reported together
                failures.append(f"#{i} {name} ({finish}): {e.__class__.__name__}: {str(e)[:200]}\n    {text!r}")
        self.assertEqual(failures, [], "\n".join(failures[:10]) + f"\n{len(failures)} of 200 invalid")
        # The grammar must not have made every output trivially the same.
        self.assertGreater(len({t for _, _, t, _ in results}), 100)

    def test_json_object_and_greedy(self) -> None:
        status, body = self.post("/v1/completions", {"prompt": "Lily and Ben", "max_tokens": 64, "temperature": 0,
                                                     "response_format": {"type": "json_object"}})
        self.assertEqual(status, 200, body)
        self.assertIsInstance(json.loads(body["choices"][0]["text"]), dict)
        # Greedy is deterministic under the grammar too.
        status2, body2 = self.post("/v1/completions", {"prompt": "Lily and Ben", "max_tokens": 64, "temperature": 0,
                                                       "response_format": {"type": "json_object"}})
        self.assertEqual(body["choices"][0]["text"], body2["choices"][0]["text"])

    def test_streaming_equals_non_streaming(self) -> None:
        rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS["person"]}}
        req = {"prompt": "The dog", "max_tokens": 80, "temperature": 0.8, "seed": 7, "response_format": rf}
        status, body = self.post("/v1/completions", req)
        self.assertEqual(status, 200, body)
        http = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                      data=json.dumps(dict(req, stream=True)).encode(),
                                      headers={"Content-Type": "application/json"})
        text = ""
        with urllib.request.urlopen(http, timeout=60) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[6:])
                    if chunk.get("choices"):
                        text += chunk["choices"][0].get("text", "")
        self.assertEqual(text, body["choices"][0]["text"])
        jsonschema.validate(json.loads(text), SCHEMAS["person"])

    def test_refusals_name_the_problem(self) -> None:
        cases = [
            ({"type": "json_schema", "json_schema": {"name": "z", "schema": {
                "type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}}}}, "'pattern'"),
            ({"type": "json_schema", "json_schema": {"name": "z", "schema": {"type": "integer", "minimum": 3}}},
             "'minimum'"),
            ({"type": "json_schema", "json_schema": {"name": "z"}}, "schema"),
            ({"type": "xml"}, "xml"),
            ({"type": "json_schema", "json_schema": {"name": "z", "schema": {"type": "object", "properties": {
                "a": {"type": "string"}}, "required": ["b"]}}}, "'b'"),
            ("json", "response_format"),
        ]
        for rf, needle in cases:
            status, body = self.post("/v1/completions", {"prompt": "x", "max_tokens": 4, "response_format": rf})
            self.assertEqual(status, 400, (rf, body))
            self.assertEqual(body["error"]["param"], "response_format", body)
            self.assertIn(needle, body["error"]["message"], body)
        # The server keeps serving.
        status, body = self.post("/v1/completions", {"prompt": "x", "max_tokens": 4})
        self.assertEqual(status, 200, body)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
