"""The figures of a benchmark's JSON (bench/results/*.json), as the tables (tables.py) and the
pictures (plots.py) both take them: one reading of each file, so that what is drawn is what is
tabulated.

Two kinds of document, told apart by their "benchmark" key:
  scaling  bench/run_scaling.sh: decode step against context for linserve and the softmax peer,
           state bytes against the KV cache's.
  served   bench/server/run.sh: served tokens/s against concurrency next to the engine alone,
           and time to first token against prompt length.
"""

import json

GIB = 2**30
# The memory sizes the sessions-that-fit columns are given for (a 24 GiB and an 80 GiB device).
MEMORY_SIZES_GIB = (24, 80)


def load(path):
    with open(path) as f:
        return json.load(f)


def caption(doc):
    """Machine, model shape and date: the line every table and picture of `doc` carries."""
    m = doc["machine"]
    return (f"{m['cpu']}, {m['cores']} cores; model: {doc['model']}; measured {doc['date']} "
            f"(commit {doc['commit']}), load average before {doc['load_average_before']}")


# ---- scaling ----------------------------------------------------------------------------------

def batches(doc):
    """Batch sizes of the context sweep, ascending."""
    return sorted({p["batch"] for p in doc["linserve"]["points"]})


def contexts(doc):
    """Every context of the sweep, ascending (the peer's out-of-memory point included)."""
    points = doc["linserve"]["points"] + doc["softmax"]["points"]
    return sorted({p["context"] for p in points})


def decode_series(doc, engine, batch):
    """[(context, step ms)] measured for engine "linserve" or "softmax" at `batch`."""
    return sorted((p["context"], p["step_ms"]) for p in doc[engine]["points"]
                  if p["batch"] == batch and "step_ms" in p)


def out_of_memory(doc, batch):
    """The softmax peer's first context at `batch` whose KV cache exceeded its budget, as
    (context, bytes needed), or None when every context fitted."""
    for p in doc["softmax"]["points"]:
        if p["batch"] == batch and p.get("out_of_memory"):
            return p["context"], p["kv_bytes"]
    return None


def state_bytes(doc):
    """linserve's bytes per session, as the server reported them."""
    return doc["linserve"]["server_state_bytes_per_session"]


def kv_growth(doc):
    """[(context, measured resident-memory growth in bytes)] of one session's (batch 1) KV
    cache."""
    return sorted((p["context"], p["rss_growth_bytes"]) for p in doc["softmax"]["points"]
                  if p["batch"] == 1 and "rss_growth_bytes" in p)


def sessions_that_fit(bytes_per_session, gib):
    return int(gib * GIB // bytes_per_session)


# ---- served -----------------------------------------------------------------------------------

def throughput_series(doc):
    """[(concurrency, served tok/s, engine-alone tok/s)], ascending concurrency."""
    return sorted((p["concurrency"], p["server_tokens_per_second"],
                   p["engine_tokens_per_second"]) for p in doc["concurrency"])


def ttft_series(doc):
    """[(prompt tokens, TTFT p50 ms, TTFT p99 ms)], ascending prompt length."""
    return sorted((p["prompt_tokens"], p["ttft_ms"]["p50"], p["ttft_ms"]["p99"])
                  for p in doc.get("prompt_length", []))
