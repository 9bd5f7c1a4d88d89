#!/usr/bin/env python3
"""The pictures of the benchmarks' JSON (bench/results/*.json), drawn from the same figures as
their tables (figures.py, tables.py), each captioned with its machine, model shape and date.

    plots.py --out DIR FILE.json...

From a "scaling" document: decode_vs_context.png and memory_vs_context.png, with every series
the document holds (llama.cpp's GPT-2 and RWKV-7 as the main peers, the PyTorch softmax decoder
as a labelled reference line; documents from before issue 28 have only linserve fp32 and the
PyTorch line); from "served" documents: throughput_vs_concurrency.png (one pair of lines per
document, so a recorded GPU run adds its own) and ttft_vs_prompt.png. Every drawn line carries a
gid naming what it shows ("linserve/1": linserve at batch 1, "llamacpp/gpt2/32/oom": where
llama.cpp's GPT-2 ran out of its memory budget at batch 32, ...), which report_test.py reads
back.
"""

import argparse
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

import figures  # noqa: E402

COLOURS = {"linserve": "tab:blue", "linserve_int8": "tab:cyan", "llamacpp/gpt2": "tab:red",
           "llamacpp/rwkv7": "tab:orange", "softmax": "tab:gray"}
# The pictures' names of the series (figures.ENGINES has the tables'): llama.cpp's are the main
# peers; the PyTorch decoder is a reference line, named for what it is.
LABELS = {"linserve": "linserve fp32 (linear attention, fixed state)",
          "linserve_int8": "linserve int8 weights",
          "llamacpp/gpt2": "llama.cpp GPT-2 Q8_0 (softmax + F16 KV cache)",
          "llamacpp/rwkv7": "llama.cpp RWKV-7 Q8_0 (recurrent state)",
          "softmax": "PyTorch eager softmax reference (fp32 KV cache)"}
DPI = 100


def tokens_label(x, _=None):
    return f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"


def new_figure(ncols, note, top=0.88):
    """A row of `ncols` axes with `note` as the caption; `top` leaves room above the axes."""
    width = max(8, 6 * ncols)
    fig, axes = plt.subplots(1, ncols, figsize=(width, 5.2), squeeze=False)
    fig.text(0.01, 0.01, textwrap.fill(note, 17 * width, break_on_hyphens=False), fontsize=7,
             va="bottom")
    fig.subplots_adjust(bottom=0.22, top=top, wspace=0.25)
    return fig, list(axes[0])


def log_y(ax):
    """Log scale with plain numbers at 1, 2 and 5 of every decade."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def figure_legend(fig, axes, ncol):
    """One legend above `axes` with every label any of them carries, once."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="upper center",
               bbox_to_anchor=(0.5, 0.93), ncol=ncol, fontsize=8, frameon=False)


def context_axis(ax, doc):
    ax.set_xscale("log", base=2)
    ax.set_xticks(figures.contexts(doc))
    ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
    ax.set_xlabel("context (tokens)")
    ax.grid(True, which="both", alpha=0.3)


def peers_note(doc):
    """What the peers of a scaling document are, for its pictures' captions."""
    present = figures.engines(doc)
    budgets = ", ".join(f"{figures.ENGINES[e]} {figures.memory_budget(doc, e) / figures.GIB:.0f} "
                        f"GiB" for e in present if e in figures.BASELINES)
    note = ""
    if any(e.startswith("llamacpp/") for e in present):
        ll = doc["llamacpp"]
        note = (f" llama.cpp {ll['llama_cpp']} (node-llama-cpp {ll['node_llama_cpp']}): GGUF "
                f"files of the same shape, Q8_0; a prefill still running after "
                f"{ll['prefill_cap_s']:.0f} s is stopped and ends that model's curve.")
    return (f"{note} PyTorch eager softmax reference: a PyTorch decoder of the same shape over "
            f"a fp32 KV cache. KV caches and states allocated up to a budget (this machine is "
            f"shared): {budgets}.")


