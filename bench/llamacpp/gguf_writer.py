#!/usr/bin/python3
"""Writes a GGUF file (version 3) of linserve's 125M benchmark shape with random weights, for
llama.cpp to load: a GPT-2 softmax decoder or an RWKV-7 recurrent model, in F32, F16 or Q8_0.

    /usr/bin/python3 bench/llamacpp/gguf_writer.py --arch gpt2 --dtype q8_0 --out gpt2-q8_0.gguf

The shape is cpu_bench's (bench/cpu_bench.cc): d_model 768, 12 layers, 12 heads x 64, d_ff 3072,
vocab 32000. Everything here follows llama.cpp's own loader (src/models/gpt2.cpp, rwkv7.cpp,
src/llama-arch.cpp) and ggml's definitions (ggml/include/gguf.h, block_q8_0 in
ggml/src/ggml-common.h, quantize_row_q8_0_ref in ggml/src/ggml-quants.c) of the tag that
bench/llamacpp/install.sh installs; no llama.cpp code or Python package is used.

Weights are seeded normal draws scaled by 1/sqrt(fan_in) (embeddings 0.02), norms at weight 1
and bias 0, so activations stay finite; their values do not change what is timed. Matrices whose
rows are a multiple of 32 elements are stored in --dtype; vectors (norms, biases, RWKV mixing
coefficients) stay F32 as llama.cpp's converter and quantizer keep them.
"""
import argparse
import struct
import sys

import numpy as np

D_MODEL = 768
N_LAYER = 12
N_HEAD = 12
HEAD_DIM = 64
D_FF = 3072
VOCAB = 32000
# RWKV-7's LoRA ranks at d_model 768 (the released 0.1B model's): decay, in-context learning
# rate, value-residual mix, gate.
RWKV7_LORA = {"decay": 64, "iclr": 64, "value_res_mix": 32, "gate": 128}

# GGUF metadata value types (ggml/include/gguf.h, enum gguf_type).
GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types (ggml/include/ggml.h, enum ggml_type) and llama_ftype of the whole file.
GGML_TYPE = {"f32": 0, "f16": 1, "q8_0": 8}
LLAMA_FTYPE = {"f32": 0, "f16": 1, "q8_0": 7}
QK8_0 = 32
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT


