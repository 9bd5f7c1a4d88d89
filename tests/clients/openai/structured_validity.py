"""Structured output at scale: thousands of seeded samples at temperature 1 from the bundled model
(which knows nothing of JSON, regexes or grammars: only the token mask can make its output valid),
each checked by a validator independent of linserve — the `jsonschema` package for JSON schemas,
`json` for json_object, Python's `re` for regular expressions, a Lark grammar (written by hand to
describe the same language) for GBNF. Every output must be valid and, with max_tokens large enough
for the case, complete (finish_reason "stop"; the constraint, not max_tokens, ended it).

json_object is the exception to "complete": the bundled model never saw a double quote (tiny
Shakespeare has none; log p(") is about -13 inside a string), so an unbounded JSON string does
not end within any practical max_tokens. Its outputs are checked as JSON objects when whole and
as prefixes of one (completed by json_prefix_completion, then parsed by `json`) when cut. The
other cases bound every string (maxLength, enum, pattern), so the mask itself ends them.

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


def json_prefix_completion(prefix):
    """A suffix that makes `prefix` one whole JSON value, found by scanning it (the container
    stack, and where the last token stands), or None when the scan finds it cannot be a prefix of
    one. Only the suffix is built here: json.loads judges prefix + suffix."""
    stack = []  # "{" / "[" of the open containers
    expect = "value"  # what the next token may be: value, key, colon, comma (or a closer)
    i, n = 0, len(prefix)
    while i < n:
        c = prefix[i]
        if c in " \t\n\r":
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and prefix[j] != '"':
                j += 2 if prefix[j] == "\\" else 1
            if j >= n:  # an open string: close what is open inside it, then it
                tail = prefix[i:]
                if tail.endswith("\\") and not tail.endswith("\\\\"):
                    fix = 'n"'
                else:
                    m = re.search(r"\\u([0-9a-fA-F]{0,3})$", tail)
                    fix = "0" * (4 - len(m.group(1))) + '"' if m else '"'
                return fix + close(stack, "colon" if expect.startswith("key") else "comma")
            expect = "colon" if expect.startswith("key") else "comma"
            i = j + 1
        elif c in "{[":
            stack.append(c)
            expect = "key_or_close" if c == "{" else "value_or_close"
            i += 1
        elif c in "}]":
            stack.pop()
            expect = "comma"
            i += 1
        elif c == ":":
            expect = "value"
            i += 1
        elif c == ",":
            expect = "key" if stack[-1] == "{" else "value"
            i += 1
        else:  # a number or a literal: runs to the next delimiter
            j = i
            while j < n and prefix[j] not in ' \t\n\r,:]}"[{':
                j += 1
            word = prefix[i:j]
            expect = "comma"
            if j == n:
                for whole in ("true", "false", "null"):
                    if whole.startswith(word):
                        return whole[len(word):] + close(stack, "comma")
                fix = "0" if word[-1] in "-+.eE" else ""
                return fix + close(stack, "comma")
            i = j
    return close(stack, expect)


def close(stack, expect):
    suffix = {"value": "0", "value_or_close": "", "key": '"k":0', "key_or_close": "",
              "colon": ":0", "comma": ""}[expect]
    return suffix + "".join("}" if c == "{" else "]" for c in reversed(stack))


def json_object_prefix_check(text):
    """Output the constraint did not finish (max_tokens came first) must be the start of a JSON
    object."""
    suffix = json_prefix_completion(text)
    value = json.loads(text + suffix)
    if not isinstance(value, dict):
        raise ValueError(f"not an object: {type(value).__name__}")


def regex_validator(pattern):
    compiled = re.compile(pattern)

    def check(text):
        if compiled.fullmatch(text) is None:
            raise ValueError("does not match the pattern")

    return check


# (name, request fields that set the constraint, prompt, max_tokens, validator of a whole
# document, validator of a document max_tokens cut short or None: it must be whole)
CASES = [
    ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "person", "strict": True, "schema": PERSON_SCHEMA}}},
     "A character of the play, as JSON:\n", 1500, json_schema_validator(PERSON_SCHEMA), None),
    ("json_object", {"response_format": {"type": "json_object"}},
     "JSON:\n", 96, json_object_check, json_object_prefix_check),
    ("regex_date", {"guided_regex": DATE_REGEX}, "Date: ", 64, regex_validator(DATE_REGEX), None),
    ("regex_line", {"guided_regex": LINE_REGEX}, "\n", 128, regex_validator(LINE_REGEX), None),
    ("grammar_play", {"guided_grammar": PLAY_GBNF}, "A scene:\n", 256, lark_validator(PLAY_LARK), None),
    ("grammar_arith", {"guided_grammar": ARITH_GBNF}, "Sum: ", 256, lark_validator(ARITH_LARK), None),
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


def run_case(name, fields, prompt, max_tokens, check, check_prefix, samples):
    start = time.monotonic()
    failures = []
    cut = 0
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        futures = {pool.submit(complete, fields, prompt, max_tokens, seed): seed
                   for seed in range(samples)}
        for future in concurrent.futures.as_completed(futures):
            seed = futures[future]
            text, finish = future.result()
            cut += finish != "stop"
            if finish != "stop" and check_prefix is None:
                failures.append((seed, f"incomplete (finish_reason {finish})", text))
                continue
            try:
                (check if finish == "stop" else check_prefix)(text)
            except Exception as e:  # any validator's complaint
                failures.append((seed, f"invalid: {e}", text))
    elapsed = time.monotonic() - start
    print(f"{name}: {samples - len(failures)}/{samples} valid, {samples - cut} of them complete "
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
