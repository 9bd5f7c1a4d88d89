"""Merges gpu_bench's and peers.py's JSON (one run, one GPU) into the markdown of
bench/results/gpu.md: every figure against its floor and its peer, and the issue's targets.

usage: report.py --ours gpu_bench.json --peers peers.json [--tests ctest.txt] [--command CMD]
"""

import argparse
import json


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def find(rows, **keys):
    for row in rows:
        if all(row.get(k) == v for k, v in keys.items()):
            return row
    return None


def verdict(ok):
    return "met" if ok else "**missed**"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours", required=True)
    parser.add_argument("--peers", required=True)
    parser.add_argument("--tests", default="")
    parser.add_argument("--command", default="bench/run_gpu.sh")
    args = parser.parse_args()
    with open(args.ours) as f:
        ours = json.load(f)
    with open(args.peers) as f:
        peers = json.load(f)

    out = []
    w = out.append
    w("# GPU results: the CUDA backend on an NVIDIA H200\n")
    w(f"Command: `{args.command}` (one run: our tests, gpu_bench, then the peers, same GPU).\n")
    w(f"Device: {ours['device']}; peers: torch {peers.get('torch')}, transformers "
      f"{peers.get('transformers', 'n/a')}.\n")
    w(f"Model: 125M shape (d_model 768, 12 layers, 12 heads × 64, d_ff 3072, vocab 50257, tied), "
      f"random weights in {ours['precision']} ({fmt(ours['weight_bytes'] / 2**20, 1)} MiB), fp32 "
      f"state ({fmt(ours['slot_bytes'] / 2**20, 2)} MiB per session).\n")
    bw = ours["bandwidth_bytes_per_s"]
    w("## Floors, measured in the same run\n")
    w("| measure | value |\n|---|---|")
    w(f"| HBM: device-to-device copy, read + write | {fmt(bw / 1e9)} GB/s |")
    w(f"| bf16 GEMM 8192³ through cuBLASLt | {fmt(ours['gemm_flops_per_s'] / 1e12)} TFLOP/s |\n")
    w("HBM floor of a decode step = (all weights once + 2 × state bytes × batch) / bandwidth.\n")

    if args.tests:
        with open(args.tests) as f:
            lines = [l.rstrip() for l in f if l.strip()]
        summary = [l for l in lines if "tests passed" in l or "Test #" in l or "Failed" in l]
        w("## Tests (ctest -L gpu)\n")
        w("```")
        out.extend(summary[-40:])
        w("```\n")

    reference = peers.get("reference_step", [])
    w("## Decode tokens/s (greedy, sampled on the device)\n")
    w("| batch | tokens/s | step ms | HBM floor ms | of floor | PyTorch reference step "
      "tokens/s | ours / reference |")
    w("|---|---|---|---|---|---|---|")
    for row in ours["decode"]:
        ref = find(reference, batch=row["batch"])
        ref_cell = fmt(ref["tokens_per_s"]) if ref else "n/a"
        ratio_cell = f"{row['tokens_per_s'] / ref['tokens_per_s']:.1f}×" if ref else "n/a"
        w(f"| {row['batch']} | {fmt(row['tokens_per_s'])} | {row['step_ms_mean']:.3f} | "
          f"{row['floor_ms']:.3f} | {100 * row['fraction_of_floor']:.0f}% | {ref_cell} | "
          f"{ratio_cell} |")
    extra = ([ours.get("decode_no_graphs"), ours.get("decode_sampling")] +
             ours.get("decode_serialized", []))
    w("")
    w("| variant | batch | tokens/s | step ms | of floor |\n|---|---|---|---|---|")
    for row in extra:
        if row:
            w(f"| {row['label']} | {row['batch']} | {fmt(row['tokens_per_s'])} | "
              f"{row['step_ms_mean']:.3f} | {100 * row['fraction_of_floor']:.0f}% |")
    w("")

    kv = peers.get("kv_cache", [])
    if kv:
        w("## Softmax KV-cache peer (HF GPT-2 of the same shape, bf16, SDPA)\n")
        w("| context | batch | KV-cache tokens/s | ours tokens/s (same batch, any context) | "
          "ours / KV cache |")
        w("|---|---|---|---|---|")
        for row in kv:
            mine = find(ours["decode"], batch=row["batch"])
            if "error" in row:
                w(f"| {row['context']} | {row['batch']} | {row['error']} | | |")
                continue
            ratio = mine["tokens_per_s"] / row["tokens_per_s"] if mine else None
            w(f"| {row['context']} | {row['batch']} | {fmt(row['tokens_per_s'])} | "
              f"{fmt(mine['tokens_per_s']) if mine else 'not measured'} | "
              f"{f'{ratio:.1f}×' if ratio else 'n/a'} |")
        w("")
    elif "kv_cache_error" in peers:
        w(f"KV-cache peer not measured: {peers['kv_cache_error']}\n")

    w("## Prefill (one session, last-token logits)\n")
    w("| tokens | ms | tokens/s | of FLOP floor | of HBM floor |\n|---|---|---|---|---|")
    for row in ours["prefill"]:
        w(f"| {row['tokens']} | {row['seconds'] * 1e3:.1f} | {fmt(row['tokens_per_s'])} | "
          f"{100 * row['fraction_of_flop_floor']:.0f}% | "
          f"{100 * row['fraction_of_hbm_floor']:.1f}% |")
    w("")
    w("## Per-token latency by position (batch 1)\n")
    w("| position | ms | HBM floor ms | of floor |\n|---|---|---|---|")
    for row in ours["latency"]:
        w(f"| {row['position']} | {row['latency_ms_median']:.3f} | {row['floor_ms']:.3f} | "
          f"{100 * row['fraction_of_floor']:.0f}% |")
    w("")

    w("## Targets (issue 5)\n")
    w("| target | measured | |\n|---|---|---|")
    b256 = find(ours["decode"], batch=256)
    if b256:
        w(f"| batch 256 ≥ 60% of the HBM floor | {100 * b256['fraction_of_floor']:.0f}% | "
          f"{verdict(b256['fraction_of_floor'] >= 0.6)} |")
    b1 = find(ours["decode"], batch=1)
    if b1:
        times = b1["step_ms_mean"] / b1["floor_ms"]
        w(f"| batch 1 ≤ 3× the HBM floor | {times:.2f}× the floor | {verdict(times <= 3.0)} |")
    b64 = find(ours["decode"], batch=64)
    ref64 = find(reference, batch=64)
    if b64 and ref64:
        ratio = b64["tokens_per_s"] / ref64["tokens_per_s"]
        w(f"| ≥ 10× the PyTorch recurrent step at batch 64 | {ratio:.1f}× | "
          f"{verdict(ratio >= 10)} |")
    for row in kv:
        if row.get("context") == 8192 and "tokens_per_s" in row:
            mine = find(ours["decode"], batch=row["batch"])
            if mine:
                ratio = mine["tokens_per_s"] / row["tokens_per_s"]
                w(f"| ≥ 10× the softmax KV cache at 8k context, batch {row['batch']} | "
                  f"{ratio:.1f}× | {verdict(ratio >= 10)} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
