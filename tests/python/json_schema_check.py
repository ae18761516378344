#!/usr/bin/env python3
"""Validates documents against JSON Schemas with `jsonschema` (the independent check of
engine/grammar/json_schema.cpp: test_json_schema.cpp writes the documents its grammars
produced).

    python3 tests/python/json_schema_check.py FILE

FILE: JSON lines, each {"schema": ..., "docs": ["<JSON text>", ...]}. Every document must
parse and be valid under draft 2020-12 with its format checker (date, time, date-time,
uuid...). Exit status: 0 all valid, 1 some invalid (each printed), 77 jsonschema missing.
"""
import json
import sys

try:
    from jsonschema import Draft202012Validator
except ImportError:
    print("jsonschema is not installed (scripts/setup.sh installs it)")
    sys.exit(77)


def main(path):
    bad = total = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            v = Draft202012Validator(case["schema"], format_checker=Draft202012Validator.FORMAT_CHECKER)
            for text in case["docs"]:
                total += 1
                errors = [e.message for e in v.iter_errors(json.loads(text))]
                if errors:
                    bad += 1
                    print(f"schema {json.dumps(case['schema'])[:200]}\n  document {text[:200]!r}\n  {errors[0][:200]}")
    print(f"{total} documents, {bad} invalid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
