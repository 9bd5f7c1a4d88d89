#!/usr/bin/python3
"""Checks gguf_writer.py's Q8_0 blocks byte for byte against ggml's own quantizer
(ggml_quantize_chunk in the installed libggml-base.so, called through ctypes), and its F16
conversion against ggml_fp32_to_fp16_row, on seeded random rows that include the edge cases
(an all-zero block, exact halves after scaling, large and tiny magnitudes). run.sh runs it
before measuring; it exits 1 on the first difference.

  q8_0_check.py <directory holding libggml-base.so>
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer  # noqa: E402

GGML_TYPE_Q8_0 = 8


def rows(n_per_row):
    rng = np.random.default_rng(28)
    x = rng.standard_normal((64, n_per_row), dtype=np.float32)
    x[1] *= 1e-6
    x[2] *= 1e4
    x[3, :32] = 0.0
    # Values that land exactly on k + 0.5 after scaling by 127 / amax: rounding must go away
    # from zero, as roundf does.
    x[4, :32] = np.arange(32, dtype=np.float32) + 0.5
    x[4, 31] = 127.0
    x[5] = -x[5]
    return x


def main(argv):
    if len(argv) != 1:
        raise SystemExit(__doc__)
    lib = ctypes.CDLL(os.path.join(argv[0], "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    lib.ggml_fp32_to_fp16_row.restype = None
    lib.ggml_fp32_to_fp16_row.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    x = np.ascontiguousarray(rows(768))
    ours = gguf_writer.quantize_q8_0(x)
    theirs = ctypes.create_string_buffer(len(ours))
    size = lib.ggml_quantize_chunk(GGML_TYPE_Q8_0, x.ctypes.data, theirs, 0, x.shape[0],
                                   x.shape[1], None)
    if size != len(ours) or theirs.raw != ours:
        diff = next(i for i in range(len(ours)) if theirs.raw[i] != ours[i])
        raise SystemExit(f"Q8_0: {len(ours)} bytes written, ggml {size}; first difference at "
                         f"byte {diff} (block {diff // 34})")
    half = np.empty(x.size, dtype=np.uint16)
    lib.ggml_fp32_to_fp16_row(x.ctypes.data, half.ctypes.data, x.size)
    if not np.array_equal(half, x.astype("<f2").view(np.uint16).ravel()):
        raise SystemExit("F16: numpy's conversion differs from ggml_fp32_to_fp16_row")
    print(f"q8_0_check: {x.shape[0]} rows of {x.shape[1]}: Q8_0 and F16 bytes match ggml's")


if __name__ == "__main__":
    main(sys.argv[1:])