def quantize_q8_0(x):
    """ggml's quantize_row_q8_0_ref: per block of 32, d = amax / 127 (stored fp16) and
    qs = roundf(x / d) as int8 (rounding half away from zero), laid out as 34-byte blocks."""
    blocks = x.astype(np.float32).reshape(-1, QK8_0)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    scaled = blocks * inv[:, None]
    qs = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)
    out = np.empty((blocks.shape[0], 2 + QK8_0), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = qs.view(np.uint8)
    return out.tobytes()


class GgufWriter:
    """Collects metadata and tensors, then writes header, tensor infos and aligned data."""

    def __init__(self, arch):
        self.kv = []
        self.tensors = []  # (name, ggml shape ne0-first, ggml type, bytes)
        self.add_string("general.architecture", arch)
        self.add_uint32("general.alignment", ALIGNMENT)

    def add_uint32(self, key, value):
        self.kv.append((key, GGUF_UINT32, struct.pack("<I", value)))

    def add_int32(self, key, value):
        self.kv.append((key, GGUF_INT32, struct.pack("<i", value)))

    def add_float32(self, key, value):
        self.kv.append((key, GGUF_FLOAT32, struct.pack("<f", value)))

    def add_string(self, key, value):
        self.kv.append((key, GGUF_STRING, _string(value)))

    def add_array(self, key, item_type, items):
        if item_type == GGUF_STRING:
            body = b"".join(_string(s) for s in items)
        elif item_type == GGUF_FLOAT32:
            body = np.asarray(items, dtype="<f4").tobytes()
        elif item_type == GGUF_INT32:
            body = np.asarray(items, dtype="<i4").tobytes()
        else:
            raise ValueError(f"array item type {item_type} is not written here")
        self.kv.append((key, GGUF_ARRAY, struct.pack("<IQ", item_type, len(items)) + body))

    def add_tensor(self, name, array, dtype):
        """array: numpy float32 with numpy shape (…, ne1, ne0); stored as dtype."""
        ne = list(reversed(array.shape))
        if dtype == "q8_0" and ne[0] % QK8_0 != 0:
            raise ValueError(
                f"{name}: a row of {ne[0]} elements is not a multiple of {QK8_0} for Q8_0")
        if dtype == "f32":
            data = array.astype("<f4").tobytes()
        elif dtype == "f16":
            data = array.astype("<f2").tobytes()
        else:
            data = quantize_q8_0(array)
        self.tensors.append((name, ne, GGML_TYPE[dtype], data))

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for key, value_type, body in self.kv:
                f.write(_string(key) + struct.pack("<I", value_type) + body)
            offset = 0
            for name, ne, ggml_type, data in self.tensors:
                f.write(_string(name) + struct.pack("<I", len(ne)))
                f.write(struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ggml_type, offset))
                offset += _padded(len(data))
            f.write(b"\0" * (_padded(f.tell()) - f.tell()))
            for _, _, _, data in self.tensors:
                f.write(data + b"\0" * (_padded(len(data)) - len(data)))


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _padded(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def add_tokenizer(w):
    """A SentencePiece-type ("llama") vocabulary of VOCAB tokens: <unk>, <s>, </s>, the 256 byte
    tokens llama.cpp's SPM tokenizer requires (it looks up <0x0A> at load), then filler pieces.
    The benchmark feeds token ids directly, so the pieces' text is never used."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # llama_token_type: UNKNOWN, CONTROL, BYTE, NORMAL
    tokens += [f"\u2581t{i}" for i in range(VOCAB - len(tokens))]
    types += [1] * (VOCAB - len(types))
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", GGUF_STRING, tokens)
    w.add_array("tokenizer.ggml.scores", GGUF_FLOAT32, [-float(i) for i in range(VOCAB)])
    w.add_array("tokenizer.ggml.token_type", GGUF_INT32, types)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)


class Weights:
    """Seeded random tensors in a fixed order, float32, numpy shape = reversed ggml shape."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def matrix(self, ne0, ne1, std=None):
        """ggml {ne0, ne1}: ne1 rows of ne0 inputs (a Linear from ne0 to ne1)."""
        std = 1.0 / np.sqrt(ne0) if std is None else std
        return self.rng.standard_normal((ne1, ne0), dtype=np.float32) * np.float32(std)

    def uniform(self, shape, low, high):
        return self.rng.uniform(low, high, size=shape).astype(np.float32)


def ones(n):
    return np.ones(n, dtype=np.float32)


def zeros(n):
    return np.zeros(n, dtype=np.float32)


def matrix_dtype(dtype, ne0):
    return dtype if dtype == "f32" or ne0 % QK8_0 == 0 else "f32"


def write_gpt2(w, r, dtype, n_ctx_train):
    """llama.cpp's GPT-2 (src/models/gpt2.cpp): learned positions, pre-LayerNorm blocks with a
    fused QKV, GELU MLP, tied output head (no output.weight: llama.cpp reuses token_embd, as
    linserve's 125M shape ties its head)."""
    a = "gpt2"
    w.add_uint32(f"{a}.context_length", n_ctx_train)
    w.add_uint32(f"{a}.embedding_length", D_MODEL)
    w.add_uint32(f"{a}.block_count", N_LAYER)
    w.add_uint32(f"{a}.feed_forward_length", D_FF)
    w.add_uint32(f"{a}.attention.head_count", N_HEAD)
    w.add_float32(f"{a}.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("general.file_type", LLAMA_FTYPE[dtype])
    add_tokenizer(w)
    w.add_tensor("token_embd.weight", r.matrix(D_MODEL, VOCAB, std=0.02), dtype)
    w.add_tensor("position_embd.weight", r.matrix(D_MODEL, n_ctx_train, std=0.01), dtype)
    w.add_tensor("output_norm.weight", ones(D_MODEL), "f32")
    w.add_tensor("output_norm.bias", zeros(D_MODEL), "f32")
    for i in range(N_LAYER):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(D_MODEL), "f32")
        w.add_tensor(f"{b}.attn_norm.bias", zeros(D_MODEL), "f32")
        w.add_tensor(f"{b}.attn_qkv.weight", r.matrix(D_MODEL, 3 * D_MODEL), dtype)
        w.add_tensor(f"{b}.attn_qkv.bias", zeros(3 * D_MODEL), "f32")
        w.add_tensor(f"{b}.attn_output.weight", r.matrix(D_MODEL, D_MODEL), dtype)
        w.add_tensor(f"{b}.attn_output.bias", zeros(D_MODEL), "f32")
        w.add_tensor(f"{b}.ffn_norm.weight", ones(D_MODEL), "f32")
        w.add_tensor(f"{b}.ffn_norm.bias", zeros(D_MODEL), "f32")
        w.add_tensor(f"{b}.ffn_up.weight", r.matrix(D_MODEL, D_FF), dtype)
        w.add_tensor(f"{b}.ffn_up.bias", zeros(D_FF), "f32")
        w.add_tensor(f"{b}.ffn_down.weight", r.matrix(D_FF, D_MODEL), dtype)
        w.add_tensor(f"{b}.ffn_down.bias", zeros(D_MODEL), "f32")


def write_rwkv7(w, r, dtype, n_ctx_train):
    """llama.cpp's RWKV-7 (src/models/rwkv7.cpp, rwkv7-base.cpp): 12 heads of 64 in the WKV-7
    state, LoRA-parameterised decay / in-context learning rate / value mix / gate, squared-ReLU
    channel mix of d_ff 3072, and an untied output head (llama.cpp requires output.weight)."""
    a = "rwkv7"
    lora = RWKV7_LORA
    w.add_uint32(f"{a}.context_length", n_ctx_train)
    w.add_uint32(f"{a}.embedding_length", D_MODEL)
    w.add_uint32(f"{a}.block_count", N_LAYER)
    w.add_uint32(f"{a}.feed_forward_length", D_FF)
    w.add_uint32(f"{a}.attention.head_count", 0)
    w.add_float32(f"{a}.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32(f"{a}.wkv.head_size", HEAD_DIM)
    w.add_uint32(f"{a}.attention.decay_lora_rank", lora["decay"])
    w.add_uint32(f"{a}.attention.iclr_lora_rank", lora["iclr"])
    w.add_uint32(f"{a}.attention.value_residual_mix_lora_rank", lora["value_res_mix"])
    w.add_uint32(f"{a}.attention.gate_lora_rank", lora["gate"])
    w.add_uint32(f"{a}.token_shift_count", 2)
    w.add_uint32("general.file_type", LLAMA_FTYPE[dtype])
    add_tokenizer(w)

    def mat(name, ne0, ne1, std=None):
        w.add_tensor(name, r.matrix(ne0, ne1, std), matrix_dtype(dtype, ne0))

    mat("token_embd.weight", D_MODEL, VOCAB, std=0.02)
    w.add_tensor("token_embd_norm.weight", ones(D_MODEL), "f32")
    w.add_tensor("token_embd_norm.bias", zeros(D_MODEL), "f32")
    w.add_tensor("output_norm.weight", ones(D_MODEL), "f32")
    w.add_tensor("output_norm.bias", zeros(D_MODEL), "f32")
    mat("output.weight", D_MODEL, VOCAB)
    for i in range(N_LAYER):
        b = f"blk.{i}"
        for norm in ("attn_norm", "attn_norm_2", "time_mix_ln"):
            w.add_tensor(f"{b}.{norm}.weight", ones(D_MODEL), "f32")
            w.add_tensor(f"{b}.{norm}.bias", zeros(D_MODEL), "f32")
        v_rank = lora["iclr"] if i == 0 else lora["value_res_mix"]
        for x, rank in (("w", lora["decay"]), ("a", lora["iclr"]), ("v", v_rank)):
            w.add_tensor(f"{b}.time_mix_{x}0.weight", r.uniform(D_MODEL, -1.0, 1.0), "f32")
            mat(f"{b}.time_mix_{x}1.weight", D_MODEL, rank)
            mat(f"{b}.time_mix_{x}2.weight", rank, D_MODEL)
        mat(f"{b}.time_mix_g1.weight", D_MODEL, lora["gate"])
        mat(f"{b}.time_mix_g2.weight", lora["gate"], D_MODEL)
        lerp = r.uniform((6, 1, 1, D_MODEL), 0.0, 1.0)
        w.add_tensor(f"{b}.time_mix_lerp_fused.weight", lerp, "f32")
        w.add_tensor(f"{b}.time_mix_k_k.weight", r.uniform(D_MODEL, 0.5, 1.0), "f32")
        w.add_tensor(f"{b}.time_mix_k_a.weight", r.uniform(D_MODEL, 0.5, 1.0), "f32")
        w.add_tensor(f"{b}.time_mix_r_k.weight", r.uniform(D_MODEL, -0.1, 0.1), "f32")
        mat(f"{b}.time_mix_key.weight", D_MODEL, D_MODEL)
        mat(f"{b}.time_mix_value.weight", D_MODEL, D_MODEL)
        mat(f"{b}.time_mix_receptance.weight", D_MODEL, D_MODEL)
        mat(f"{b}.time_mix_output.weight", D_MODEL, D_MODEL)
        w.add_tensor(f"{b}.channel_mix_lerp_k.weight", r.uniform((1, 1, D_MODEL), 0.0, 1.0), "f32")
        mat(f"{b}.channel_mix_key.weight", D_MODEL, D_FF)
        mat(f"{b}.channel_mix_value.weight", D_FF, D_MODEL)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=["gpt2", "rwkv7"], required=True)
    p.add_argument("--dtype", choices=sorted(GGML_TYPE), required=True)
    p.add_argument("--out", required=True)
    # Default: 0.
    p.add_argument("--seed", type=int, default=0)
    # Default: 8192, room for a 4096-token context plus decode steps (GPT-2's position table).
    p.add_argument("--context_length", type=int, default=8192)
    args = p.parse_args(argv)
    if not 1 <= args.context_length <= 1048576:
        p.error(f"--context_length {args.context_length} is outside [1, 1048576]")
    w = GgufWriter(args.arch)
    r = Weights(args.seed)
    write = write_gpt2 if args.arch == "gpt2" else write_rwkv7
    write(w, r, args.dtype, args.context_length)
    w.write(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
