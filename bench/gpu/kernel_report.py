#!/usr/bin/env python3
"""Per-kernel times of a CUDA decode step or prefill beside their floors (issues 29 and 40), as
markdown.

  kernel_report.py ACCOUNT.json=KERNELS.csv [...]

Each pair is one profiled run: ACCOUNT.json is `gpu_bench --profile_batch=B --json_out` (the
batch's kernel account, bench/gpu/kernel_account.h, with each kernel's floor at the copy and GEMM
rates measured in that run) or `gpu_bench --profile_prefill=N --json_out` (the prefill of an
N-token prompt: its account has "tokens" where a decode step's has "batch", and its times are per
prefill) and KERNELS.csv the same run's kernel times, from either profiler:
`nsys stats --report cuda_gpu_kern_sum --format csv` (total time and instances per kernel name
over its --profile_steps steps), or Nsight Compute's `ncu --import RUN.ncu-rep --csv --metrics
gpu__time_duration.sum` (one row per kernel launch; summed here per name). Account rows that run
the same CUDA kernels (every norm runs AddNormKernel) are one row here; the GEMMs (cuBLASLt's:
gemm, cutlass, xmma, cublas or nvjet in the name; our SmallBatchLinearKernel) are one row too,
since a profile's kernel names do not say which projection a GEMM computed; a kernel the account does not know lands in an "other"
row. The per-step time is a kernel's total over the profiled steps (or prefills) divided by their
number; "of floor" = floor / time (1.0 = at the floor).
"""
import csv
import json
import re
import sys
from collections import OrderedDict

GEMM_ROW = "gemm (every projection and the LM head)"
# cuBLASLt's kernel names (sm90_xmma_gemm_..., cutlass_80_tensorop_..._gemm_..., nvjet_sm90_tss_...
# on Hopper, cublasLt::splitKreduce_kernel, ...) and our own small-batch one
# (kernels/cuda/small_batch_linear.h).
GEMM_NAMES = re.compile(r"gemm|cutlass|xmma|cublas|nvjet|SmallBatchLinearKernel", re.IGNORECASE)


NCU_METRIC = "gpu__time_duration.sum"
# Nsight Compute's time units, in nanoseconds.
NCU_UNITS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
             "second": 1e9, "s": 1e9}


def _number(text):
    """A profiler's number, which may carry thousands separators ("12,345.6")."""
    return float(text.replace(",", ""))


def read_nsys_sum(lines):
    """{kernel name: (total ns, instances)} from nsys's cuda_gpu_kern_sum CSV lines."""
    # nsys may print a banner before the header: start at the header line.
    start = next(i for i, line in enumerate(lines) if "Name" in line and "Total Time" in line)
    out = {}
    for row in csv.DictReader(lines[start:]):
        total = next(v for k, v in row.items() if k and k.startswith("Total Time"))
        out[row["Name"]] = (_number(total), int(_number(row["Instances"])))
    return out


def read_ncu_launches(lines):
    """{kernel name: (total ns, instances)} from Nsight Compute's CSV of gpu__time_duration.sum:
    its details page (a row per launch and metric: "Metric Name", "Metric Unit", "Metric
    Value") or its raw page (a column per metric, the units in the row under the header)."""
    start = next(i for i, line in enumerate(lines) if '"Kernel Name"' in line)
    rows = list(csv.DictReader(lines[start:]))
    out = {}

    def add(name, ns):
        total, count = out.get(name, (0.0, 0))
        out[name] = (total + ns, count + 1)

    header = rows[0].keys() if rows else []
    if "Metric Name" in header:
        for row in rows:
            if row["Metric Name"] == NCU_METRIC:
                unit = row["Metric Unit"].strip().lower()
                add(row["Kernel Name"], _number(row["Metric Value"]) * NCU_UNITS[unit])
        return out
    if NCU_METRIC not in header:
        raise ValueError("ncu CSV has neither a Metric Name column nor a %s column" % NCU_METRIC)
    scale = 1.0
    for row in rows:
        if not row["ID"].strip().isdigit():  # the units row of the raw page
            scale = NCU_UNITS[row[NCU_METRIC].strip().lower()]
            continue
        add(row["Kernel Name"], _number(row[NCU_METRIC]) * scale)
    return out


NCU_PROFILER = ("Nsight Compute, each launch timed alone and serialized (--cache-control none, "
                "--clock-control none)")