def mark_stop(ax, doc, engine, batch):
    """An X at the last measured point of a peer whose curve stops before the last context,
    saying why (out of its memory budget, or its prefill capped)."""
    measured = figures.decode_series(doc, engine, batch)
    oom = figures.out_of_memory(doc, engine, batch)
    capped = figures.prefill_capped(doc, engine, batch)
    if not measured or not (oom or capped):
        return
    last = measured[-1]
    if oom:
        gid, label = f"{engine}/{batch}/oom", "out of memory at the next context"
        text = (f"{tokens_label(oom[0])}: {oom[1] / figures.GIB:.0f} GiB > the "
                f"{figures.memory_budget(doc, engine) / figures.GIB:.0f} GiB budget")
    else:
        gid, label = f"{engine}/{batch}/capped", "prefill capped at the next context"
        text = f"{tokens_label(capped[0])}: prefill stopped after {capped[2]:.0f} s"
    ax.plot([last[0]], [last[1]], "X", ms=10, color=COLOURS[engine], markeredgecolor="black",
            gid=gid, label=f"{figures.ENGINES[engine]}: {label}")
    ax.annotate(text, xy=last, xytext=(8, -4), textcoords="offset points", fontsize=7, va="top",
                color=COLOURS[engine])


def decode_vs_context(doc):
    note = (f"{figures.caption(doc)}. Same run, {doc['linserve']['threads']} threads each."
            f"{peers_note(doc)} CPU only: no GPU run is recorded, so no curve reaches 256k.")
    fig, axes = new_figure(len(figures.batches(doc)), note, top=0.78)  # the legend goes above
    fig.suptitle("Per-token decode latency against context: linear attention stays flat")
    for ax, batch in zip(axes, figures.batches(doc)):
        for engine in figures.engines(doc):
            line = figures.decode_series(doc, engine, batch)
            style = "o:" if engine == "softmax" else "o-"
            ax.plot([c for c, _ in line], [m for _, m in line], style, ms=4,
                    label=LABELS[engine], color=COLOURS[engine], gid=f"{engine}/{batch}")
            if engine in figures.BASELINES:
                mark_stop(ax, doc, engine, batch)
        context_axis(ax, doc)
        log_y(ax)
        ax.set_ylabel("decode step (ms per token per session)")
        ax.set_title(f"batch {batch}")
    figure_legend(fig, axes, 3)
    return fig


def memory_vs_context(doc):
    state = figures.state_bytes(doc)
    growth = figures.kv_growth(doc)
    xs = figures.contexts(doc)
    # (gid prefix, label, [(context, bytes per session)], style)
    lines = [("linserve", "linserve state (server-reported)", [(c, state) for c in xs], "o-")]
    for engine, what in (("llamacpp/rwkv7", "state"), ("llamacpp/gpt2", "F16 KV cache")):
        if engine in figures.engines(doc):
            lines.append((engine, f"{figures.ENGINES[engine]} {what} (from the shape)",
                          figures.session_bytes(doc, engine), "o-"))
    lines.append(("softmax", "PyTorch eager softmax reference: fp32 KV cache (measured)", growth,
                  "o:"))
    llamacpp = (" llama.cpp: bytes from the model's shape at llama.cpp's default cache types "
                "(F16 K and V per token; RWKV-7's F32 state)."
                if len(lines) > 2 else "")
    note = (f"{figures.caption(doc)}. linserve: state bytes per session as GetModelInfo reports "
            f"them.{llamacpp} PyTorch KV cache: growth of the reference's resident memory when "
            f"one session's cache was allocated and filled. Sessions that fit: memory / bytes "
            f"per session.")
    fig, (left, right) = new_figure(2, note)
    fig.suptitle("Memory per session against context: a fixed state against a growing KV cache")
    for gid, label, points, style in lines:
        colour = COLOURS[gid]
        left.plot([c for c, _ in points], [b / 2**20 for _, b in points], style, ms=4,
                  color=colour, gid=f"{gid}/bytes", label=label)
        for gib, dash in zip(figures.MEMORY_SIZES_GIB, ("--", ":")):
            right.plot([c for c, _ in points],
                       [figures.sessions_that_fit(b, gib) for _, b in points], dash, marker="o",
                       ms=4, color=colour, gid=f"{gid}/fit{gib}",
                       label=f"{label.split(' (')[0]}, {gib} GiB")
    log_y(left)
    left.set_ylabel("MiB per session")
    left.set_title("bytes per session")
    right.set_yscale("symlog", linthresh=1)
    right.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    right.set_ylabel("sessions that fit")
    right.set_title("sessions that fit in 24 GiB (dashed) and 80 GiB (dotted)")
    # The corners that the growing KV cache leaves empty.
    for ax, corner, ncol in ((left, "upper left", 1), (right, "lower left", 2)):
        context_axis(ax, doc)
        ax.legend(fontsize=7, loc=corner, ncol=ncol)
    return fig


