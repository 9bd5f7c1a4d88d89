"""Structured output at scale: thousands of seeded samples at temperature 1 from the bundled model
(which knows nothing of JSON, regexes or grammars: only the token mask can make its output valid),
each checked by a validator independent of linserve — the `jsonschema` package for JSON schemas,
`json` for json_object, Python's `re` for regular expressions, a Lark grammar (written by hand to
describe the same language) for GBNF. Every output must be valid and, with max_tokens large enough
for the case, complete (finish_reason "stop"; the constraint, not max_tokens, ended it).

Run by structured_test.sh under run.sh (LINSERVE_HTTP, LINSERVE_TOKEN in the environment):
    structured_validity.py SAMPLES_PER_CASE
"""
import concurrent.futures
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

import jsonschema
import lark

URL = os.environ["LINSERVE_HTTP"] + "/v1/completions"
TOKEN = os.environ["LINSERVE_TOKEN"]
CONCURRENCY = 64

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "role": {"type": "string", "enum": ["king", "queen", "fool", "nurse"]},
        "alive": {"type": "boolean"},
        "tags": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[a-z]{1,6}$"},
            "minItems": 1,
            "maxItems": 3,
        },
        "spouse": {"anyOf": [{"$ref": "#/$defs/peer"}, {"type": "null"}]},
        "motto": {"type": ["string", "null"], "maxLength": 8},
        "rank": {"const": 3},
    },
    "required": ["name", "age", "score", "role", "alive", "tags", "spouse", "rank"],
    "additionalProperties": False,
    "$defs": {
        "peer": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "enum": ["lord", "lady"]},
                "house": {"type": "string", "pattern": "^[A-Z][a-z]{2,7}$"},
            },
            "required": ["title", "house"],
            "additionalProperties": False,
        }
    },
}

PLAY_GBNF = r"""
root    ::= line line? line?
line    ::= speaker ": " words "\n"
speaker ::= "ROMEO" | "JULIET" | "NURSE"
words   ::= word (" " word){0,7}
word    ::= [a-z]{1,10}
"""
PLAY_LARK = r"""
start: line line? line?
line: SPEAKER ": " words "\n"
SPEAKER: "ROMEO" | "JULIET" | "NURSE"
words: WORD (" " WORD)~0..7
WORD: /[a-z]{1,10}/
"""

ARITH_GBNF = r"""
root   ::= expr
expr   ::= term (("+" | "-") term){0,3}
term   ::= factor (("*" | "/") factor){0,3}
factor ::= [1-9] [0-9]{0,3} | "0" | "(" expr ")"
"""
ARITH_LARK = r"""
start: expr
expr: term (("+" | "-") term)~0..3
term: factor (("*" | "/") factor)~0..3
factor: NUMBER | "(" expr ")"
NUMBER: /[1-9][0-9]{0,3}|0/
"""

DATE_REGEX = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
LINE_REGEX = r"(ROMEO|JULIET|[A-Z][a-z]{2,9}): [a-z]{2,8}( [a-z]{1,8}){0,5}[.!?]"


def lark_validator(grammar):
    parser = lark.Lark(grammar, parser="earley", lexer="dynamic")

    def check(text):
        parser.parse(text)  # raises on an invalid document

    return check


def json_schema_validator(schema):
    validator = jsonschema.Draft202012Validator(schema)

    def check(text):
        validator.validate(json.loads(text))

    return check


def json_object_check(text):
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"not an object: {type(value).__name__}")


def regex_validator(pattern):
    compiled = re.compile(pattern)

    def check(text):
        if compiled.fullmatch(text) is None:
            raise ValueError("does not match the pattern")

    return check


# (name, request fields that set the constraint, prompt, max_tokens, validator)
CASES = [
    ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "person", "strict": True, "schema": PERSON_SCHEMA}}},
     "A character of the play, as JSON:\n", 400, json_schema_validator(PERSON_SCHEMA)),
    ("json_object", {"response_format": {"type": "json_object"}},
     "JSON:\n", 600, json_object_check),
    ("regex_date", {"guided_regex": DATE_REGEX}, "Date: ", 64, regex_validator(DATE_REGEX)),
    ("regex_line", {"guided_regex": LINE_REGEX}, "\n", 128, regex_validator(LINE_REGEX)),
    ("grammar_play", {"guided_grammar": PLAY_GBNF}, "A scene:\n", 256, lark_validator(PLAY_LARK)),
    ("grammar_arith", {"guided_grammar": ARITH_GBNF}, "Sum: ", 256, lark_validator(ARITH_LARK)),
]


def complete(fields, prompt, max_tokens, seed):
    body = dict(fields, model="shakespeare-linear", prompt=prompt, max_tokens=max_tokens,
                temperature=1.0, seed=seed)
    request = urllib.request.Request(
        URL, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    for attempt in range(50):
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                choice = json.load(response)["choices"][0]
                return choice["text"], choice["finish_reason"]
        except urllib.error.HTTPError as e:
            if e.code != 429:  # only a full queue is retried
                raise RuntimeError(f"HTTP {e.code}: {e.read().decode(errors='replace')}")
            time.sleep(0.1 * (attempt + 1))
    raise RuntimeError("the queue stayed full")


def run_case(name, fields, prompt, max_tokens, check, samples):
    start = time.monotonic()
    failures = []
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        futures = {pool.submit(complete, fields, prompt, max_tokens, seed): seed
                   for seed in range(samples)}
        for future in concurrent.futures.as_completed(futures):
            seed = futures[future]
            text, finish = future.result()
            if finish != "stop":
                failures.append((seed, f"incomplete (finish_reason {finish})", text))
                continue
            try:
                check(text)
            except Exception as e:  # any validator's complaint
                failures.append((seed, f"invalid: {e}", text))
    elapsed = time.monotonic() - start
    print(f"{name}: {samples - len(failures)}/{samples} valid and complete "
          f"({elapsed:.1f} s)", flush=True)
    for seed, why, text in sorted(failures)[:5]:
        print(f"  seed {seed}: {why}: {text!r}")
    return not failures


def main():
    samples = int(sys.argv[1])
    results = [run_case(*case, samples) for case in CASES]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
