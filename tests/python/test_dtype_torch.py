"""test_dtype_torch.py — thunder-c's scalar float conversions against PyTorch itself.

Calls th_f32_to_f16 / th_f32_to_bf16 / th_f16_to_f32 / th_bf16_to_f32 and the fp8 ones through ctypes
and compares them with torch's own casts: every 16-bit and 8-bit code for decoding, and random plus
hand-picked float32 inputs (ties, subnormals, overflow edges) for encoding. torch >= 2.12's
float8_e4m3fn cast saturates (everything past 448, inf included, gives 448), e5m2's overflows to inf.

The library is $THUNDER_LIB if set, else $THUNDER_BUILD_DIR/libthunder.so (CTest sets the variable);
when neither is there or it cannot be loaded (a sanitizer build wants its runtime loaded first),
src/core/dtype.c is compiled into a small shared object for the test: it needs nothing but
core/scalar.h and the public headers.
Run with the project's .venv/bin/python (numpy, torch):
    .venv/bin/python -m pytest tests/python/test_dtype_torch.py
"""
import ctypes
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_library(tmp_path_factory):
    candidates = [os.environ.get("THUNDER_LIB")]
    if os.environ.get("THUNDER_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["THUNDER_BUILD_DIR"], "libthunder.so"))
    for path in candidates:
        if path and os.path.exists(path):
            try:
                return ctypes.CDLL(path)
            except OSError:
                pass
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no libthunder.so to load and no C compiler")
    path = str(tmp_path_factory.mktemp("dtype") / "libdtype.so")
    subprocess.run([cc, "-std=c11", "-O2", "-shared", "-fPIC", "-I", str(ROOT / "include"), "-I",
                    str(ROOT / "src"), str(ROOT / "src/core/dtype.c"), "-o", path], check=True)
    return ctypes.CDLL(path)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = load_library(tmp_path_factory)
    for name in ("th_f32_to_f16", "th_f32_to_bf16"):
        getattr(so, name).argtypes = [ctypes.c_float]
        getattr(so, name).restype = ctypes.c_uint16
    for name in ("th_f16_to_f32", "th_bf16_to_f32"):
        getattr(so, name).argtypes = [ctypes.c_uint16]
        getattr(so, name).restype = ctypes.c_float
    for name in ("th_f32_to_f8e4m3fn", "th_f32_to_f8e5m2"):
        getattr(so, name).argtypes = [ctypes.c_float, ctypes.c_bool]
        getattr(so, name).restype = ctypes.c_uint8
    for name in ("th_f8e4m3fn_to_f32", "th_f8e5m2_to_f32"):
        getattr(so, name).argtypes = [ctypes.c_uint8]
        getattr(so, name).restype = ctypes.c_float
    return so


def f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def call_encode(fn, bits, *extra):
    """fn over float32 bit patterns. A float crosses ctypes as a Python float (a double), and the
    float32 -> double -> float32 trip quiets signaling NaNs, so NaN inputs are only checked loosely."""
    floats = bits.view(np.float32)
    return np.array([fn(ctypes.c_float(f), *extra) for f in floats.tolist()], dtype=np.uint32)


def call_decode(fn, codes):
    """fn over codes, as float32 bits. The result crosses ctypes as a double, which quiets a signaling
    NaN, so NaN results are compared for NaN-ness only (test_dtype.c checks their exact bits)."""
    out = np.array([fn(int(c)) for c in codes], dtype=np.float32)
    return out.view(np.uint32)


def assert_same_or_both_nan(got, want):
    nan = np.isnan(want.view(np.float32))
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan].view(np.float32)).all()
    np.testing.assert_array_equal(got[nan] >> 31, want[nan] >> 31)


def torch_encode(bits, dtype, width=np.uint16):
    t = torch.from_numpy(bits.view(np.float32).copy()).to(dtype)
    itype = torch.int16 if width == np.uint16 else torch.int8
    return t.view(itype).numpy().view(width).astype(np.uint32)


def encode_inputs():
    """Random float32 patterns over every exponent, plus a band around each format's range with exact ties."""
    rng = np.random.default_rng(1234)
    rand = rng.integers(0, 2**32, size=40000, dtype=np.uint64).astype(np.uint32)
    # exponents -30..20 (float16's range and a little beyond), random mantissas
    exp = rng.integers(127 - 30, 127 + 20, size=40000).astype(np.uint32)
    mant = rng.integers(0, 2**23, size=40000).astype(np.uint32)
    sign = rng.integers(0, 2, size=40000).astype(np.uint32) << 31
    band = sign | (exp << 23) | mant
    ties16 = (band & ~np.uint32(0x1FFF)) | np.uint32(0x1000)  # exact float16 ties (normal range)
    ties_bf = (rand & ~np.uint32(0xFFFF)) | np.uint32(0x8000)  # exact bfloat16 ties
    special = f32_bits([0.0, -0.0, 1.0, 65504.0, 65519.0, 65520.0, 2.0**-24, 2.0**-25, 3 * 2.0**-25,
                        np.inf, -np.inf, 3.4028235e38, 1e-45, -1e-45, 1.1754942e-38])
    sub = np.array([0x1, 0x8000, 0x18000, 0x7FFFFF, 0x80008001, 0x00400000], dtype=np.uint32)
    return np.concatenate([rand, band, ties16, ties_bf, special, sub])


