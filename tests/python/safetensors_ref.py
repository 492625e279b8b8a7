"""A minimal, independent .safetensors reader/writer for the tests (the format is an 8-byte
little-endian header length, a JSON header, then raw little-endian data), so test oracles do not
depend on thunder-c's own implementation. bf16 is decoded by shifting to float32 bits."""
import json
import struct

import numpy as np

_NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
       "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    buf = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[b:e]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_NP[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def write(path, tensors):
    names = sorted(tensors)
    header, chunks, off = {}, [], 0
    rev = {v: k for k, v in _NP.items()}
    for name in names:
        value = tensors[name]
        if isinstance(value, tuple):  # ("BF16", uint16 codes)
            dtype, arr = value[0], np.ascontiguousarray(value[1])
        else:
            arr = np.ascontiguousarray(value)
            dtype = rev[arr.dtype.type]
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def bf16_codes(x):
    """float32 values -> bfloat16 codes (uint16), rounding to nearest even."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def to_bf16(x):
    """Rounds float32 values to bfloat16 (nearest even) and returns them as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)