def served_note(docs):
    devices = {d["machine"]["device"] for d in docs}
    gpu = ("" if "gpu" in devices else " No GPU run is recorded, so the CPU server's lines are "
           "the only ones.")
    return " / ".join(figures.caption(d) for d in docs) + "." + gpu


def throughput_vs_concurrency(docs):
    fig, (ax,) = new_figure(1, served_note(docs) + " Closed loop, linserve-loadtest on the "
                            "same machine; engine alone: linserve-decode-bench at the same batch.")
    fig.suptitle("Served output tokens/s against concurrency")
    for doc in docs:
        device = doc["machine"]["device"].upper()
        series = figures.throughput_series(doc)
        xs = [c for c, _, _ in series]
        ax.plot(xs, [s for _, s, _ in series], "o-", ms=4, gid=f"{doc['machine']['device']}/served",
                label=f"{device}: served (gRPC, streamed to clients)")
        ax.plot(xs, [e for _, _, e in series], "s--", ms=4,
                gid=f"{doc['machine']['device']}/engine",
                label=f"{device}: engine alone, same run")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({c for d in docs for c, _, _ in figures.throughput_series(d)}))
    ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
    ax.set_xlabel("concurrency (streams in flight)")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def ttft_vs_prompt(docs):
    fig, (ax,) = new_figure(1, served_note(docs) + " Concurrency 1.")
    fig.suptitle("Served time to first token against prompt length")
    for doc in docs:
        device = doc["machine"]["device"]
        series = figures.ttft_series(doc)
        xs = [n for n, _, _ in series]
        ax.plot(xs, [p50 for _, p50, _ in series], "o-", ms=4, gid=f"{device}/p50",
                label=f"{device.upper()}: p50")
        ax.plot(xs, [p99 for _, _, p99 in series], "^:", ms=4, gid=f"{device}/p99",
                label=f"{device.upper()}: p99")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({n for d in docs for n, _, _ in figures.ttft_series(d)}))
    log_y(ax)
    ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
    ax.set_xlabel("prompt (tokens)")
    ax.set_ylabel("time to first token (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def draw(docs):
    """{file name: Figure} for every picture `docs` hold the figures of (documents of other
    benchmarks are left out)."""
    scaling = [d for d in docs if isinstance(d, dict) and d.get("benchmark") == "scaling"]
    served = [d for d in docs if isinstance(d, dict) and d.get("benchmark") == "served"]
    out = {}
    if len(scaling) > 1:
        raise ValueError("more than one scaling document: which one is the picture?")
    if scaling:
        out["decode_vs_context.png"] = decode_vs_context(scaling[0])
        out["memory_vs_context.png"] = memory_vs_context(scaling[0])
    if served:
        out["throughput_vs_concurrency.png"] = throughput_vs_concurrency(served)
        with_prompts = [d for d in served if figures.ttft_series(d)]
        if with_prompts:
            out["ttft_vs_prompt.png"] = ttft_vs_prompt(with_prompts)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("json", nargs="+")
    args = parser.parse_args()
    for name, fig in draw([figures.load(p) for p in args.json]).items():
        path = os.path.join(args.out, name)
        fig.savefig(path, dpi=DPI, metadata={"Software": None})
        plt.close(fig)
        print(f"plots: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
