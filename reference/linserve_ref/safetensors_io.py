"""A safetensors reader and writer (Debian ships no python3-safetensors).

File layout: 8-byte little-endian header length N, N bytes of JSON header, then the data buffer.
The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
relative to the buffer) and may hold "__metadata__" (str -> str).

The reader treats the file as hostile, like the C++ loader: header length capped, JSON checked
(duplicate keys included), every tensor's offsets inside the buffer and consistent with
dtype × shape, and the tensors tiling the buffer exactly (no overlap, no gap, nothing trailing).
Errors are SafetensorsError naming the source and the tensor.
"""

import json
import struct

import numpy as np
import torch

# The same cap as the reference Rust implementation (and the C++ loader).
MAX_HEADER_BYTES = 100_000_000

_DTYPES = {
    # name: (torch dtype, bytes per element, numpy dtype of the raw little-endian bits)
    "F32": (torch.float32, 4, "<f4"),
    "F16": (torch.float16, 2, "<f2"),
    "BF16": (torch.bfloat16, 2, "<u2"),
    "I32": (torch.int32, 4, "<i4"),
    "I64": (torch.int64, 8, "<i8"),
    "I8": (torch.int8, 1, "<i1"),
}
_NAME_OF = {v[0]: k for k, v in _DTYPES.items()}


class SafetensorsError(ValueError):
    """A malformed safetensors file."""


def _reject_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise SafetensorsError(f"duplicate key '{key}'")
        out[key] = value
    return out


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_header(data, source):
    if len(data) < 8:
        raise SafetensorsError(f"{source}: truncated: {len(data)} bytes, need at least 8")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES:
        raise SafetensorsError(
            f"{source}: header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes")
    if 8 + n > len(data):
        raise SafetensorsError(
            f"{source}: truncated: header length {n} needs {8 + n} bytes, file has {len(data)}")
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"),
                            object_pairs_hook=_reject_duplicates)
    except SafetensorsError as e:
        raise SafetensorsError(f"{source}: header: {e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{source}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{source}: header must be a JSON object")
    return n, header


def _check_entry(name, entry, buffer_len, source):
    where = f"{source}: tensor '{name}'"
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(f"{where}: entry must have exactly dtype, shape, data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in _DTYPES:
        raise SafetensorsError(f"{where}: unsupported dtype {dtype!r}; supported: {list(_DTYPES)}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise SafetensorsError(f"{where}: shape must be a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or
            not all(_is_int(o) for o in offsets)):
        raise SafetensorsError(f"{where}: data_offsets must be two integers")
    begin, end = offsets
    if begin < 0 or begin > end:
        raise SafetensorsError(f"{where}: data_offsets [{begin}, {end}] are reversed or negative")
    if end > buffer_len:
        raise SafetensorsError(
            f"{where}: data_offsets end {end} is beyond the data buffer of {buffer_len} bytes")
    nbytes = _DTYPES[dtype][1]
    for d in shape:
        nbytes *= d
    if nbytes != end - begin:
        raise SafetensorsError(
            f"{where}: {dtype} shape {shape} needs {nbytes} bytes, data_offsets give {end - begin}")
    return dtype, shape, begin, end


def load_bytes(data, source="<bytes>"):
    """Parses a whole safetensors file. Returns (dict name -> tensor, metadata dict)."""
    data = memoryview(data)
    n, header = _parse_header(data, source)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{source}: __metadata__ must map strings to strings")
    buffer = data[8 + n:]
    checked = {name: _check_entry(name, entry, len(buffer), source)
               for name, entry in header.items()}
    cursor, previous = 0, None
    for name, (_, _, begin, end) in sorted(checked.items(), key=lambda e: e[1][2:]):
        if begin < cursor:
            raise SafetensorsError(
                f"{source}: tensor '{name}' [{begin}, {end}) overlaps tensor '{previous}'")
        if begin > cursor:
            raise SafetensorsError(
                f"{source}: bytes [{cursor}, {begin}) before tensor '{name}' belong to no tensor")
        cursor, previous = end, name
    if cursor != len(buffer):
        raise SafetensorsError(
            f"{source}: bytes [{cursor}, {len(buffer)}) at the end belong to no tensor")
    tensors = {}
    for name, (dtype, shape, begin, end) in checked.items():
        np_dtype = _DTYPES[dtype][2]
        raw = np.frombuffer(buffer[begin:end], dtype=np_dtype).copy()
        if dtype == "BF16":
            t = torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(raw.astype(raw.dtype.newbyteorder("=")))
        tensors[name] = t.reshape(shape)
    return tensors, dict(metadata)


def load_file(path):
    """Reads `path`. Returns (dict name -> tensor, metadata dict)."""
    with open(path, "rb") as f:
        return load_bytes(f.read(), source=str(path))


def save_bytes(tensors, metadata=None):
    """Serialises a dict name -> tensor (F32, F16, BF16, I32, I64 or I8) to safetensors bytes."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        if t.dtype not in _NAME_OF:
            raise SafetensorsError(f"tensor '{name}': unsupported dtype {t.dtype}")
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.numpy().astype(_DTYPES[_NAME_OF[t.dtype]][2]).tobytes()
        header[name] = {"dtype": _NAME_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # keeps the buffer 8-byte aligned, as the Rust writer does
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save_file(tensors, path, metadata=None):
    with open(path, "wb") as f:
        f.write(save_bytes(tensors, metadata))
