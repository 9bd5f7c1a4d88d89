#!/usr/bin/env python3
"""Tests of bench/gpu/kernel_report.py (ctest: kernel_report_test) on a small hand-made account
and a kernel profile (nsys's per-name sums, or Nsight Compute's per-launch rows on its details or
raw page, which must give the same report): each profiled kernel lands in its account row by name (our kernels by their
patterns, cuBLASLt's under the GEMM row, anything else under "other"), times are per step, and
"of floor" is floor / time. No GPU: the figures are the fixture's.
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kernel_report  # noqa: E402

ACCOUNT = {
    "shape": "based", "device": "FAKE GPU", "precision": "bf16", "batch": 2, "steps": 10,
    "kernels": [
        {"name": "embedding", "cuda_kernels": "EmbedKernel", "launches": 1, "floor_us": 1.0},
        {"name": "rms_norm", "cuda_kernels": "AddNormKernel", "launches": 1, "floor_us": 0.5},
        {"name": "gemm qkv", "cuda_kernels": "", "launches": 1, "floor_us": 2.0},
        {"name": "sliding_window_attention decode", "cuda_kernels": "DecodeKernel|AdvanceKernel",
         "launches": 1, "floor_us": 1.0},
        {"name": "rms_norm (+ residual add)", "cuda_kernels": "AddNormKernel", "launches": 2,
         "floor_us": 1.0},
        {"name": "lm head", "cuda_kernels": "", "launches": 1, "floor_us": 3.0},
    ]}
# nsys prints a banner line before the CSV header.
KERN_SUM = """Generating SQLite file x.sqlite
"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"
40.0,150000,10,1,1,1,1,0,"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64"
5.0,25000,5,1,1,1,1,0,"nvjet_sm90_tss_64x8_64x16_4x1_v_bz_TNT"
5.0,25000,5,1,1,1,1,0,"void linserve::cuda::(anonymous namespace)::SmallBatchLinearKernel<__nv_bfloat16, 1>(linserve::cuda::(anonymous namespace)::Operands)"
10.0,20000,10,1,1,1,1,0,"void linserve::cuda::(anonymous namespace)::EmbedKernel<__nv_bfloat16>(linserve::cuda::EmbedArgs)"
10.0,60000,30,1,1,1,1,0,"void linserve::cuda::(anonymous namespace)::AddNormKernel<__nv_bfloat16>(int)"
5.0,30000,10,1,1,1,1,0,"void linserve::cuda::(anonymous namespace)::DecodeKernel<float>(int)"
5.0,10000,10,1,1,1,1,0,"linserve::cuda::(anonymous namespace)::AdvanceKernel(int)"
5.0,10000,10,1,1,1,1,0,"linserve::cuda::(anonymous namespace)::DecodeShortConvKernel<float>(int)"
"""

# The same kernels as KERN_SUM, as Nsight Compute's launches (`ncu --import --csv`): its details
# page has a row per launch and metric, in whatever unit ncu picked for each.
NCU_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
              '"Block Size","Grid Size","Device","CC"')
NCU_LAUNCHES = [  # (kernel name, launches, ns per launch)
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", 10, 15000),
    ("nvjet_sm90_tss_64x8_64x16_4x1_v_bz_TNT", 5, 5000),
    ("void linserve::cuda::(anonymous namespace)::SmallBatchLinearKernel<__nv_bfloat16, 1>(linserve::cuda::(anonymous namespace)::Operands)", 5, 5000),
    ("void linserve::cuda::(anonymous namespace)::EmbedKernel<__nv_bfloat16>(linserve::cuda::EmbedArgs)", 10, 2000),
    ("void linserve::cuda::(anonymous namespace)::AddNormKernel<__nv_bfloat16>(int)", 30, 2000),
    ("void linserve::cuda::(anonymous namespace)::DecodeKernel<float>(int)", 10, 3000),
    ("linserve::cuda::(anonymous namespace)::AdvanceKernel(int)", 10, 1000),
    ("linserve::cuda::(anonymous namespace)::DecodeShortConvKernel<float>(int)", 10, 1000),
]


def ncu_details():
    lines = ["==PROF== Disconnected from process 1", NCU_HEADER +
             ',"Section Name","Metric Name","Metric Unit","Metric Value"']
    launch = 0
    for name, count, ns in NCU_LAUNCHES:
        for _ in range(count):
            common = '"%d","7","gpu_bench","127.0.0.1","%s","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0"' % (launch, name)
            # Microseconds for the GEMMs (with a thousands separator's worth of digits), else ns.
            if ns >= 10000:
                value, unit = "%.3f" % (ns / 1e3), "usecond"
            else:
                value, unit = "{:,}".format(ns), "nsecond"
            lines.append(common + ',"Command line profiler metrics","gpu__time_duration.sum","%s","%s"'
                         % (unit, value))
            lines.append(common + ',"Command line profiler metrics","launch__grid_size","","4"')
            launch += 1
    return "\n".join(lines) + "\n"


def ncu_raw():
    lines = [NCU_HEADER + ',"gpu__time_duration.sum"', '"","","","","","","","","","","","msecond"']
    launch = 0
    for name, count, ns in NCU_LAUNCHES:
        for _ in range(count):
            lines.append('"%d","7","gpu_bench","127.0.0.1","%s","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0","%s"'
                         % (launch, name, "%.6f" % (ns / 1e6)))
            launch += 1
    return "\n".join(lines) + "\n"


class KernelReportTest(unittest.TestCase):
    def run_report(self, kernels_csv):
        with tempfile.TemporaryDirectory() as tmp:
            account = os.path.join(tmp, "a.json")
            kern_sum = os.path.join(tmp, "k.csv")
            with open(account, "w") as f:
                json.dump(ACCOUNT, f)
            with open(kern_sum, "w") as f:
                f.write(kernels_csv)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(kernel_report.main(["kernel_report.py",
                                                     account + "=" + kern_sum]), 0)
        return out.getvalue()

    def test_rows(self):
        text = self.run_report(KERN_SUM)
        self.assertIn("GPU time per step from nsys", text)
        # 200 µs of GEMMs over 10 steps = 20 µs per step against 2 + 3 µs of floors: 25%.
        self.assertIn("| gemm (every projection and the LM head) | 2 / 2.0 | 5.00 | "
                      "20.00 | 25% |", text)
        self.assertIn("| embedding | 1 / 1.0 | 1.00 | 2.00 | 50% |", text)
        # Both norm rows run AddNormKernel: one row, 3 launches per step.
        self.assertIn("| rms_norm + rms_norm (+ residual add) | 3 / 3.0 | 1.50 | 6.00 | 25% |",
                      text)
        # DecodeKernel and AdvanceKernel, not DecodeShortConvKernel.
        self.assertIn("| sliding_window_attention decode | 1 / 2.0 | 1.00 | 4.00 | 25% |", text)
        self.assertIn("| other kernels (not in the account) | 0 / 1.0 | 0.00 | 1.00 | — |", text)
        # Step: floors 8.5 µs, kernels 33 µs.
        self.assertIn("| based | 2 | 0.033 | 26% |", text)
        self.assertIn("| **step (kernels only)** | | 8.50 | 33.00 | 26% |", text)

    def test_ncu_pages_match_nsys(self):
        tables = self.run_report(KERN_SUM).split("\n| shape |", 1)[1]
        for page in (ncu_details(), ncu_raw()):
            text = self.run_report(page)
            self.assertIn("GPU time per step from Nsight Compute", text)
            self.assertEqual(text.split("\n| shape |", 1)[1], tables)

    def test_prefill_beside_decode(self):
        prefill = {
            "shape": "125m", "device": "FAKE GPU", "precision": "bf16", "tokens": 2048, "steps": 2,
            "kernels": [
                {"name": "gemm qkv", "cuda_kernels": "", "launches": 1, "floor_us": 100.0},
                {"name": "linear_attention prefill",
                 "cuda_kernels": "FeatureMapsKernel|ChunkSumKernel|ChunkScanKernel|"
                                 "ChunkOutputKernel|ChunkFinalKernel",
                 "launches": 1, "floor_us": 20.0},
                {"name": "lm head", "cuda_kernels": "", "launches": 1, "floor_us": 5.0},
            ]}
        kernels = ('"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)",'
                   '"Max (ns)","StdDev (ns)","Name"\n'
                   '50.0,600000,4,1,1,1,1,0,"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"\n'
                   '20.0,100000,2,1,1,1,1,0,"void linserve::cuda::(anonymous namespace)::'
                   'ChunkOutputKernel<__nv_bfloat16, float>(int)"\n'
                   '20.0,60000,2,1,1,1,1,0,"void linserve::cuda::(anonymous namespace)::'
                   'FeatureMapsKernel(int)"\n')
        with tempfile.TemporaryDirectory() as tmp:
            pairs = []
            for name, account, csv_text in (("d", ACCOUNT, KERN_SUM), ("p", prefill, kernels)):
                a = os.path.join(tmp, name + ".json")
                k = os.path.join(tmp, name + ".csv")
                with open(a, "w") as f:
                    json.dump(account, f)
                with open(k, "w") as f:
                    f.write(csv_text)
                pairs.append(a + "=" + k)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(kernel_report.main(["kernel_report.py"] + pairs), 0)
        text = out.getvalue()
        self.assertIn("## Per-kernel decode times against their floors", text)
        self.assertIn("| based | 2 | 0.033 | 26% |", text)
        self.assertIn("## Per-kernel prefill times against their floors", text)
        self.assertIn("GPU time per prefill from nsys", text)
        # Per prefill: GEMMs 300 µs against 105; the attention's two kernels 80 µs against 20.
        self.assertIn("| shape | tokens | prefill ms | of floor |", text)
        self.assertIn("| 125m | 2048 | 0.380 | 33% |", text)
        self.assertIn("### 125m, prefill of 2048 tokens (2 prefills profiled)", text)
        self.assertIn("| gemm (every projection and the LM head) | 2 / 2.0 | 105.00 | 300.00 | "
                      "35% |", text)
        self.assertIn("| linear_attention prefill | 1 / 2.0 | 20.00 | 80.00 | 25% |", text)
        self.assertIn("| **prefill (kernels only)** | | 125.00 | 380.00 | 33% |", text)

    def test_usage(self):
        with redirect_stdout(io.StringIO()):
            self.assertEqual(kernel_report.main(["kernel_report.py", "no-pair"]), 2)


if __name__ == "__main__":
    unittest.main()