def read_kernel_sum(path):
    """({kernel name: (total ns, instances)}, the profiler's name) from either profiler's CSV
    (see the module doc)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.strip()]
    if any('"Kernel Name"' in line for line in lines):
        return read_ncu_launches(lines), NCU_PROFILER
    return read_nsys_sum(lines), "nsys"


def is_prefill(account):
    return "tokens" in account


def report(account, kernels):
    steps = account["steps"]
    unit = "prefill" if is_prefill(account) else "step"
    groups = OrderedDict()  # pattern -> {names, launches, floor_us, ns, instances}
    for k in account["kernels"]:
        pattern = k["cuda_kernels"]
        g = groups.setdefault(pattern, {"names": [], "launches": 0, "floor_us": 0.0,
                                        "ns": 0.0, "instances": 0})
        g["names"].append(k["name"])
        g["launches"] += k["launches"]
        g["floor_us"] += k["floor_us"]
    other = {"names": ["other kernels (not in the account)"], "launches": 0, "floor_us": 0.0,
             "ns": 0.0, "instances": 0}
    for name, (ns, instances) in kernels.items():
        target = None
        for pattern in groups:
            if pattern and re.search(r"\b(%s)\b" % pattern, name):
                target = groups[pattern]
                break
        if target is None:
            target = groups[""] if "" in groups and GEMM_NAMES.search(name) else other
        target["ns"] += ns
        target["instances"] += instances
    if other["instances"]:
        groups["<other>"] = other

    lines = ["| kernel | account rows / CUDA kernel launches per %s | floor µs | µs per %s | of floor |"
             % (unit, unit), "|---|---|---|---|---|"]
    total_floor = total_us = 0.0
    for pattern, g in groups.items():
        name = GEMM_ROW if pattern == "" else " + ".join(g["names"])
        us = g["ns"] / steps / 1e3
        total_floor += g["floor_us"]
        total_us += us
        of = "%.0f%%" % (100 * g["floor_us"] / us) if us > 0 and g["floor_us"] > 0 else "—"
        lines.append("| %s | %d / %.1f | %.2f | %.2f | %s |" % (
            name, g["launches"], g["instances"] / steps, g["floor_us"], us, of))
    lines.append("| **%s (kernels only)** | | %.2f | %.2f | %.0f%% |" % (
        unit, total_floor, total_us, 100 * total_floor / total_us if total_us else 0))
    return lines, total_floor, total_us


def main(argv):
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        sys.stderr.write(__doc__)
        return 2
    runs = []
    for arg in argv[1:]:
        account_path, kernels_path = arg.split("=", 1)
        with open(account_path) as f:
            account = json.load(f)
        runs.append((account,) + read_kernel_sum(kernels_path))
    decode = sorted((r for r in runs if not is_prefill(r[0])),
                    key=lambda r: (r[0]["shape"], r[0]["batch"]))
    prefill = sorted((r for r in runs if is_prefill(r[0])),
                     key=lambda r: (r[0]["shape"], r[0]["tokens"]))
    for group, what, size, title in ((decode, "decode step", "batch", "decode"),
                                     (prefill, "prefill", "tokens", "prefill")):
        if not group:
            continue
        print("## Per-kernel %s times against their floors\n" % title)
        print("%s, %s weights. GPU time per %s from %s: kernels only (host gaps and graph "
              "launch not counted). Floors from bench/gpu/kernel_account.h at this run's measured "
              "copy and GEMM rates.\n" % (group[0][0]["device"], group[0][0]["precision"],
                                          what.split()[-1], group[0][2]))
        print("| shape | %s | %s ms | of floor |\n|---|---|---|---|" % (size, what.split()[-1]))
        tables = []
        for account, kernels, _ in group:
            lines, floor_us, us = report(account, kernels)
            print("| %s | %d | %.3f | %.0f%% |" % (account["shape"], account[size], us / 1e3,
                                                  100 * floor_us / us if us else 0))
            label = ("batch %d (%d steps profiled)" % (account["batch"], account["steps"])
                     if size == "batch" else
                     "prefill of %d tokens (%d prefills profiled)" % (account["tokens"],
                                                                      account["steps"]))
            tables.append(("\n### %s, %s\n" % (account["shape"], label), lines))
        for heading, lines in tables:
            print(heading)
            print("\n".join(lines))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
