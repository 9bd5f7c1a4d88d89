#!/usr/bin/env python3
"""Helper of sampler_mirror_test: runs reference's sampling mirror on logits from C++.

    sampler_mirror.py DIR

reads DIR/logits.safetensors ("logits" F32 [cases, steps, vocab], "masks" I64 [cases, steps,
words]: a token mask per step, "prompt" I32 [prompt]) and DIR/params.json (a list of
SamplingParams field dicts, one per case, plus "masked": whether the case samples under its
masks), and prints a JSON list of the tokens the mirror samples for each case: observe the
prompt, then one Sample per step.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "reference"))

from linserve_ref import safetensors_io  # noqa: E402
from linserve_ref.sampling import Sampler, SamplingParams  # noqa: E402


def main():
    directory = sys.argv[1]
    tensors, _ = safetensors_io.load_file(os.path.join(directory, "logits.safetensors"))
    with open(os.path.join(directory, "params.json")) as f:
        cases = json.load(f)
    logits = tensors["logits"].tolist()
    masks = tensors["masks"].tolist()
    prompt = tensors["prompt"].tolist()
    out = []
    for case, steps, step_masks in zip(cases, logits, masks):
        masked = case.pop("masked")
        sampler = Sampler(SamplingParams(**case))
        sampler.observe(prompt)
        out.append([sampler.sample(step, mask if masked else None)
                    for step, mask in zip(steps, step_masks)])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
