"""test_io_numpy.py — thunder-c's .npy, .safetensors and DLPack code against NumPy and PyTorch.

Through ctypes on the shared library ($THUNDER_LIB, else $THUNDER_BUILD_DIR/libthunder.so, else
build/libthunder.so at the repository root):
  * every .npy NumPy writes (all nine supported dtypes, 0-d, empty, Fortran order, format versions
    2.0 and 3.0) is read back exactly, and big-endian / unsupported ones are refused;
  * every .npy we write is loaded by NumPy, and for C-order arrays is byte-identical to np.save's file;
  * .safetensors files we write equal the bytes built here by hand from the format spec (8-byte LE
    header length, compact JSON, spaces to a multiple of 8, data), and hand-built files read back;
  * DLPack round trips with torch.utils.dlpack, zero-copy in both directions.
Run with the project's .venv/bin/python (numpy, torch):
    THUNDER_LIB=build/libthunder.so .venv/bin/python -m pytest tests/python/test_io_numpy.py
"""
import ctypes
import json
import os
import pathlib
import struct

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# th_dtype codes (include/thunder/dtype.h)
TH = {"bool": 0, "uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float16": 6, "bfloat16": 7,
      "float32": 8, "float64": 9, "float8_e4m3fn": 10, "float8_e5m2": 11}
NP_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
TH_OK, TH_ERR_TYPE, TH_ERR_IO = 0, 3, 8


def _lib_path():
    if os.environ.get("THUNDER_LIB"):
        return pathlib.Path(os.environ["THUNDER_LIB"])
    if os.environ.get("THUNDER_BUILD_DIR"):
        return pathlib.Path(os.environ["THUNDER_BUILD_DIR"]) / "libthunder.so"
    return ROOT / "build" / "libthunder.so"


