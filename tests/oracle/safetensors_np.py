#!/usr/bin/python3
"""Minimal safetensors reader/writer on top of numpy.

We cannot install the `safetensors` package, and the format is simple:
  [8 bytes little-endian u64 N][N bytes JSON header][raw tensor bytes]
The JSON header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}
with offsets relative to the start of the raw bytes, plus an optional
"__metadata__" entry holding a str->str dict.

Supported dtypes: F32, F16, BF16, I32, I64 on read; F32, F16, I32, I64 on
write (numpy has no bfloat16, so BF16 is widened to float32 on read).
"""
import json
import struct

import numpy as np

# Little-endian numpy dtypes for the safetensors dtype strings we handle.
_NP_DTYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
}
_ST_DTYPES = {np.dtype(v).newbyteorder("="): k for k, v in _NP_DTYPES.items()}


def _bf16_to_f32(raw):
    """BF16 is the top half of an IEEE float32: shift the bits back into place."""
    u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
    return (u16 << 16).view(np.float32)


def load(path):
    """Read a safetensors file. Returns (dict name -> np.ndarray, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short to be safetensors")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError(f"{path}: header length {header_len} exceeds file size")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]

    metadata = header.pop("__metadata__", None) or {}
    # Hugging Face's reader (Rust safetensors, `validate`) accepts only a data section its
    # tensors tile exactly, in offset order, with no holes and nothing after the last one.
    spans = sorted(tuple(info["data_offsets"]) for info in header.values())
    at = 0
    for begin, end in spans:
        if begin != at:
            raise ValueError(f"{path}: data_offsets {begin},{end} leave a hole or overlap at {at} (InvalidOffset)")
        at = end
    if at != len(data):
        raise ValueError(f"{path}: tensors cover {at} of {len(data)} data bytes (MetadataIncompleteBuffer)")
    tensors = {}
    for name, info in header.items():
        dtype = info["dtype"]
        shape = tuple(int(s) for s in info["shape"])
        begin, end = info["data_offsets"]
        if not (0 <= begin <= end <= len(data)):
            raise ValueError(f"{path}: {name}: data_offsets {begin},{end} out of range")
        raw = data[begin:end]
        if dtype == "BF16":
            arr = _bf16_to_f32(raw)
        elif dtype in _NP_DTYPES:
            arr = np.frombuffer(raw, dtype=_NP_DTYPES[dtype])
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dtype}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ValueError(f"{path}: {name}: {arr.size} elements but shape {shape}")
        # Copy so the arrays are writable and native-endian, independent of `blob`.
        tensors[name] = arr.reshape(shape).astype(arr.dtype.newbyteorder("="), copy=True)
    return tensors, metadata


def save(path, tensors, metadata=None):
    """Write dict name -> np.ndarray (F32/F16/I32/I64) to a safetensors file.

    Tensors are laid out in sorted-name order, like the reference library,
    and the header is space-padded so the data starts 8-byte aligned.
    """
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        key = arr.dtype.newbyteorder("=")
        if key not in _ST_DTYPES:
            raise ValueError(f"{name}: unsupported numpy dtype {arr.dtype}")
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[key],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for raw in chunks:
            f.write(raw)
