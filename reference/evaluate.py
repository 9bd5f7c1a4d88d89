#!/usr/bin/env python3
"""Validation loss of a model directory in nats per character, at several context lengths.

    evaluate.py [--model DIR] [--context 256] [--multiples 1 4] [--start-positions 0]
                [--slice-start 0] [--slice-chars 0] [--json FILE]

The text is the validation split of the corpus (linserve_ref/corpus.py), or the slice
[--slice-start, --slice-start + --slice-chars) of it. It is encoded once; the tokens are cut into
consecutive windows of context × multiple tokens; each window is read from a fresh state whose
first position is the start position, after a BOS token, so every token is predicted once.
nats/char = Σ NLL / characters of the text. For every window length the loss per token is also
given by quarter of the window (tokens [0, W/4), [W/4, W/2), ...), which shows whether the
predictions late in long windows, far past the training context, degrade.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import corpus, export, training  # noqa: E402
from linserve_ref.text_tokenizer import load_tokenizer  # noqa: E402

DEFAULT_MODEL = os.path.join(corpus.REPO_ROOT, "models", "shakespeare-linear")


def quarters(losses, window):
    """Mean loss per token over each quarter of the windows' positions."""
    offsets = torch.arange(losses.numel()) % window
    out = []
    for q in range(4):
        mask = (offsets >= q * window // 4) & (offsets < (q + 1) * window // 4)
        out.append(losses[mask].mean().item() if mask.any() else float("nan"))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--corpus", default=corpus.DEFAULT_CORPUS)
    p.add_argument("--context", type=int, default=256, help="the training context, in tokens")
    p.add_argument("--multiples", type=int, nargs="+", default=[1, 4],
                   help="window lengths, as multiples of --context")
    p.add_argument("--start-positions", type=int, nargs="+", default=[0],
                   help="position index of every window's first (BOS) token")
    p.add_argument("--slice-start", type=int, default=0,
                   help="first character of the validation split to use")
    p.add_argument("--slice-chars", type=int, default=0, help="characters to use; 0: all")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    model = export.load_model_dir(args.model)
    model.eval()
    tokenizer = load_tokenizer(model.config, args.model)
    _, val = corpus.split(corpus.read_text(args.corpus))
    end = len(val) if args.slice_chars == 0 else args.slice_start + args.slice_chars
    text = val[args.slice_start:end]
    results = []
    for start in args.start_positions:
        for multiple in args.multiples:
            window = args.context * multiple
            began = time.time()
            npc, losses = training.nats_per_char(model, tokenizer, text, window,
                                                 model.config["bos_token_id"], start,
                                                 args.chunk_size)
            row = dict(window=window, start_position=start, nats_per_char=npc,
                       nats_per_token=losses.mean().item(), tokens=losses.numel(),
                       chars=len(text), quarters=quarters(losses, window))
            results.append(row)
            print(f"window {window:5d} start {start:9d}: {npc:.4f} nats/char "
                  f"({row['nats_per_token']:.4f} nats/token over {row['tokens']} tokens, "
                  f"{len(text)} chars); by quarter "
                  f"{' '.join(f'{q:.3f}' for q in row['quarters'])}  [{time.time() - began:.0f} s]",
                  flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            model_path = os.path.abspath(args.model)
            if model_path.startswith(corpus.REPO_ROOT + os.sep):
                model_path = os.path.relpath(model_path, corpus.REPO_ROOT)
            json.dump(dict(model=model_path, slice_start=args.slice_start,
                           slice_chars=len(text), results=results), f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
