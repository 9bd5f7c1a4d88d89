"""Peers of bench/gpu/gpu_bench, measured on the same GPU in the same run
(docs/architecture.md §7).

1. The PyTorch reference's recurrent step (reference/linserve_ref, LinearTransformer.step):
   the same 125M shape and semantics as our backend, bf16 weights, fp32 state, greedy, one
   `step` call per token for the whole batch.
2. A softmax-attention transformer of the same shape with a KV cache: Hugging Face
   transformers' GPT-2 (d_model 768, 12 layers, 12 heads, d_ff 3072, vocab 50257) with random
   weights in bf16, its default (SDPA) attention. The prompt of `context` tokens is prefilled
   once; decode tokens/s is then timed over greedy steps that each feed one token with the
   cache, which is the loop `generate(use_cache=True)` runs (written out so that the prefill's
   logits are computed for the last position only and the prefill is not in the timing).

Prints one JSON object (also written to --json_out). Needs torch with CUDA and transformers.
"""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "reference"))

SHAPE = dict(vocab_size=50257, d_model=768, n_layers=12, n_heads=12, head_dim=64, d_ff=3072)


def ints(text):
    return [int(x) for x in text.split(",") if x]


def timed_steps(step, steps, warmup):
    """Median and mean seconds of `step()` calls, synchronised around each."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2], sum(times) / len(times)


def bench_reference(batches, steps):
    from linserve_ref.model import LinearTransformer

    config = dict(SHAPE, norm="pre", activation="gelu", feature_map="elu_plus_one",
                  position="sinusoidal", bias=True, tie_embeddings=True)
    torch.manual_seed(0)
    model = LinearTransformer(config).to("cuda", dtype=torch.bfloat16).eval()
    results = []
    for batch in batches:
        state = model.init_state(batch)
        ids = torch.randint(0, SHAPE["vocab_size"], (batch,), device="cuda")
        box = {"ids": ids, "state": state}

        def step():
            with torch.inference_mode():
                logits, box["state"] = model.step(box["ids"], box["state"])
                box["ids"] = logits.argmax(dim=-1)

        median, mean = timed_steps(step, steps, warmup=3)
        results.append(dict(batch=batch, step_ms_median=median * 1e3, step_ms_mean=mean * 1e3,
                            tokens_per_s=batch / mean))
        print(f"reference step  batch {batch:5d}: {median * 1e3:8.3f} ms/step, "
              f"{batch / mean:10.0f} tokens/s", file=sys.stderr, flush=True)
        del state, box
        torch.cuda.empty_cache()
    return results


def prefill(model, context, batch):
    """The KV cache of `batch` random prompts of `context` tokens and each one's next token.

    One prompt is prefilled and its cache repeated along the batch when the cache class can
    (decode cost does not depend on the cached values), which keeps a 64 × 32k prefill from
    needing the memory and minutes of a full-batch one.
    """
    ids = torch.randint(0, SHAPE["vocab_size"], (1, context), device="cuda")
    out = model.transformer(input_ids=ids, use_cache=True)
    past = out.past_key_values
    next_ids = model.lm_head(out.last_hidden_state[:, -1:]).argmax(dim=-1)
    del out
    if batch > 1:
        if hasattr(past, "batch_repeat_interleave"):
            past.batch_repeat_interleave(batch)
        else:
            ids = torch.randint(0, SHAPE["vocab_size"], (batch, context), device="cuda")
            out = model.transformer(input_ids=ids, use_cache=True)
            past = out.past_key_values
            del out
        next_ids = next_ids.expand(batch, 1).contiguous()
    return {"past": past, "ids": next_ids}


def bench_kv_cache(contexts, batches, steps):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=SHAPE["vocab_size"], n_positions=max(contexts) + steps + 16,
                        n_embd=SHAPE["d_model"], n_layer=SHAPE["n_layers"],
                        n_head=SHAPE["n_heads"], n_inner=SHAPE["d_ff"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to("cuda", dtype=torch.bfloat16).eval()
    results = []
    for context in contexts:
        for batch in batches:
            entry = dict(context=context, batch=batch)
            try:
                with torch.inference_mode():
                    box = prefill(model, context, batch)

                def step():
                    with torch.inference_mode():
                        out = model(input_ids=box["ids"], past_key_values=box["past"],
                                    use_cache=True)
                        box["past"] = out.past_key_values
                        box["ids"] = out.logits[:, -1:].argmax(dim=-1)

                median, mean = timed_steps(step, steps, warmup=2)
                entry.update(step_ms_median=median * 1e3, step_ms_mean=mean * 1e3,
                             tokens_per_s=batch / mean)
                print(f"kv-cache ctx {context:6d} batch {batch:5d}: {median * 1e3:8.3f} ms/step,"
                      f" {batch / mean:10.0f} tokens/s", file=sys.stderr, flush=True)
                del box
            except torch.cuda.OutOfMemoryError as e:
                entry["error"] = f"out of memory: {e}"[:300]
                print(f"kv-cache ctx {context} batch {batch}: out of memory", file=sys.stderr)
            results.append(entry)
            torch.cuda.empty_cache()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference_batches", default="1,8,64,256")
    parser.add_argument("--kv_contexts", default="1024,8192,32768")
    parser.add_argument("--kv_batches", default="1,64")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json_out", default="")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("peers.py: torch sees no CUDA device")
    result = dict(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        reference_step=bench_reference(ints(args.reference_batches), args.steps),
    )
    try:
        import transformers
        result["transformers"] = transformers.__version__
        result["kv_cache"] = bench_kv_cache(ints(args.kv_contexts), ints(args.kv_batches),
                                            args.steps)
    except ImportError as e:
        result["kv_cache_error"] = f"transformers is not importable: {e}"
    text = json.dumps(result, indent=2)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
