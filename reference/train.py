#!/usr/bin/env python3
"""Trains a linear transformer on a text file and writes a linserve model directory.

    train.py --out DIR [--tokenizer tokenizer.model] [--corpus data/tinyshakespeare.txt] ...

The corpus is split as linserve_ref/corpus.py documents (first 90% of characters train). The
model is trained with the chunked parallel forward on random windows (see BatchSampler), AdamW
(weight decay on matrices only), linear warm-up then cosine decay, gradient-norm clipping.
Every --eval-every steps the validation loss (nats/char on --eval-chars characters of the
validation split) is printed. --checkpoint is written every --checkpoint-every steps and at the
end; --resume continues from it and gives the same result as an uninterrupted run;
--export-checkpoint writes the model directory from it as it stands (a run cut short). With the
same seed, device and thread count a run is deterministic. Without --tokenizer the byte tokenizer
is used (ids 256 BOS, 257 EOS).

The model is n_layers identical linear-attention blocks (--n-layers, --n-heads, --d-ff,
--feature-map, --activation), or, with --layers-config FILE, the layer list of FILE: a JSON
object {"layers": [...], "final_norm": {...}} in config.json's "layers" schema
(docs/model-format.md), e.g. reference/layers/shakespeare_based.json; the single-block flags
then do not apply and are refused.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from linserve_ref import corpus, export, training  # noqa: E402
from linserve_ref.model import LinearTransformer  # noqa: E402
from linserve_ref.config import BYTE_VOCAB  # noqa: E402
from linserve_ref.text_tokenizer import ByteTokenizer, SentencePieceTokenizer  # noqa: E402

# Arguments that must match to resume a checkpoint (the rest, e.g. logging, may change).
# "layers" is the --layers-config file's contents (where the file lies does not matter).
_RESUME_KEYS = ("corpus", "tokenizer", "d_model", "n_layers", "n_heads", "d_ff", "position",
                "feature_map", "activation", "layers", "context", "batch_size", "steps", "lr",
                "min_lr_ratio", "warmup", "weight_decay", "grad_clip", "seed", "bos_fraction",
                "max_start_position", "zero_start_fraction", "chunk_size", "betas")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--corpus", default=corpus.DEFAULT_CORPUS, help="UTF-8 text file")
    p.add_argument("--tokenizer", default=None,
                   help="SentencePiece .model (ids 1 BOS, 2 EOS); default: byte tokenizer")
    p.add_argument("--d-model", type=int, default=256)
    # The single-block flags default to None so that --layers-config can tell them apart from
    # their defaults (_SINGLE_BLOCK_DEFAULTS, filled in after parsing).
    p.add_argument("--n-layers", type=int, default=None, help="(default: 6)")
    p.add_argument("--n-heads", type=int, default=None, help="(default: 4)")
    p.add_argument("--d-ff", type=int, default=None, help="(default: 1024)")
    p.add_argument("--position", default="none", choices=("sinusoidal", "none"))
    p.add_argument("--feature-map", default=None, choices=("elu_plus_one", "relu", "exp"),
                   help="(default: elu_plus_one)")
    p.add_argument("--activation", default=None, choices=("gelu", "gelu_tanh", "relu"),
                   help="(default: gelu)")
    p.add_argument("--layers-config", default=None,
                   help='JSON file {"layers": [...], "final_norm": {...}}: the layer list '
                        '(default: none: --n-layers identical linear-attention blocks)')
    p.add_argument("--context", type=int, default=256, help="tokens per training window")
    p.add_argument("--batch-size", type=int, default=16, help="windows per step")
    p.add_argument("--chunk-size", type=int, default=64, help="chunk of the parallel forward")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="final lr / peak lr")
    p.add_argument("--warmup", type=int, default=40, help="warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.99))
    p.add_argument("--grad-clip", type=float, default=1.0, help="max global gradient norm")
    p.add_argument("--bos-fraction", type=float, default=0.5,
                   help="fraction of windows whose first input is BOS")
    p.add_argument("--max-start-position", type=int, default=1 << 20,
                   help="windows start at a position index drawn from [0, this)")
    p.add_argument("--zero-start-fraction", type=float, default=0.25,
                   help="fraction of windows that start at position 0")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-chars", type=int, default=20000,
                   help="validation characters per periodic evaluation (0: the whole split)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--checkpoint", default=None, help="checkpoint file (default: none)")
    p.add_argument("--checkpoint-every", type=int, default=25)
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop (after checkpointing) once this step is reached")
    p.add_argument("--export-checkpoint", action="store_true",
                   help="write --out from --checkpoint's model at the step it holds, without "
                        "training (a run cut short); the other arguments must match it")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--weights-dtype", default="float32", choices=tuple(export.WEIGHT_DTYPES))
    args = p.parse_args(argv)
    args.layers = None
    if args.layers_config:
        given = [k for k in _SINGLE_BLOCK_DEFAULTS if getattr(args, k) is not None]
        if given:
            p.error(f"--layers-config replaces {', '.join(_flag(k) for k in given)}")
        try:
            args.layers = read_layers_config(args.layers_config)
        except (OSError, ValueError) as e:
            p.error(f"--layers-config {args.layers_config}: {e}")
    else:
        for k, v in _SINGLE_BLOCK_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "context", "batch_size", "chunk_size",
                 "steps", "warmup", "eval_every", "log_every", "checkpoint_every", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"{_flag(name)} must be >= 1")
    if args.n_heads is not None and args.d_model % args.n_heads:
        p.error(f"--d-model {args.d_model} is not a multiple of --n-heads {args.n_heads}")
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint")
    if args.export_checkpoint and not (args.checkpoint and os.path.exists(args.checkpoint)):
        p.error("--export-checkpoint needs an existing --checkpoint")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    args.betas = tuple(args.betas)
    return args


_SINGLE_BLOCK_DEFAULTS = {"n_layers": 6, "n_heads": 4, "d_ff": 1024,
                         "feature_map": "elu_plus_one", "activation": "gelu"}


def _flag(name):
    return "--" + name.replace("_", "-")


def read_layers_config(path):
    """The layer list of a --layers-config file: {"layers": [...]} (+ "final_norm")."""
    with open(path, encoding="utf-8") as f:
        layers = json.load(f)
    if not isinstance(layers, dict) or "layers" not in layers:
        raise ValueError('must be a JSON object with "layers" (and optionally "final_norm")')
    unknown = sorted(set(layers) - {"layers", "final_norm"})
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; allowed: layers, final_norm")
    return layers


def model_config(args, vocab_size, tokenizer_kind, bos, eos):
    if args.layers is not None:
        return dict(vocab_size=vocab_size, d_model=args.d_model,
                    n_layers=len(args.layers["layers"]), norm="pre", position=args.position,
                    max_position=0, tie_embeddings=True, tokenizer=tokenizer_kind,
                    bos_token_id=bos, eos_token_id=eos, **args.layers)
    return dict(vocab_size=vocab_size, d_model=args.d_model, n_layers=args.n_layers,
                n_heads=args.n_heads, head_dim=args.d_model // args.n_heads, d_ff=args.d_ff,
                norm="pre", activation=args.activation, feature_map=args.feature_map,
                position=args.position, max_position=0, bias=True, tie_embeddings=True,
                attention_eps=1e-6, layer_norm_eps=1e-5, tokenizer=tokenizer_kind,
                bos_token_id=bos, eos_token_id=eos)


def make_optimizer(model, args):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=args.betas)


def save_checkpoint(path, model, optimizer, sampler, step, tokens_seen, elapsed, args):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "data_rng": sampler.generator.get_state(), "step": step,
                "tokens_seen": tokens_seen, "elapsed": elapsed, "args": vars(args)}, tmp)
    os.replace(tmp, path)


def format_duration(seconds):
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    text = corpus.read_text(args.corpus)
    train_text, val_text = corpus.split(text)
    if args.tokenizer:
        tokenizer = SentencePieceTokenizer(args.tokenizer)
        kind, vocab = "sentencepiece", tokenizer.vocab_size
        bos, eos = tokenizer.processor.bos_id(), tokenizer.processor.eos_id()
    else:
        kind, vocab, bos, eos = "byte", BYTE_VOCAB + 2, BYTE_VOCAB, BYTE_VOCAB + 1
        tokenizer = ByteTokenizer(vocab)
    cfg = model_config(args, vocab, kind, bos, eos)
    model = LinearTransformer(cfg).to(device)
    optimizer = make_optimizer(model, args)
    train_tokens = torch.tensor(tokenizer.encode(train_text), dtype=torch.int64)
    eval_text = val_text if args.eval_chars == 0 else val_text[:args.eval_chars]
    sampler = training.BatchSampler(
        train_tokens, args.context, args.batch_size, torch.Generator().manual_seed(args.seed),
        bos, args.bos_fraction, args.max_start_position if args.position != "none" else 1,
        args.zero_start_fraction)

    step, tokens_seen, elapsed_before = 0, 0, 0.0
    if (args.resume or args.export_checkpoint) and os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location=device)
        changed = [k for k in _RESUME_KEYS if _normal(ckpt["args"].get(k)) != _normal(
            getattr(args, k))]
        if changed:
            raise SystemExit(f"train.py: --resume: {args.checkpoint} was written with different "
                             f"arguments: {', '.join('--' + k.replace('_', '-') for k in changed)}")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        sampler.generator.set_state(ckpt["data_rng"])
        step, tokens_seen, elapsed_before = ckpt["step"], ckpt["tokens_seen"], ckpt["elapsed"]
        print(f"resumed from {args.checkpoint} at step {step}", flush=True)
    if args.export_checkpoint:
        export.save_model_dir(model.cpu(), args.out, dtype=args.weights_dtype,
                              tokenizer_model=args.tokenizer)
        print(f"wrote {args.out} from step {step}/{args.steps}: {tokens_seen:,} tokens seen in "
              f"{format_duration(elapsed_before)}", flush=True)
        return

    print(f"model: {model.num_parameters():,} parameters; corpus: {len(train_text):,} train / "
          f"{len(val_text):,} validation characters, {train_tokens.numel():,} train tokens; "
          f"config {json.dumps(cfg)}", flush=True)
    start = time.time()
    start_step = step
    window_tokens = args.batch_size * args.context
    last_log_time, last_log_step = start, step
    while step < args.steps:
        for group in optimizer.param_groups:
            group["lr"] = training.learning_rate(step, args.steps, args.warmup, args.lr,
                                                 args.min_lr_ratio)
        inputs, targets, positions = sampler.next()
        inputs, targets = inputs.to(device), targets.to(device)
        state = model.init_state(args.batch_size, position=positions.to(device))
        logits, _ = model(inputs, state=state, chunk_size=args.chunk_size)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        step += 1
        tokens_seen += window_tokens

        now = time.time()
        if step % args.log_every == 0 or step == args.steps:
            rate = (step - last_log_step) * window_tokens / max(1e-9, now - last_log_time)
            per_step = (now - start) / (step - start_step)
            print(f"step {step}/{args.steps} | loss {loss.item():.4f} | grad {grad_norm:.2f} | "
                  f"lr {optimizer.param_groups[0]['lr']:.2e} | {rate:,.0f} tok/s | "
                  f"elapsed {format_duration(elapsed_before + now - start)} | "
                  f"left {format_duration(per_step * (args.steps - step))}", flush=True)
            last_log_time, last_log_step = now, step
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            val, _ = training.nats_per_char(model, tokenizer, eval_text, args.context, bos,
                                            chunk_size=args.chunk_size)
            model.train()
            print(f"step {step}: validation {val:.4f} nats/char "
                  f"({len(eval_text):,} characters, context {args.context})", flush=True)
        stopping = args.stop_after is not None and step >= args.stop_after
        if args.checkpoint and (step % args.checkpoint_every == 0 or step == args.steps or
                                stopping):
            save_checkpoint(args.checkpoint, model, optimizer, sampler, step, tokens_seen,
                            elapsed_before + time.time() - start, args)
        if stopping:
            print(f"stopped at step {step} (--stop-after)", flush=True)
            return

    export.save_model_dir(model.cpu(), args.out, dtype=args.weights_dtype,
                          tokenizer_model=args.tokenizer)
    print(f"wrote {args.out}: {tokens_seen:,} tokens seen in "
          f"{format_duration(elapsed_before + time.time() - start)}", flush=True)


def _normal(value):
    return list(value) if isinstance(value, (tuple, list)) else value


if __name__ == "__main__":
    main()
