#!/usr/bin/env python3
"""Trains small models on multi-query associative recall (linserve_ref/mqar.py) and reports
their accuracy on a held-out test set: a pure linear_attention model against a Based hybrid of
the same width, depth, steps and data.

    mqar.py [--models linear based] [--steps 800] [--seq-len 64] [--kv-pairs 4] [--json FILE]

Both models have --n-layers layers of width --d-model, pre-norm with rms_norm and gated_mlp
(d_ff 2·d_model); their mixers differ:
  linear: every layer linear_attention (φ = elu + 1, --heads heads, head_dim d_model / heads);
  based:  the Based authors' pattern short_conv, taylor_linear_attention (feature_dim 16),
          sliding_window_attention (--window tokens, itself included), short_conv, … cut to
          --n-layers.
Training draws a fresh batch from the generator every step (seed --seed); the test set is drawn
once from seed --seed + 1. Accuracy is over the test set's query positions, also split by how
far back the query's key lies: within the sliding window (distance < --window) or beyond it,
where only the linear-attention state can hold the pair. Deterministic for a given seed, torch
build and thread count.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import mqar, training  # noqa: E402
from linserve_ref.config import state_floats_per_slot  # noqa: E402
from linserve_ref.model import LinearTransformer  # noqa: E402

MODELS = ("linear", "based")


def layers(kind, args):
    """The layer list of model `kind`."""
    d, h = args.d_model, args.heads
    norm = {"kind": "rms_norm", "eps": 1e-5}
    mlp = {"kind": "gated_mlp", "d_ff": 2 * d, "activation": "silu", "bias": False}
    if kind == "linear":
        mixers = [{"kind": "linear_attention", "n_heads": h, "head_dim": d // h,
                   "feature_map": "elu_plus_one", "bias": False}] * args.n_layers
    else:
        pattern = [{"kind": "short_conv", "d_inner": 2 * d, "kernel_size": 3},
                   {"kind": "taylor_linear_attention", "n_heads": h, "feature_dim": 16,
                    "head_dim": d // h},
                   {"kind": "sliding_window_attention", "n_heads": h, "head_dim": d // h,
                    "window": args.window}]
        mixers = [pattern[i] if i < 3 else pattern[0] for i in range(args.n_layers)]
    return [{"mixer": m, "norm": norm, "mlp": mlp} for m in mixers]


def model_config(kind, args):
    # The ids are the task's own and no tokenizer reads them; "sentencepiece" is named only
    # because "byte" would ask for vocab_size >= 256. The model does not depend on it.
    return {"vocab_size": args.vocab, "d_model": args.d_model, "n_layers": args.n_layers,
            "norm": "pre", "position": "none", "tokenizer": "sentencepiece",
            "layers": layers(kind, args), "final_norm": {"kind": "rms_norm", "eps": 1e-5}}


def evaluate(model, inputs, targets, args):
    """(correct [Q] bool, key distances [Q]) over the test set."""
    hits = []
    with torch.no_grad():
        for i in range(0, inputs.shape[0], args.batch_size):
            logits, _ = model(inputs[i:i + args.batch_size], chunk_size=args.chunk_size)
            hits.append(mqar.correct(logits, targets[i:i + args.batch_size]))
    return torch.cat(hits), mqar.key_distances(inputs, targets, args.kv_pairs)


def train_one(kind, args, test_inputs, test_targets):
    torch.manual_seed(args.seed)
    cfg = model_config(kind, args)
    model = LinearTransformer(cfg)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
    data = torch.Generator().manual_seed(args.seed)
    began = time.time()
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = training.learning_rate(step, args.steps, args.warmup, args.lr, 0.1)
        inputs, targets = mqar.generate(args.batch_size, args.seq_len, args.kv_pairs,
                                        args.vocab, data, args.power_a)
        logits, _ = model(inputs, chunk_size=args.chunk_size)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=mqar.IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            print(f"{kind} step {step + 1}/{args.steps} | loss {loss.item():.4f} | "
                  f"{time.time() - began:.0f} s", flush=True)
    model.eval()
    hits, distance = evaluate(model, test_inputs, test_targets, args)
    within = distance < args.window
    row = {"model": kind, "parameters": model.num_parameters(),
           "state_floats": state_floats_per_slot(cfg), "steps": args.steps,
           "train_seconds": round(time.time() - began, 1), "final_loss": loss.item(),
           "accuracy": hits.float().mean().item(), "queries": hits.numel(),
           "accuracy_within_window": _mean(hits[within]), "queries_within_window":
           int(within.sum()), "accuracy_beyond_window": _mean(hits[~within]),
           "queries_beyond_window": int((~within).sum()), "layers": [
               layer["mixer"]["kind"] for layer in cfg["layers"]]}
    print(f"{kind}: test accuracy {row['accuracy']:.4f} over {row['queries']} queries "
          f"(key within {args.window} tokens: {row['accuracy_within_window']:.4f} over "
          f"{row['queries_within_window']}; beyond: {row['accuracy_beyond_window']:.4f} over "
          f"{row['queries_beyond_window']}); {row['parameters']:,} parameters, "
          f"{row['state_floats']:,} state floats", flush=True)
    return row


def _mean(hits):
    return hits.float().mean().item() if hits.numel() else math.nan


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--vocab", type=int, default=256, help="token ids (keys below V/2)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--kv-pairs", type=int, default=4)
    p.add_argument("--power-a", type=float, default=0.01, help="query gap power law")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--window", type=int, default=9,
                   help="sliding_window_attention's window (based), itself included")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--test-examples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    for name in ("vocab", "seq_len", "kv_pairs", "d_model", "n_layers", "heads", "window",
                 "steps", "batch_size", "warmup", "chunk_size", "test_examples", "threads",
                 "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    test_inputs, test_targets = mqar.generate(
        args.test_examples, args.seq_len, args.kv_pairs, args.vocab,
        torch.Generator().manual_seed(args.seed + 1), args.power_a)
    rows = [train_one(kind, args, test_inputs, test_targets) for kind in args.models]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if k != "json"},
                       "results": rows}, f, indent=2)
            f.write("\n")
    return rows


if __name__ == "__main__":
    main()
