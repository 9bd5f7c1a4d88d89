#!/usr/bin/env python3
"""Generates text with the reference model, exactly as linserve-generate does.

    generate.py [--model DIR] --prompt TEXT --seed N [--temperature T] [--top-k K] ...

Mirrors tools/generate_main.cc: BOS (when the model has one) then the encoded prompt are fed with
the chunked forward (--chunk-size), the prompt counts as seen for the penalties, each new token
is drawn by linserve_ref.sampling (model/backend/sampler.h's algorithm and random stream) from float32
logits, generation stops at EOS (not printed) or after --max-new-tokens, and the text is the
tokens' bytes, decoded as UTF-8 (invalid bytes become U+FFFD). Flags have the same names as
linserve-generate's, with either '-' or '_'.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import corpus, export  # noqa: E402
from linserve_ref.sampling import Sampler, SamplingParams  # noqa: E402
from linserve_ref.text_tokenizer import load_tokenizer  # noqa: E402

DEFAULT_MODEL = os.path.join(corpus.REPO_ROOT, "models", "shakespeare-linear")
MAX_NEW_TOKENS = 1 << 20


def generate(model, tokenizer, prompt, params, max_new_tokens=256, chunk_size=64,
             stop_at_eos=True):
    """Returns (generated token ids, text)."""
    cfg = model.config
    ids = ([cfg["bos_token_id"]] if cfg["bos_token_id"] >= 0 else []) + tokenizer.encode(prompt)
    if not ids:
        raise ValueError("--prompt is empty and the model has no bos_token_id to start from")
    if cfg["position"] == "learned":
        room = cfg["max_position"] - len(ids)
        if room < 0:
            raise ValueError(f"--prompt is {len(ids)} tokens; the model's learned positions end "
                             f"at {cfg['max_position']}")
        max_new_tokens = min(max_new_tokens, room + 1)
    sampler = Sampler(params)
    out = []
    with torch.no_grad():
        logits, state = model(torch.tensor([ids]), chunk_size=chunk_size)
        logits = logits[0, -1]
        sampler.observe(ids)
        while len(out) < max_new_tokens:
            token = sampler.sample(logits.float().tolist())
            if stop_at_eos and token == cfg["eos_token_id"]:
                break
            out.append(token)
            if len(out) == max_new_tokens:
                break
            logits, state = model.step(torch.tensor([token]), state)
            logits = logits[0]
    text = b"".join(tokenizer.token_bytes(t) for t in out).decode("utf-8", errors="replace")
    return out, text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def flag(name, **kwargs):
        p.add_argument("--" + name.replace("_", "-"), "--" + name, dest=name, **kwargs)

    flag("model", default=DEFAULT_MODEL, help="model directory (default: the bundled model)")
    flag("prompt", default="", help="text to continue")
    flag("max_new_tokens", type=int, default=256, help=f"in [0, {MAX_NEW_TOKENS}]")
    flag("temperature", type=float, default=1.0, help="0 = greedy")
    flag("top_k", type=int, default=0)
    flag("top_p", type=float, default=1.0)
    flag("min_p", type=float, default=0.0)
    flag("repetition_penalty", type=float, default=1.0)
    flag("presence_penalty", type=float, default=0.0)
    flag("frequency_penalty", type=float, default=0.0)
    flag("seed", type=int, default=0, help="seed of the sampler's random stream")
    flag("chunk_size", type=int, default=64, help="prompt tokens per chunk, in [1, 4096]")
    flag("stop_at_eos", type=lambda s: s.lower() in ("1", "true", "yes"), default=True)
    args = p.parse_args(argv)
    if not 0 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        p.error(f"--max_new_tokens = {args.max_new_tokens} is outside [0, {MAX_NEW_TOKENS}]")
    if not 1 <= args.chunk_size <= 4096:
        p.error(f"--chunk_size = {args.chunk_size} is outside [1, 4096]")
    if not 0 <= args.seed < 1 << 64:
        p.error(f"--seed = {args.seed} is outside [0, 2^64)")
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p,
                            args.repetition_penalty, args.presence_penalty,
                            args.frequency_penalty, args.seed)
    try:
        params.validate()
    except ValueError as e:
        p.error(f"--{e}")
    torch.set_num_threads(1)
    try:
        model = export.load_model_dir(args.model)
        tokenizer = load_tokenizer(model.config, args.model)
        _, text = generate(model, tokenizer, args.prompt, params, args.max_new_tokens,
                           args.chunk_size, args.stop_at_eos)
    except (OSError, ValueError) as e:
        raise SystemExit(f"generate.py: {e}") from None
    sys.stdout.write(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
