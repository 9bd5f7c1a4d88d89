#!/usr/bin/env python3
"""The PyTorch peer of bench/cpu_bench: the reference model (reference/linserve_ref) on the
same 125M shape, fp32, torch with the system BLAS (OpenBLAS on Debian), all cores.

    peer_torch.py [--threads N] > peer.json

Prints one JSON object whose keys cpu_bench --peer_json reads:
    decode_tps_{1,8,32,128}      LinearTransformer.step over a batch, tokens/s (median step)
    prefill_chunked_tps          the layers' chunked forward (chunk 64) over 2048 tokens, then
                                 the head on the last position only, as cpu_bench's prefill
    prefill_token_by_token_tps   the layers' recurrent step, one token at a time (no head)
    latency_ms_{100,1000,10000}  step at batch 1 from a state at that position (median of 9,
                                 the three positions taken in turn)
    torch                        a line describing the peer
The cost of a step does not depend on the state's values, so the latency states are zero
states with their position set, rather than states prefilled for 10 000 tokens.
"""

import argparse
import json
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
PREFILL_TOKENS = 2048
TOKEN_BY_TOKEN_TOKENS = 64  # a steady per-token rate; 2048 would add minutes, not information


def median_step(fn, steps, warmup=2):
    times = []
    for i in range(steps + warmup):
        t = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def layers_forward(model, ids, state, chunk):
    """forward() without the all-positions head: embed, layers, head on the last row."""
    positions = state.position.unsqueeze(1) + torch.arange(ids.shape[1])
    x = model._embed(ids, positions)
    for layer, mixer_state in zip(model.layers, state.layers):
        x, _ = layer(x, mixer_state, positions, chunk)
    return model._logits(x[:, -1])


def layers_step(model, token, state):
    """step() without the head: the recurrent form of prefill, one token."""
    x = model._embed(token, state.position)
    for i, layer in enumerate(model.layers):
        x, state.layers[i] = layer.step(x, state.layers[i], state.position)
    state.position = state.position + 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch intra-op threads (default: every core)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = LinearTransformer(CONFIG).eval()
    gen = torch.Generator().manual_seed(2)
    out = {"torch": f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
                    f"linserve_ref.LinearTransformer fp32"}

    with torch.inference_mode():
        for batch, steps in ((1, 12), (8, 8), (32, 5), (128, 3)):
            state = model.init_state(batch, position=16)
            holder = {"state": state}

            def step():
                ids = torch.randint(0, 32000, (batch,), generator=gen)
                _, holder["state"] = model.step(ids, holder["state"])

            out[f"decode_tps_{batch}"] = batch / median_step(step, steps)
            print(f"decode batch {batch}: {out[f'decode_tps_{batch}']:.1f} tokens/s",
                  file=sys.stderr)

        ids = torch.randint(0, 32000, (1, PREFILL_TOKENS), generator=gen)
        t = time.perf_counter()
        layers_forward(model, ids, model.init_state(1), 64)
        out["prefill_chunked_tps"] = PREFILL_TOKENS / (time.perf_counter() - t)

        state = model.init_state(1)
        ids = torch.randint(0, 32000, (TOKEN_BY_TOKEN_TOKENS, 1), generator=gen)
        t = time.perf_counter()
        for i in range(TOKEN_BY_TOKEN_TOKENS):
            layers_step(model, ids[i], state)
        out["prefill_token_by_token_tps"] = TOKEN_BY_TOKEN_TOKENS / (time.perf_counter() - t)
        print(f"prefill: chunked {out['prefill_chunked_tps']:.1f}, token by token "
              f"{out['prefill_token_by_token_tps']:.1f} tokens/s", file=sys.stderr)

        # Positions in turn, as cpu_bench does, so that drift hits all three alike.
        positions = (100, 1000, 10000)
        states = {p: model.init_state(1, position=p) for p in positions}
        times = {p: [] for p in positions}
        for round_ in range(11):
            for p in positions:
                ids = torch.randint(0, 32000, (1,), generator=gen)
                t = time.perf_counter()
                _, states[p] = model.step(ids, states[p])
                if round_ >= 2:
                    times[p].append(time.perf_counter() - t)
        for p in positions:
            out[f"latency_ms_{p}"] = 1e3 * statistics.median(times[p])

    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
