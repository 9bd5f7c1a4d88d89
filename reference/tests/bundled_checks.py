"""What the bundled models' tests share (test_bundled_model.py, test_based_model.py,
test_gated_delta_net_model.py): the validation loss of the fixed slice each records, the text
linserve-generate (the C++ CPU backend) writes against generate.py's, and the --generate-bin
flag."""

import argparse
import json
import subprocess
import sys
import unittest

import generate
from linserve_ref import corpus, training
from linserve_ref.sampling import SamplingParams


def check_fixed_slice(test, model, tokenizer, slice_results, model_name=None, at_most=None):
    """Every row of `slice_results` (evaluate.py --json) is `model`'s loss on that slice of the
    validation text within 1e-4 nats/char (and at most `at_most`); the file names `model_name`
    when one is given."""
    with open(slice_results) as f:
        recorded = json.load(f)
    if model_name is not None:
        test.assertEqual(recorded["model"], model_name)
    _, val = corpus.split(corpus.read_text(corpus.DEFAULT_CORPUS))
    text = val[recorded["slice_start"]:recorded["slice_start"] + recorded["slice_chars"]]
    for row in recorded["results"]:
        with test.subTest(window=row["window"], start=row["start_position"]):
            npc, _ = training.nats_per_char(model, tokenizer, text, row["window"],
                                            model.config["bos_token_id"], row["start_position"])
            test.assertAlmostEqual(npc, row["nats_per_char"], delta=1e-4)
            if at_most is not None:
                test.assertLessEqual(npc, at_most)


def check_generate_writes_the_reference_text(test, model, tokenizer, model_dir, generate_bin,
                                             cases):
    """For each (prompt, seed, sampling flags) of `cases`, linserve-generate writes exactly what
    generate.py writes (48 new tokens, one thread). Skips without --generate-bin."""
    if generate_bin is None:
        test.skipTest("no --generate-bin given")
    for prompt, seed, flags in cases:
        with test.subTest(prompt=prompt, seed=seed):
            params = SamplingParams(seed=seed, **flags)
            _, expected = generate.generate(model, tokenizer, prompt, params, max_new_tokens=48)
            cmd = [generate_bin, f"--model={model_dir}", f"--prompt={prompt}", f"--seed={seed}",
                   "--max_new_tokens=48", "--threads=1"]
            cmd += [f"--{k}={v}" for k, v in flags.items()]
            got = subprocess.run(cmd, capture_output=True, check=True).stdout
            test.assertEqual(got.decode("utf-8"), expected)


def main(module):
    """Runs unittest on the calling test module, setting its GENERATE_BIN from --generate-bin."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--generate-bin", default=None)
    known, rest = parser.parse_known_args()
    module.GENERATE_BIN = known.generate_bin
    unittest.main(module=module, argv=[sys.argv[0]] + rest)
