#!/usr/bin/env python3
"""Markdown tables of a benchmark's JSON (bench/results/*.json): the tables that the results
files quote and that bench/report/plots.py draws, from the same figures (figures.py).

    tables.py FILE.json      prints the markdown of a "scaling" or "served" document
"""

import sys

import figures


def ms(x):
    return f"{x:.2f}"


def count(x):
    return f"{x:,}"


def ratio(x):
    return f"{x:.2f}×"


def scaling(doc):
    lines = [f"Measured on {figures.caption(doc)}.",
             f"Threads: linserve {doc['linserve']['threads']}, softmax peer "
             f"{doc['softmax']['threads']} ({doc['softmax']['torch']}); the peer's KV caches are "
             f"allocated up to a budget of {doc['softmax']['kv_budget_bytes'] / figures.GIB:.1f} "
             f"GiB.", "",
             "### Decode step against context (ms per step: each session of the batch gets one "
             "token per step)", ""]
    header, rule = "| context |", "|---:|"
    for b in figures.batches(doc):
        header += f" linserve, batch {b} | softmax, batch {b} | softmax / linserve |"
        rule += "---:|---:|---:|"
    lines += [header, rule]
    for context in figures.contexts(doc):
        row = f"| {context} |"
        for b in figures.batches(doc):
            ours = dict(figures.decode_series(doc, "linserve", b)).get(context)
            peer = dict(figures.decode_series(doc, "softmax", b)).get(context)
            oom = figures.out_of_memory(doc, b)
            row += f" {ms(ours) if ours is not None else '–'} |"
            if peer is not None:
                row += f" {ms(peer)} |"
            elif oom and oom[0] == context:
                row += f" out of memory: needs {oom[1] / figures.GIB:.1f} GiB |"
            else:
                row += " – |"
            row += f" {ratio(peer / ours)} |" if peer is not None and ours is not None else " – |"
        lines.append(row)

    state = figures.state_bytes(doc)
    sizes = figures.MEMORY_SIZES_GIB
    lines += ["", "### Bytes per session against context (one session, batch 1)", "",
              "| context | linserve state, as the server reports it | softmax KV cache, measured "
              "| KV cache / state | " +
              " | ".join(f"sessions in {g} GiB: linserve / KV cache" for g in sizes) + " |",
              "|---:|---:|---:|---:|" + "---:|" * len(sizes)]
    for context, kv in figures.kv_growth(doc):
        fits = " | ".join(f"{count(figures.sessions_that_fit(state, g))} / "
                          f"{count(figures.sessions_that_fit(kv, g))}" for g in sizes)
        lines.append(f"| {context} | {count(state)} | {count(kv)} | {ratio(kv / state)} | "
                     f"{fits} |")
    return "\n".join(lines)


def served(doc):
    s = doc["settings"]
    lines = [f"Measured on {figures.caption(doc)}.",
             f"Backend threads {s['backend_threads']}; per concurrency {s['rounds']} rounds of "
             f"engine alone then server, each {s['seconds']} s measured after "
             f"{s['warmup_seconds']} s warm-up; requests of {s['prompt_tokens']} prompt + "
             f"{s['output_tokens']} output tokens, temperature 1, closed loop. Medians over the "
             f"rounds; latencies from the median round of the server.", "",
             "| concurrency | engine alone tok/s | server tok/s | server / engine (rounds) "
             "| TTFT p50 / p99 ms | inter-token p50 / p99 ms | end-to-end p50 ms | errors "
             "| engine thread on CPU: alone / in server "
             "| tokens per engine CPU-second: server / engine |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(doc["concurrency"], key=lambda p: p["concurrency"]):
        each = ", ".join(f"{100 * r:.0f}%" for r in p["ratios"])
        ttft, itl = p["ttft_ms"], p["inter_token_latency_ms"]
        lines.append(
            f"| {p['concurrency']} | {p['engine_tokens_per_second']:.0f} "
            f"| {p['server_tokens_per_second']:.0f} | **{100 * p['ratio']:.1f}%** ({each}) "
            f"| {ttft['p50']:.2f} / {ttft['p99']:.2f} | {itl['p50']:.2f} / {itl['p99']:.2f} "
            f"| {p['end_to_end_ms_p50']:.0f} | {p['errors']} "
            f"| {100 * p['engine_cpu_share_alone']:.0f}% / "
            f"{100 * p['engine_cpu_share_server']:.0f}% "
            f"| {100 * p['tokens_per_engine_cpu_second']:.0f}% |")
    if doc.get("prompt_length"):
        t = doc["prompt_settings"]
        lines += ["", f"Time to first token against prompt length: concurrency 1, "
                      f"{t['output_tokens']} output tokens, {t['seconds']} s measured after "
                      f"{t['warmup_seconds']} s warm-up per length.", "",
                  "| prompt tokens | TTFT p50 ms | TTFT p99 ms | requests | errors |",
                  "|---:|---:|---:|---:|---:|"]
        for p in sorted(doc["prompt_length"], key=lambda p: p["prompt_tokens"]):
            lines.append(f"| {p['prompt_tokens']} | {ms(p['ttft_ms']['p50'])} "
                         f"| {ms(p['ttft_ms']['p99'])} | {p['requests']} | {p['errors']} |")
    return "\n".join(lines)


WRITERS = {"scaling": scaling, "served": served}


def markdown(doc):
    return WRITERS[doc["benchmark"]](doc)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(markdown(figures.load(sys.argv[1])))


if __name__ == "__main__":
    main()