@pytest.fixture(scope="module")
def lib():
    path = _lib_path()
    if not path.exists():
        pytest.fail(f"libthunder.so not found at {path} (set THUNDER_LIB)")
    so = ctypes.CDLL(str(path))
    P, I64P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    sig = {
        "th_tensor_new": (P, [ctypes.c_int, ctypes.c_int, I64P]),
        "th_tensor_view": (P, [P, ctypes.c_int, I64P, I64P, ctypes.c_int64]),
        "th_tensor_release": (None, [P]),
        "th_tensor_dtype": (ctypes.c_int, [P]),
        "th_tensor_ndim": (ctypes.c_int, [P]),
        "th_tensor_shape": (I64P, [P]),
        "th_tensor_strides": (I64P, [P]),
        "th_tensor_numel": (ctypes.c_int64, [P]),
        "th_tensor_data": (P, [P]),
        "th_tensor_is_contiguous": (ctypes.c_bool, [P]),
        "th_tensor_contiguous_copy": (P, [P]),
        "th_tensor_shares_storage": (ctypes.c_bool, [P, P]),
        "th_npy_read": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(P)]),
        "th_npy_write": (ctypes.c_int, [ctypes.c_char_p, P]),
        "th_safetensors_read": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                               ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)),
                                               ctypes.POINTER(ctypes.POINTER(P))]),
        "th_safetensors_write": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                                ctypes.POINTER(P)]),
        "th_safetensors_free": (None, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(P)]),
        "th_tensor_to_dlpack": (P, [P]),
        "th_tensor_from_dlpack": (P, [P]),
        "th_last_error": (ctypes.c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = res, args
    return so


def _np_dtype(name):
    return np.dtype(np.bool_ if name == "bool" else name)


def to_numpy(lib, t):
    """A NumPy copy of th_tensor t (any strides)."""
    c = lib.th_tensor_contiguous_copy(t)
    try:
        name = {v: k for k, v in TH.items()}[lib.th_tensor_dtype(c)]
        shape = tuple(lib.th_tensor_shape(c)[i] for i in range(lib.th_tensor_ndim(c)))
        dt = _np_dtype(name) if name in NP_DTYPES else np.dtype(np.uint16 if name == "bfloat16" else np.uint8)
        n = lib.th_tensor_numel(c) * dt.itemsize
        raw = ctypes.string_at(lib.th_tensor_data(c), n) if n else b""
        return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
    finally:
        lib.th_tensor_release(c)


def from_numpy(lib, a, th_dtype=None):
    """A new th_tensor holding a copy of a (C order)."""
    a = np.array(a, order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
    shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
    t = lib.th_tensor_new(TH[th_dtype or ("bool" if a.dtype == np.bool_ else a.dtype.name)], a.ndim, shape)
    assert t, lib.th_last_error()
    if a.nbytes:
        ctypes.memmove(lib.th_tensor_data(t), a.ctypes.data, a.nbytes)
    return t


def npy_read(lib, path):
    out = ctypes.c_void_p()
    st = lib.th_npy_read(str(path).encode(), ctypes.byref(out))
    return st, out.value


def sample(name, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = _np_dtype(name)
    if name == "bool":
        return np.asarray(rng.integers(0, 2, size=shape)).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.asarray(rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True))
    a = np.asarray(rng.standard_normal(size=shape) * 1000).astype(dt)
    if a.size >= 4:  # specials survive the round trip bit for bit
        a.flat[:4] = [np.inf, -np.inf, np.nan, -0.0]
    return a


SHAPES = [(), (0,), (1,), (7,), (3, 0), (2, 3), (2, 3, 4), (1, 1, 5, 1)]


# ---- .npy written by NumPy, read by thunder-c -------------------------------------------------

@pytest.mark.parametrize("name", NP_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fortran", [False, True])
def test_read_numpy_files(lib, tmp_path, name, shape, fortran):
    a = sample(name, shape, seed=len(shape))
    if fortran:
        a = np.asfortranarray(a)
    p = tmp_path / "a.npy"
    np.save(p, a)
    st, t = npy_read(lib, p)
    assert st == TH_OK, lib.th_last_error()
    try:
        assert lib.th_tensor_is_contiguous(t)
        b = to_numpy(lib, t)
        assert b.dtype == a.dtype and b.shape == a.shape
        assert b.tobytes() == np.ascontiguousarray(a).tobytes()
    finally:
        lib.th_tensor_release(t)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_read_format_versions(lib, tmp_path, version):
    a = np.arange(12, dtype=np.int32).reshape(3, 4).T
    p = tmp_path / "v.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array(f, a, version=version)
    st, t = npy_read(lib, p)
    assert st == TH_OK, lib.th_last_error()
    assert np.array_equal(to_numpy(lib, t), a)
    lib.th_tensor_release(t)


@pytest.mark.parametrize("arr,what", [
    (np.arange(3, dtype=">f4"), b"big-endian"),
    (np.arange(3, dtype=">i2"), b"big-endian"),
    (np.arange(3, dtype=np.uint16), b"unsupported dtype descr '<u2'"),
    (np.arange(3, dtype=np.complex64), b"unsupported dtype descr '<c8'"),
    (np.array(["ab"]), b"unsupported dtype descr '<U2'"),
    (np.zeros(2, dtype=[("x", "<f4")]), b"structured"),
])
def test_refuses_unsupported_numpy_files(lib, tmp_path, arr, what):
    p = tmp_path / "bad.npy"
    np.save(p, arr)
    st, t = npy_read(lib, p)
    assert st == TH_ERR_IO and t is None
    msg = lib.th_last_error()
    assert what in msg and str(p).encode() in msg


def test_truncated_numpy_file(lib, tmp_path):
    p = tmp_path / "t.npy"
    np.save(p, np.arange(10, dtype=np.float64))
    data = p.read_bytes()
    for cut in (3, 9, 60, len(data) - 80, len(data) - 1):
        p.write_bytes(data[:cut])
        st, t = npy_read(lib, p)
        assert st == TH_ERR_IO and t is None, cut
        assert b"truncated" in lib.th_last_error() or b"bad magic" in lib.th_last_error()


# ---- .npy written by thunder-c, read by NumPy -------------------------------------------------

@pytest.mark.parametrize("name", NP_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_write_matches_np_save(lib, tmp_path, name, shape):
    a = sample(name, shape, seed=3)
    t = from_numpy(lib, a)
    ours, theirs = tmp_path / "ours.npy", tmp_path / "theirs.npy"
    try:
        assert lib.th_npy_write(str(ours).encode(), t) == TH_OK, lib.th_last_error()
    finally:
        lib.th_tensor_release(t)
    np.save(theirs, a)
    assert ours.read_bytes() == theirs.read_bytes()
    b = np.load(ours)
    assert b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes()


def test_write_strided_view(lib, tmp_path):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = from_numpy(lib, a)
    shape, strides = (ctypes.c_int64 * 3)(5, 3, 2), (ctypes.c_int64 * 3)(1, 20, 10)  # a[:, ::2, :].transpose(2, 0, 1)
    v = lib.th_tensor_view(t, 3, shape, strides, 0)
    assert v, lib.th_last_error()
    p = tmp_path / "v.npy"
    assert lib.th_npy_write(str(p).encode(), v) == TH_OK
    assert np.array_equal(np.load(p), a[:, ::2, :].transpose(2, 0, 1))
    lib.th_tensor_release(v)
    lib.th_tensor_release(t)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_write_refuses_non_numpy_dtypes(lib, tmp_path, name):
    shape = (ctypes.c_int64 * 1)(4)
    t = lib.th_tensor_new(TH[name], 1, shape)
    p = tmp_path / "x.npy"
    assert lib.th_npy_write(str(p).encode(), t) == TH_ERR_TYPE
    assert b"safetensors" in lib.th_last_error()
    assert not p.exists()
    lib.th_tensor_release(t)


# ---- .safetensors ------------------------------------------------------------------------------

ST_NAMES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64",
            "float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64",
            "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def expected_safetensors(tensors):
    """The file thunder-c should write for {name: (th dtype name, np array of raw values)}: tensors laid
    out by decreasing itemsize then name, compact JSON in that order, header padded to 8."""
    def itemsize(item):
        return item[1][1].dtype.itemsize
    items = sorted(tensors.items(), key=lambda kv: (-itemsize(kv), kv[0].encode()))
    header, data, off = [], b"", 0
    for name, (dt, a) in items:
        raw = np.ascontiguousarray(a).tobytes()
        header.append(json.dumps(name, ensure_ascii=False) + ":" + json.dumps(
            {"dtype": ST_NAMES[dt], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]},
            separators=(",", ":")))
        data += raw
        off += len(raw)
    h = ("{" + ",".join(header) + "}").encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_write(lib, path, tensors):
    names = list(tensors)
    ts = [from_numpy(lib, a, th_dtype=dt) for dt, a in tensors.values()]
    try:
        c_names = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
        c_ts = (ctypes.c_void_p * len(ts))(*ts)
        return lib.th_safetensors_write(str(path).encode(), len(names), c_names, c_ts)
    finally:
        for t in ts:
            lib.th_tensor_release(t)


def st_read(lib, path):
    n = ctypes.c_int()
    names = ctypes.POINTER(ctypes.c_char_p)()
    ts = ctypes.POINTER(ctypes.c_void_p)()
    st = lib.th_safetensors_read(str(path).encode(), ctypes.byref(n), ctypes.byref(names), ctypes.byref(ts))
    if st != TH_OK:
        return st, None
    out = {names[i].decode(): to_numpy(lib, ts[i]) for i in range(n.value)}
    lib.th_safetensors_free(n, names, ts)
    return st, out


def test_safetensors_bytes_match_spec(lib, tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "model.embed": ("float32", rng.standard_normal((3, 4)).astype(np.float32)),
        "b": ("bfloat16", rng.integers(0, 65535, size=(5,), dtype=np.uint16)),
        "a": ("float64", np.array(2.5)),
        "mask": ("bool", np.array([True, False, True])),
        "q": ("float8_e4m3fn", rng.integers(0, 255, size=(2, 2), dtype=np.uint8)),
        "r": ("float8_e5m2", np.zeros((0, 7), dtype=np.uint8)),
        "idx": ("int64", np.arange(4, dtype=np.int64)),
        "h": ("float16", np.float16([1, -2, 3])),
        "i16": ("int16", np.int16([-5])),
        "über": ("int32", np.int32([7, 8])),
        "i8": ("int8", np.int8([-1, 1])),
        "u8": ("uint8", np.uint8([200])),
    }
    p = tmp_path / "m.safetensors"
    assert st_write(lib, p, tensors) == TH_OK, lib.th_last_error()
    assert p.read_bytes() == expected_safetensors(tensors)
    st, back = st_read(lib, p)
    assert st == TH_OK
    assert set(back) == set(tensors)
    for name, (_, a) in tensors.items():
        assert back[name].shape == a.shape and back[name].tobytes() == a.tobytes(), name


def test_safetensors_reads_hand_built_file(lib, tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2, 3], dtype=np.int64)
    header = {"__metadata__": {"format": "pt"},
              "b": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]},
              "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [24, 48]}}
    h = json.dumps(header).encode()  # unpadded, with spaces after separators: both allowed
    p = tmp_path / "h.safetensors"
    p.write_bytes(struct.pack("<Q", len(h)) + h + b.tobytes() + a.tobytes())
    st, back = st_read(lib, p)
    assert st == TH_OK, lib.th_last_error()
    assert np.array_equal(back["a"], a) and np.array_equal(back["b"], b)

    header["a"]["data_offsets"] = [20, 44]  # overlaps b
    h = json.dumps(header).encode()
    p.write_bytes(struct.pack("<Q", len(h)) + h + b.tobytes() + a.tobytes())
    st, _ = st_read(lib, p)
    assert st == TH_ERR_IO and b"overlaps" in lib.th_last_error()


# ---- DLPack with torch -------------------------------------------------------------------------

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype, _capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype, _capsule_set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


@pytest.mark.parametrize("name", ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                                  "float32", "float64"])
def test_dlpack_with_torch(lib, name):
    torch = pytest.importorskip("torch")
    from torch.utils import dlpack
    tdt = getattr(torch, name)
    x = (torch.arange(24) * 3 - 7).to(tdt).reshape(4, 6).t()[1:, ::2]  # strided, with an offset

    # torch -> thunder-c: zero copy, strides preserved; the capsule is consumed.
    cap = dlpack.to_dlpack(x)
    t = lib.th_tensor_from_dlpack(_capsule_ptr(cap, b"dltensor"))
    assert t, lib.th_last_error()
    assert _capsule_set_name(cap, b"used_dltensor") == 0
    assert lib.th_tensor_data(t) == x.data_ptr()
    assert tuple(lib.th_tensor_strides(t)[i] for i in range(2)) == x.stride()
    got = to_numpy(lib, t)
    want = x.contiguous().view(torch.int16 if name == "bfloat16" else tdt).numpy()
    assert got.tobytes() == want.tobytes()

    # thunder-c -> torch: zero copy; torch calls our deleter when it is done.
    m = lib.th_tensor_to_dlpack(t)
    y = dlpack.from_dlpack(_capsule_new(m, b"dltensor", None))
    assert y.data_ptr() == x.data_ptr() and y.stride() == x.stride() and y.dtype == tdt
    assert torch.equal(y, x)
    lib.th_tensor_release(t)
    del y


def test_dlpack_bool_code(lib):
    """bool is exported with DLPack's kDLBool (6, 8 bits); torch 1.13 cannot import it (its DLPack predates
    kDLBool) and refuses, so a Python caller reinterprets such tensors as uint8 itself."""
    torch = pytest.importorskip("torch")
    from torch.utils import dlpack
    t = from_numpy(lib, np.array([True, False]))
    m = lib.th_tensor_to_dlpack(t)
    lib.th_tensor_release(t)
    code, bits = ctypes.string_at(m + 20, 2)  # DLTensor.dtype: after data (8), device (8), ndim (4)
    assert (code, bits) == (6, 8)
    cap = _capsule_new(m, b"dltensor", None)
    try:
        y = dlpack.from_dlpack(cap)
        assert y.dtype == torch.bool and y.tolist() == [True, False]  # a torch with kDLBool
    except RuntimeError:
        # torch 1.13: refused before taking ownership, so release the export ourselves.
        deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(m + 48 + 8).value)
        deleter(m)
