"""The figures of a benchmark's JSON (bench/results/*.json), as the tables (tables.py) and the
pictures (plots.py) both take them: one reading of each file, so that what is drawn is what is
tabulated.

Two kinds of document, told apart by their "benchmark" key:
  scaling  bench/run_scaling.sh: decode step against context for linserve and its peers
           (llama.cpp's GPT-2 and RWKV-7, the PyTorch softmax reference), state bytes against
           the KV caches'.
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

# The series a scaling document may hold, in the order tables and pictures give them, each with
# its label: linserve (always), then (issue 28) linserve with int8 weights and llama.cpp's two
# Q8_0 peers, then the PyTorch softmax reference of issue 19 (always). Documents recorded
# before issue 28 hold only "linserve" and "softmax".
ENGINES = {
    "linserve": "linserve fp32",
    "linserve_int8": "linserve int8",
    "llamacpp/gpt2": "llama.cpp GPT-2 Q8_0",
    "llamacpp/rwkv7": "llama.cpp RWKV-7 Q8_0",
    "softmax": "PyTorch softmax",
}
# The linserve series each peer's ratio is taken against: the same bytes per weight.
BASELINES = {"llamacpp/gpt2": "linserve_int8", "llamacpp/rwkv7": "linserve_int8",
             "softmax": "linserve"}


def series(doc, engine):
    """The object of one series ("llamacpp/gpt2" is doc["llamacpp"]["gpt2"]), or None."""
    node = doc
    for part in engine.split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def engines(doc):
    """The series `doc` holds, in ENGINES' order."""
    return [e for e in ENGINES if series(doc, e) is not None]


def batches(doc):
    """Batch sizes of the context sweep, ascending."""
    return sorted({p["batch"] for p in doc["linserve"]["points"]})


def contexts(doc):
    """Every context of the sweep, ascending (out-of-memory and capped points included)."""
    return sorted({p["context"] for e in engines(doc) for p in series(doc, e)["points"]})


def decode_series(doc, engine, batch):
    """[(context, step ms)] measured for `engine` (a key of ENGINES) at `batch`."""
    return sorted((p["context"], p["step_ms"]) for p in series(doc, engine)["points"]
                  if p["batch"] == batch and "step_ms" in p)


def memory_budget(doc, engine):
    """The bytes a peer's KV caches or states were allowed, or None for linserve."""
    s = series(doc, engine)
    return s.get("kv_budget_bytes", s.get("memory_budget_bytes"))


def out_of_memory(doc, engine, batch):
    """A peer's first context at `batch` whose memory exceeded its budget, as (context, bytes
    needed), or None when every context it reached fitted."""
    for p in series(doc, engine)["points"]:
        if p["batch"] == batch and p.get("out_of_memory"):
            return p["context"], p.get("kv_bytes", p.get("memory_bytes"))
    return None


def prefill_capped(doc, engine, batch):
    """llama.cpp's context at `batch` whose prefill was stopped at the time cap, as (context,
    tokens prefilled, seconds spent), or None."""
    for p in series(doc, engine)["points"]:
        if p["batch"] == batch and p.get("prefill_capped"):
            return p["context"], p["prefill_tokens_done"], p["prefill_seconds"]
    return None


def state_bytes(doc):
    """linserve's bytes per session, as the server reported them."""
    return doc["linserve"]["server_state_bytes_per_session"]


def kv_growth(doc):
    """[(context, measured resident-memory growth in bytes)] of one session's (batch 1) KV
    cache of the PyTorch softmax reference."""
    return sorted((p["context"], p["rss_growth_bytes"]) for p in doc["softmax"]["points"]
                  if p["batch"] == 1 and "rss_growth_bytes" in p)


def session_bytes(doc, engine):
    """[(context, bytes)] one session of llama.cpp's model holds at every context of the sweep,
    from the shape (bench/llamacpp/llamacpp_bench.cc): GPT-2's F16 KV cache grows by
    kv_bytes_per_token; RWKV-7's state is the same at every context."""
    s = series(doc, engine)
    return [(c, s.get("state_bytes_per_session", 0) + s.get("kv_bytes_per_token", 0) * c)
            for c in contexts(doc)]


def reported_bytes(doc, engine):
    """[(context, bytes)] of one sequence's state as llama.cpp itself sizes it
    (llama_state_seq_get_size after the prefill; batch 1 points)."""
    return sorted((p["context"], p["reported_state_bytes"]) for p in series(doc, engine)["points"]
                  if p["batch"] == 1 and "reported_state_bytes" in p)


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
