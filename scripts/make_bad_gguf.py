#!/usr/bin/env python3
"""Writes the crafted malformed GGUF files in tests/data/gguf_bad/ (kept as unit tests).

Each file is a small valid-looking GGUF with one defect; the name says which. Run from the repo
root: python3 scripts/make_bad_gguf.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "gguf_bad")


def s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)


def kv_u32(k, v):
    return s(k) + struct.pack("<I", 4) + struct.pack("<I", v)


def tensor(name, ne, typ, off):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) + \
        struct.pack("<II", typ, 0)[:4] + struct.pack("<Q", off)


def gguf(kvs, tensors, data=b"", version=3, magic=b"GGUF", n_tensors=None, n_kv=None):
    head = magic + struct.pack("<I", version)
    head += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                        len(kvs) if n_kv is None else n_kv)
    body = b"".join(kvs) + b"".join(tensors)
    blob = head + body
    blob += b"\0" * ((-len(blob)) % 32)
    return blob + data


ARCH = kv_str(b"general.architecture", b"qwen3moe")
T_OK = tensor(b"w", [8, 2], 0, 0)
DATA = b"\0" * 64

files = {
    "bad_magic.bin": gguf([ARCH], [T_OK], DATA, magic=b"GGML"),
    "version_1.bin": gguf([ARCH], [T_OK], DATA, version=1),
    "version_4.bin": gguf([ARCH], [T_OK], DATA, version=4),
    "truncated_header.bin": gguf([ARCH], [T_OK], DATA)[:30],
    "empty.bin": b"",
    "string_past_eof.bin": gguf([s(b"general.architecture") + struct.pack("<I", 8) +
                                 struct.pack("<Q", 1 << 40) + b"qwen"], []),
    "key_past_eof.bin": gguf([struct.pack("<Q", 1 << 62) + b"abc"], []),
    "array_past_eof.bin": gguf([ARCH, s(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 33)], []),
    "array_bad_elem_type.bin": gguf([ARCH, s(b"x") + struct.pack("<IIQ", 9, 42, 1) + b"\0" * 8], []),
    "nested_too_deep.bin": gguf([ARCH, s(b"x") + struct.pack("<I", 9) +
                                 struct.pack("<IQ", 9, 1) * 40 + struct.pack("<IQ", 4, 0)], []),
    "unknown_value_type.bin": gguf([ARCH, s(b"x") + struct.pack("<I", 13) + b"\0" * 8], []),
    "bool_not_01.bin": gguf([ARCH, s(b"x") + struct.pack("<IB", 7, 3)], []),
    "huge_kv_count.bin": gguf([ARCH], [], n_kv=1 << 60),
    "huge_tensor_count.bin": gguf([ARCH], [], n_tensors=1 << 60),
    "tensor_offset_past_eof.bin": gguf([ARCH], [tensor(b"w", [8, 2], 0, 1 << 20)], DATA),
    "tensor_size_past_eof.bin": gguf([ARCH], [tensor(b"w", [8, 100000], 0, 0)], DATA),
    "tensor_dims_overflow.bin": gguf([ARCH], [tensor(b"w", [1 << 32, 1 << 32, 1 << 32], 0, 0)], DATA),
    "tensor_too_many_dims.bin": gguf([ARCH], [tensor(b"w", [1, 1, 1, 1, 1], 0, 0)], DATA),
    "tensor_unknown_type.bin": gguf([ARCH], [tensor(b"w", [8, 2], 77, 0)], DATA),
    "tensor_bad_block.bin": gguf([ARCH], [tensor(b"w", [31, 2], 2, 0)], DATA),
    "tensor_misaligned.bin": gguf([ARCH], [tensor(b"w", [8, 2], 0, 3)], DATA),
    "duplicate_tensor.bin": gguf([ARCH], [T_OK, tensor(b"w", [8, 2], 0, 64)], DATA * 3),
    "duplicate_key.bin": gguf([ARCH, ARCH], [T_OK], DATA),
    "bad_alignment.bin": gguf([ARCH, kv_u32(b"general.alignment", 24)], [T_OK], DATA),
    "data_truncated.bin": gguf([ARCH], [T_OK], DATA)[:-40],
}

os.makedirs(OUT, exist_ok=True)
for name, blob in files.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)
print(f"wrote {len(files)} files to {os.path.normpath(OUT)}")