def test_f16_decode_every_code(lib):
    codes = np.arange(65536, dtype=np.uint32)
    want = torch.from_numpy(codes.astype(np.uint16).view(np.int16)).view(torch.float16).float().numpy().view(np.uint32)
    got = call_decode(lib.th_f16_to_f32, codes)
    assert_same_or_both_nan(got, want)


def test_bf16_decode_every_code(lib):
    codes = np.arange(65536, dtype=np.uint32)
    want = torch.from_numpy(codes.astype(np.uint16).view(np.int16)).view(torch.bfloat16).float().numpy().view(np.uint32)
    got = call_decode(lib.th_bf16_to_f32, codes)
    assert_same_or_both_nan(got, want)


def test_f16_encode(lib):
    bits = encode_inputs()
    got = call_encode(lib.th_f32_to_f16, bits)
    want = torch_encode(bits, torch.float16)
    nan_in = np.isnan(bits.view(np.float32))
    np.testing.assert_array_equal(got[~nan_in], want[~nan_in])
    # NaN: both NaN with the input's sign (payload: we follow vcvtps2ph, torch 1.13's c10 gives 0x7e00|sign)
    nan_got = ((got & 0x7C00) == 0x7C00) & ((got & 0x3FF) != 0)
    assert nan_got[nan_in].all()
    np.testing.assert_array_equal(got[nan_in] & 0x8000, want[nan_in] & 0x8000)


def test_bf16_encode(lib):
    bits = encode_inputs()
    got = call_encode(lib.th_f32_to_bf16, bits)
    want = torch_encode(bits, torch.bfloat16)
    nan_in = np.isnan(bits.view(np.float32))
    np.testing.assert_array_equal(got[~nan_in], want[~nan_in])
    # NaN: c10's scalar path gives 0x7fc0; torch 1.13's AVX2 path gives 0xffff. We give 0x7fc0.
    assert (got[nan_in] == 0x7FC0).all()
    assert (((want[nan_in] & 0x7F80) == 0x7F80) & ((want[nan_in] & 0x7F) != 0)).all()


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_against_torch(lib, name):
    if not hasattr(torch, name):
        pytest.skip(f"torch {torch.__version__} has no {name}")
    dtype = getattr(torch, name)
    short = "e4m3fn" if name.endswith("e4m3fn") else "e5m2"
    codes = np.arange(256, dtype=np.uint32)
    want = torch.from_numpy(codes.astype(np.uint8)).view(dtype).float().numpy().view(np.uint32)
    got = call_decode(getattr(lib, f"th_f8{short}_to_f32"), codes)
    assert_same_or_both_nan(got, want)
    bits = encode_inputs()
    fn = getattr(lib, f"th_f32_to_f8{short}")
    got = call_encode(fn, bits, False)
    want = torch_encode(bits, dtype, np.uint8)
    np.testing.assert_array_equal(got, want)
    # the saturating cast is torch's cast of the clamped value (torchao's to_fp8_saturated); for e4m3fn,
    # whose plain cast saturates already, it is the same function
    mx = torch.finfo(dtype).max
    x = torch.from_numpy(bits.view(np.float32).copy())
    want_sat = x.clamp(-mx, mx).to(dtype).view(torch.int8).numpy().view(np.uint8).astype(np.uint32)
    got_sat = call_encode(fn, bits, True)
    np.testing.assert_array_equal(got_sat, want_sat)
    if short == "e4m3fn":
        np.testing.assert_array_equal(got_sat, got)
    # the overflow edges, both signs (1000, inf, -1e30 -> 448, 448, -448 for e4m3fn in torch 2.14)
    edges = f32_bits([448.0, 464.0, 464.00003, 479.99997, 480.0, 1000.0, 57344.0, 61439.996, 61440.0, 65536.0,
                      1e30, np.inf])
    edges = np.concatenate([edges, edges | np.uint32(0x80000000)])
    np.testing.assert_array_equal(call_encode(fn, edges, False), torch_encode(edges, dtype, np.uint8))
