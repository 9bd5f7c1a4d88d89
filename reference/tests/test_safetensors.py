"""Our safetensors reader/writer: round trips, and rejection of malformed files."""

import json
import os
import struct
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from linserve_ref.safetensors_io import (MAX_HEADER_BYTES, SafetensorsError,  # noqa: E402
                                         load_bytes, load_file, save_bytes, save_file)


def raw_file(header, buffer=b"", header_len=None):
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    n = len(text) if header_len is None else header_len
    return struct.pack("<Q", n) + text + buffer


class RoundTripTest(unittest.TestCase):
    def test_every_dtype(self):
        tensors = {
            "f32": torch.randn(3, 4),
            "f16": torch.randn(5).half(),
            "bf16": torch.randn(2, 3, 2).bfloat16(),
            "i32": torch.tensor([[1, -2], [2 ** 31 - 1, -2 ** 31]], dtype=torch.int32),
            "i64": torch.tensor([2 ** 40, -7], dtype=torch.int64),
            "scalar": torch.tensor(2.5),
            "empty": torch.zeros(0, 3),
        }
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            save_file(tensors, path, metadata={"format": "pt"})
            loaded, metadata = load_file(path)
        self.assertEqual(metadata, {"format": "pt"})
        self.assertEqual(list(loaded), list(tensors))
        for name, t in tensors.items():
            self.assertEqual(loaded[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(loaded[name], t), name)

    def test_layout_is_standard(self):
        data = save_bytes({"a": torch.tensor([1.0, 2.0]),
                           "b": torch.tensor([3], dtype=torch.int64)})
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual(n % 8, 0)
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["a"], {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})
        self.assertEqual(header["b"], {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]})
        self.assertEqual(data[8 + n:8 + n + 8], struct.pack("<2f", 1.0, 2.0))

    def test_bf16_bits(self):
        data = save_bytes({"x": torch.tensor([1.0, -2.0], dtype=torch.bfloat16)})
        self.assertEqual(data[-4:], struct.pack("<2H", 0x3F80, 0xC000))


class MalformedTest(unittest.TestCase):
    def assert_rejected(self, data, message):
        with self.assertRaisesRegex(SafetensorsError, message):
            load_bytes(data, source="bad.safetensors")

    def entry(self, dtype="F32", shape=(2,), offsets=(0, 8)):
        return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}

    def test_truncated_length_prefix(self):
        self.assert_rejected(b"\x01\x02\x03", "bad.safetensors: truncated: 3 bytes")

    def test_truncated_header(self):
        self.assert_rejected(raw_file(b'{"a":1}', header_len=100), "header length 100 needs 108")

    def test_truncated_data(self):
        self.assert_rejected(raw_file({"w": self.entry()}, b"\0" * 4),
                             "tensor 'w': data_offsets end 8 is beyond the data buffer of 4")

    def test_oversize_header(self):
        self.assert_rejected(raw_file(b"{}", header_len=MAX_HEADER_BYTES + 1),
                             f"exceeds the limit of {MAX_HEADER_BYTES}")

    def test_header_not_json(self):
        self.assert_rejected(raw_file(b"{not json"), "not valid JSON")
        self.assert_rejected(raw_file(b"\xff\xfe{}"), "not valid JSON")

    def test_header_not_object(self):
        self.assert_rejected(raw_file(b"[1, 2]"), "must be a JSON object")

    def test_duplicate_tensor(self):
        text = b'{"w": %s, "w": %s}' % ((json.dumps(self.entry()).encode(),) * 2)
        self.assert_rejected(raw_file(text, b"\0" * 8), "duplicate key 'w'")

    def test_unknown_dtype(self):
        self.assert_rejected(raw_file({"w": self.entry(dtype="F8")}, b"\0" * 8),
                             "tensor 'w': unsupported dtype 'F8'")

    def test_bad_entry(self):
        self.assert_rejected(raw_file({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8),
                             "tensor 'w': entry must have exactly")
        self.assert_rejected(raw_file({"w": self.entry(shape=(-2,))}, b"\0" * 8),
                             "shape must be a list of non-negative integers")
        self.assert_rejected(raw_file({"w": self.entry(offsets=(0, 8, 9))}, b"\0" * 8),
                             "data_offsets must be two integers")

    def test_reversed_offsets(self):
        self.assert_rejected(raw_file({"w": self.entry(offsets=(8, 0))}, b"\0" * 8),
                             r"data_offsets \[8, 0\] are reversed")

    def test_shape_dtype_mismatch(self):
        self.assert_rejected(raw_file({"w": self.entry(shape=(3,))}, b"\0" * 8),
                             r"tensor 'w': F32 shape \[3\] needs 12 bytes, data_offsets give 8")

    def test_shape_product_overflow(self):
        huge = (2 ** 32, 2 ** 32, 2 ** 32)
        self.assert_rejected(raw_file({"w": self.entry(shape=huge)}, b"\0" * 8),
                             "needs 316912650057057350374175801344 bytes")

    def test_overlap(self):
        header = {"a": self.entry(offsets=(0, 8)), "b": self.entry(offsets=(4, 12))}
        self.assert_rejected(raw_file(header, b"\0" * 12), "tensor 'b' .* overlaps tensor 'a'")

    def test_gap(self):
        header = {"a": self.entry(offsets=(0, 8)), "b": self.entry(offsets=(12, 20))}
        self.assert_rejected(raw_file(header, b"\0" * 20),
                             r"bytes \[8, 12\) before tensor 'b' belong to no tensor")

    def test_trailing_bytes(self):
        self.assert_rejected(raw_file({"a": self.entry()}, b"\0" * 9),
                             r"bytes \[8, 9\) at the end belong to no tensor")

    def test_bad_metadata(self):
        self.assert_rejected(raw_file({"__metadata__": {"k": 1}}), "__metadata__ must map strings")

    def test_valid_minimal_files_load(self):
        self.assertEqual(load_bytes(raw_file({}))[0], {})
        tensors, _ = load_bytes(raw_file({"a": self.entry()}, struct.pack("<2f", 1.5, -1)))
        self.assertEqual(tensors["a"].tolist(), [1.5, -1.0])


if __name__ == "__main__":
    unittest.main()
