#!/usr/bin/env python3
"""The softmax peer of the context sweep (bench/run_scaling.sh): a softmax-attention decoder of
linserve's 125M shape with a KV cache, in PyTorch on the CPU, measured in the same run and with
the same threads as cpu_bench --contexts.

    peer_softmax.py --contexts 128,256,... [--batches 1,32] [--threads N] [--kv_budget_gib G]

The model is the PyTorch reference's (reference/linserve_ref) of cpu_bench's shape — d_model
768, 12 layers, 12 heads × 64, d_ff 3072, vocab 32000, tied head, sinusoidal positions, fp32 —
with each layer's linear attention replaced by softmax attention over a KV cache: the same
weights, the same work per token outside attention. The cache is a static one (per layer, K and
V of [batch, heads, context, head_dim], fp32) filled with random values: the cost of attending
over a cache does not depend on what it holds, and filling it this way spares a prefill of
32 × 64k tokens. Every timed step is the step at position context - 1: it writes that position's
k and v and attends over all `context` of them, so the cache measured is exactly the one of the
context.

For every (batch, context) in increasing context order: the cache's bytes, the growth of this
process's resident memory when it was allocated and filled (measured, /proc/self/statm), and the
median decode step. glibc's mmap threshold is pinned at 64 KiB first, so that every tensor of a
cache is mapped when allocated and unmapped when freed: otherwise a cache would reuse memory an
earlier one left resident and its growth would read low. A cache beyond --kv_budget_gib is not
allocated: that point is recorded as out of memory and the batch's sweep stops there (larger
contexts need more). The budget exists because the machine is shared: allocating until the
kernel refuses would starve, or get the OOM killer to end, other people's processes.

Prints one JSON object on stdout: {"torch", "threads", "kv_budget_bytes", "kv_bytes_per_token",
"points": [{"batch", "context", "kv_bytes", "rss_growth_bytes", "step_ms", "steps"} or
{"batch", "context", "kv_bytes", "out_of_memory": true}]}.
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))

from linserve_ref.model import LinearTransformer  # noqa: E402

CONFIG = dict(vocab_size=32000, d_model=768, n_layers=12, n_heads=12, head_dim=64, d_ff=3072,
              norm="pre", activation="gelu", feature_map="elu_plus_one", position="sinusoidal",
              bias=True, tie_embeddings=True)
WARMUP_STEPS = 2
M_MMAP_THRESHOLD = -3  # mallopt's parameter number, glibc's malloc.h


def ints(text):
    return [int(x) for x in text.split(",") if x]


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def steps_for(context, batch):
    """Fewer timed steps where a step reads gigabytes; always at least 3."""
    return max(3, min(16, (1 << 22) // (context * batch)))


def kv_bytes(batch, context):
    c = CONFIG
    return 2 * c["n_layers"] * batch * c["n_heads"] * context * c["head_dim"] * 4


class KvCache:
    """Per layer K and V, [B, H, context, Dh], filled with random values."""

    def __init__(self, batch, context):
        c = CONFIG
        shape = (batch, c["n_heads"], context, c["head_dim"])
        self.k, self.v = [], []
        for _ in range(c["n_layers"]):
            for cache in (self.k, self.v):
                t = torch.empty(shape)
                t.uniform_(-1.0, 1.0)
                cache.append(t)
        self.context = context


def softmax_step(model, ids, cache):
    """ids [B] -> logits [B, V]: the step at position context - 1 (writes its k and v there)."""
    c = CONFIG
    b, h, dh = ids.shape[0], c["n_heads"], c["head_dim"]
    t = cache.context - 1
    x = model._embed(ids, torch.full((b,), t, dtype=torch.int64))
    for i, layer in enumerate(model.layers):
        u = layer.ln1(x)
        attn = layer.attn
        q = attn.q_proj(u).view(b, h, 1, dh)
        cache.k[i][:, :, t] = attn.k_proj(u).view(b, h, dh)
        cache.v[i][:, :, t] = attn.v_proj(u).view(b, h, dh)
        keys, values = cache.k[i][:, :, :t + 1], cache.v[i][:, :, :t + 1]
        scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(dh)
        o = torch.matmul(torch.softmax(scores, dim=-1), values).reshape(b, h * dh)
        x = x + attn.o_proj(o)
        x = x + layer.ffn(layer.ln2(x))
    return model._logits(x)


def measure(model, batch, context, gen):
    steps = steps_for(context, batch)
    before = rss_bytes()
    cache = KvCache(batch, context)
    growth = rss_bytes() - before
    times = []
    ids = torch.randint(0, CONFIG["vocab_size"], (batch,), generator=gen)
    for i in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        ids = softmax_step(model, ids, cache).argmax(dim=-1)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    return dict(batch=batch, context=context, kv_bytes=kv_bytes(batch, context),
                rss_growth_bytes=growth, step_ms=1e3 * statistics.median(times), steps=steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=ints, required=True, help="comma-separated")
    parser.add_argument("--batches", type=ints, default=[1, 32], help="comma-separated")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch intra-op threads (default: every core)")
    parser.add_argument("--kv_budget_gib", type=float, default=0,
                        help="largest KV cache allocated, GiB; 0: half of MemAvailable at start")
    args = parser.parse_args()
    if ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 64 * 1024) != 1:
        sys.exit("peer_softmax.py: mallopt(M_MMAP_THRESHOLD) failed")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    budget = (args.kv_budget_gib * 2**30 if args.kv_budget_gib > 0 else available_bytes() / 2)
    model = LinearTransformer(CONFIG).eval()
    gen = torch.Generator().manual_seed(2)
    out = dict(torch=f"torch {torch.__version__}, {torch.get_num_threads()} threads, softmax "
                     f"attention over a static fp32 KV cache, linserve_ref weights fp32",
               threads=torch.get_num_threads(), kv_budget_bytes=int(budget),
               kv_bytes_per_token=kv_bytes(1, 1), points=[])
    with torch.inference_mode():
        for batch in args.batches:
            for context in sorted(args.contexts):
                needed = kv_bytes(batch, context)
                if needed > budget:
                    out["points"].append(dict(batch=batch, context=context, kv_bytes=needed,
                                              out_of_memory=True))
                    print(f"softmax batch {batch} context {context}: KV cache of "
                          f"{needed / 2**30:.1f} GiB > budget {budget / 2**30:.1f} GiB",
                          file=sys.stderr)
                    break
                point = measure(model, batch, context, gen)
                out["points"].append(point)
                print(f"softmax batch {batch} context {context}: {point['step_ms']:.2f} ms/step",
                      file=sys.stderr)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
