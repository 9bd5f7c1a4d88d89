#!/usr/bin/env python3
"""The pictures of the benchmarks' JSON (bench/results/*.json), drawn from the same figures as
their tables (figures.py, tables.py), each captioned with its machine, model shape and date.

    plots.py --out DIR FILE.json...

From a "scaling" document: decode_vs_context.png and memory_vs_context.png; from "served"
documents: throughput_vs_concurrency.png (one pair of lines per document, so a recorded GPU run
adds its own) and ttft_vs_prompt.png. Every drawn line carries a gid naming what it shows
("linserve/1": linserve at batch 1, ...), which report_test.py reads back.
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

COLOURS = {"linserve": "tab:blue", "softmax": "tab:red"}
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


def figure_legend(fig, ax, ncol):
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.93),
               ncol=ncol, fontsize=8, frameon=False)


def context_axis(ax, doc):
    ax.set_xscale("log", base=2)
    ax.set_xticks(figures.contexts(doc))
    ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
    ax.set_xlabel("context (tokens)")
    ax.grid(True, which="both", alpha=0.3)


def decode_vs_context(doc):
    note = (f"{figures.caption(doc)}. Same run, {doc['linserve']['threads']} threads each. "
            f"Softmax peer: a PyTorch decoder of the same shape over a fp32 KV cache, allocated "
            f"up to {doc['softmax']['kv_budget_bytes'] / figures.GIB:.0f} GiB (this machine is "
            f"shared). CPU only: no GPU run is recorded, so no curve reaches 256k.")
    fig, axes = new_figure(len(figures.batches(doc)), note, top=0.82)  # the legend goes above
    fig.suptitle("Per-token decode latency against context: linear attention stays flat")
    for ax, batch in zip(axes, figures.batches(doc)):
        for engine, name in (("linserve", "linserve (linear attention, fixed state)"),
                             ("softmax", "softmax attention + KV cache (PyTorch)")):
            series = figures.decode_series(doc, engine, batch)
            ax.plot([c for c, _ in series], [m for _, m in series], "o-", ms=4, label=name,
                    color=COLOURS[engine], gid=f"{engine}/{batch}")
        oom = figures.out_of_memory(doc, batch)
        if oom:
            last = figures.decode_series(doc, "softmax", batch)[-1]
            ax.plot([last[0]], [last[1]], "X", ms=12, color="black", gid=f"softmax/{batch}/oom",
                    label="softmax peer out of memory at the next context")
            ax.annotate(f"{tokens_label(oom[0])}: {oom[1] / figures.GIB:.0f} GiB of KV cache\n"
                        f"> the {doc['softmax']['kv_budget_bytes'] / figures.GIB:.0f} GiB budget",
                        xy=last, xytext=(8, -4), textcoords="offset points", fontsize=8,
                        va="top")
        context_axis(ax, doc)
        log_y(ax)
        ax.set_ylabel("decode step (ms per token per session)")
        ax.set_title(f"batch {batch}")
    figure_legend(fig, max(axes, key=lambda a: len(a.get_lines())), 3)
    return fig


def memory_vs_context(doc):
    state = figures.state_bytes(doc)
    growth = figures.kv_growth(doc)
    note = (f"{figures.caption(doc)}. linserve: state bytes per session as GetModelInfo reports "
            f"them. KV cache: growth of the peer's resident memory when one session's cache was "
            f"allocated and filled. Sessions that fit: memory / bytes per session.")
    fig, (left, right) = new_figure(2, note)
    fig.suptitle("Memory per session against context: a fixed state against a growing KV cache")
    xs = [c for c, _ in growth]
    left.plot(xs, [state / 2**20] * len(xs), "o-", ms=4, color=COLOURS["linserve"],
              gid="linserve/bytes", label="linserve state (server-reported)")
    left.plot(xs, [kv / 2**20 for _, kv in growth], "o-", ms=4, color=COLOURS["softmax"],
              gid="softmax/bytes", label="softmax KV cache (measured)")
    log_y(left)
    left.set_ylabel("MiB per session")
    left.set_title("bytes per session")
    for gib, style in zip(figures.MEMORY_SIZES_GIB, ("--", ":")):
        right.plot(xs, [figures.sessions_that_fit(state, gib)] * len(xs), style, marker="o",
                   ms=4, color=COLOURS["linserve"], gid=f"linserve/fit{gib}",
                   label=f"linserve, {gib} GiB")
        right.plot(xs, [figures.sessions_that_fit(kv, gib) for _, kv in growth], style,
                   marker="o", ms=4, color=COLOURS["softmax"], gid=f"softmax/fit{gib}",
                   label=f"softmax KV cache, {gib} GiB")
    right.set_yscale("symlog", linthresh=1)
    right.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    right.set_ylabel("sessions that fit")
    right.set_title("sessions that fit in 24 GiB (dashed) and 80 GiB (dotted)")
    # The corners that the growing KV cache leaves empty.
    for ax, corner in ((left, "upper left"), (right, "lower left")):
        context_axis(ax, doc)
        ax.legend(fontsize=8, loc=corner)
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
