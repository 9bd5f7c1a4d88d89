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


def stop_cell(doc, engine, batch, context):
    """What a peer's cell at `context` says where it has no figure: why its sweep stopped there,
    or "–"."""
    if engine in figures.BASELINES:
        oom = figures.out_of_memory(doc, engine, batch)
        if oom and oom[0] == context:
            return f"out of memory: needs {oom[1] / figures.GIB:.1f} GiB"
        capped = figures.prefill_capped(doc, engine, batch)
        if capped and capped[0] == context:
            return f"prefill capped: {count(capped[1])} tokens in {capped[2]:.0f} s"
    return "–"


def scaling_header(doc):
    present = figures.engines(doc)
    parts = [f"linserve {doc['linserve']['threads']}"]
    llamacpp = [e for e in present if e.startswith("llamacpp/")]
    if llamacpp:
        ll = doc["llamacpp"]
        parts.append(f"llama.cpp {figures.series(doc, llamacpp[0])['threads']} "
                     f"(llama.cpp {ll['llama_cpp']} from node-llama-cpp {ll['node_llama_cpp']}, "
                     f"F16 KV cache, prefills stopped after {ll['prefill_cap_s']:.0f} s)")
    parts.append(f"PyTorch softmax reference {doc['softmax']['threads']} "
                 f"({doc['softmax']['torch']})")
    budgets = ", ".join(f"{figures.ENGINES[e]} {figures.memory_budget(doc, e) / figures.GIB:.1f} "
                        f"GiB" for e in present if e in figures.BASELINES)
    return [f"Measured on {figures.caption(doc)}.",
            f"Threads: {', '.join(parts)}. The peers' KV caches and states are allocated up to "
            f"a budget of: {budgets}."]


def scaling(doc):
    present = figures.engines(doc)
    lines = scaling_header(doc)
    for b in figures.batches(doc):
        lines += ["", f"### Decode step against context, batch {b} (ms per step: each session "
                      f"of the batch gets one token per step)", ""]
        columns = []  # (header, function of context -> cell)
        for e in present:
            measured = dict(figures.decode_series(doc, e, b))
            columns.append((figures.ENGINES[e], lambda c, m=measured, e=e:
                            ms(m[c]) if c in m else stop_cell(doc, e, b, c)))
            base = figures.BASELINES.get(e)
            if base in present:
                ours = dict(figures.decode_series(doc, base, b))
                columns.append((f"{figures.ENGINES[e]} / {figures.ENGINES[base]}",
                                lambda c, m=measured, o=ours:
                                ratio(m[c] / o[c]) if c in m and c in o else "–"))
        lines += ["| context | " + " | ".join(h for h, _ in columns) + " |",
                  "|---:|" + "---:|" * len(columns)]
        for context in figures.contexts(doc):
            lines.append(f"| {context} | " + " | ".join(f(context) for _, f in columns) + " |")

    state = figures.state_bytes(doc)
    sizes = figures.MEMORY_SIZES_GIB
    growth = dict(figures.kv_growth(doc))
    # (header, short name, {context: bytes}) of every series of bytes per session.
    memory = [("linserve state, as the server reports it", "linserve",
               {c: state for c in figures.contexts(doc)})]
    reported = []
    for e, what, short in (("llamacpp/rwkv7", "state", "RWKV-7"),
                           ("llamacpp/gpt2", "KV cache, F16", "GPT-2")):
        if e in present:
            memory.append((f"{figures.ENGINES[e]} {what}, from the shape", short,
                           dict(figures.session_bytes(doc, e))))
            reported.append((f"{figures.ENGINES[e]}, as llama.cpp sizes the sequence",
                             dict(figures.reported_bytes(doc, e))))
    memory.append(("PyTorch softmax KV cache, measured", "PyTorch", growth))
    names = " / ".join(short for _, short, _ in memory)
    lines += ["", "### Bytes per session against context (one session, batch 1)", "",
              "| context | " + " | ".join(h for h, _, _ in memory) + " | " +
              "".join(f"{h} | " for h, _ in reported) + "PyTorch KV cache / linserve state | " +
              " | ".join(f"sessions in {g} GiB: {names}" for g in sizes) + " |",
              "|---:|" + "---:|" * (len(memory) + len(reported) + 1 + len(sizes))]
    for context in figures.contexts(doc):
        cells = [count(b[context]) if context in b else "–" for _, _, b in memory]
        cells += [count(b[context]) if context in b else "–" for _, b in reported]
        cells.append(ratio(growth[context] / state) if context in growth else "–")
        for g in sizes:
            cells.append(" / ".join(count(figures.sessions_that_fit(b[context], g))
                                    if context in b else "–" for _, _, b in memory))
        lines.append(f"| {context} | " + " | ".join(cells) + " |")
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
