"""bf16 and f16 loads, stores and roundings in fused kernels, bit for bit against PyTorch's conversions
and thunder-c's unfused executors, for a sample of float32 bit patterns (every rounding class: ties to
even and odd, NaNs with payloads, infinities, subnormals, the overflow edge) and all 2^16 bf16/f16 bit
patterns; and the same checks (plus powers) with the kernels built for lesser CPUs through
THUNDER_FUSER_MARCH (x86-64-v3: AVX2 without AVX-512; x86-64: SSE2 only), the fallback paths of a
machine without AVX-512 or FMA.

Run as a script (`python test_fuser_bf16.py --check`) it runs the checks in that process: the tests
start it with THUNDER_FUSER_MARCH set."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch

UNFUSED = ["blas", "eager"]


def f32_patterns():
    g = torch.Generator().manual_seed(1)
    rnd = torch.randint(-(1 << 31), 1 << 31, (1 << 18,), generator=g, dtype=torch.int64)
    hi = torch.randint(0, 1 << 16, (4096,), generator=g, dtype=torch.int64) << 16
    edges = []
    for low in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF):  # ties and their neighbours
        edges.append(hi | low)
        edges.append((hi | (1 << 16)) | low)  # odd bit 16
    special = torch.tensor([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF,
                            0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x00000001, 0x80000001, 0x00008000, 0x00018000,
                            0x007FFFFF, 0x00800000, 0x807FFFFF, 0x00000000, 0x80000000, 0x477FF000, 0x477FEFFF,
                            0x33000000, 0x33000001, 0x387FE000, 0x38800000], dtype=torch.int64)
    allp = torch.cat([rnd, *edges, special])
    allp = torch.where(allp >= 1 << 31, allp - (1 << 32), allp)
    return allp.to(torch.int32).view(torch.float32)


def bits_equal(a, b, nan_bits=True):
    ia = a.view(torch.int16 if a.element_size() == 2 else torch.int32)
    ib = b.view(torch.int16 if b.element_size() == 2 else torch.int32)
    if nan_bits:
        return torch.equal(ia, ib)
    n = a.isnan()
    return torch.equal(n, b.isnan()) and torch.equal(ia[~n], ib[~n])


def check_conversions(thunder_c):
    x = f32_patterns()
    for dt in (torch.bfloat16, torch.float16):
        # f32 -> low precision: one rounding of the fused product (x * 1 is exact; a NaN stays NaN)
        f = lambda t: (t * 1.0).to(dt)  # noqa: E731
        got = thunder_c.jit(f)(x)
        # torch's NaN is 0x7fc0 from its scalar bf16 conversion but 0xffff from its vectorized one; the
        # eager executor and the fuser give the scalar 0x7fc0 (checked against the unfused result)
        assert bits_equal(got, f(x), nan_bits=False), f"{dt}: f32 -> {dt} differs from torch's conversion"
        nan16 = torch.tensor([0x7FC0 if dt == torch.bfloat16 else 0x7E00], dtype=torch.int16)
        if dt == torch.bfloat16:
            assert torch.equal(got.view(torch.int16)[got.isnan()].unique(), nan16)
        assert bits_equal(got, thunder_c.jit(f, executors=UNFUSED)(x)), f"{dt}: fused vs unfused"
        # all 2^16 patterns loaded, computed in f32 and stored again (x * 2: gcc folds x * 1 to x, which
        # would keep a signaling NaN that the unfused multiply quiets)
        h = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dt)
        g = lambda t: (t.float() * 2.0, (t.float() * 3.0 + 0.5).to(dt))  # noqa: E731
        a, b = thunder_c.jit(g)(h)
        ra, rb = g(h)
        assert bits_equal(a, ra), f"{dt}: load of all patterns differs from torch's"
        assert bits_equal(b, rb, nan_bits=False), f"{dt}: load-compute-store differs from torch's"
        ua, ub = thunder_c.jit(g, executors=UNFUSED)(h)
        assert bits_equal(a, ua) and bits_equal(b, ub), f"{dt}: fused vs unfused"
    # a bf16 elementwise chain and a bf16 softmax against the unfused executors (same bits)
    y = torch.randn(64, 1000).bfloat16()
    for fn in (lambda t: torch.nn.functional.gelu(t * 2.0 + 1.0, approximate="tanh"), lambda t: torch.exp(t - 1.0)):
        assert bits_equal(thunder_c.jit(fn)(y), thunder_c.jit(fn, executors=UNFUSED)(y)) or torch.allclose(
            thunder_c.jit(fn)(y).float(), thunder_c.jit(fn, executors=UNFUSED)(y).float(), rtol=8e-3, atol=1e-5)
    # powers: torch's own forms bit for bit
    z = torch.randn(1 << 14) * 3
    for n in (2.0, 3.0, -1.0, -2.0):
        f = lambda t: torch.pow(t, n) * 1.0  # noqa: E731
        got, ref = thunder_c.jit(f)(z), f(z)
        assert torch.equal(got, ref), f"pow(x, {n})"
    f = lambda t: torch.pow(t, 2.5) * 1.0  # noqa: E731
    torch.testing.assert_close(thunder_c.jit(f)(z.abs()), f(z.abs()), rtol=1.2e-7, atol=0)


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import PYTHON_DIR, import_thunder_c  # noqa: E402


def test_bf16_f16_conversions_bit_identical_native():
    check_conversions(import_thunder_c())


def run_checks(march, cache):
    env = dict(os.environ, THUNDER_FUSER_MARCH=march, XDG_CACHE_HOME=str(cache),
               PYTHONPATH=str(PYTHON_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, __file__, "--check"], env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"])
def test_conversions_and_powers_on_lesser_cpus(march, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 ISA levels")
    p = run_checks(march, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    # the kernels in this cache were built for that level: no AVX-512 (zmm) instruction in any
    sos = list(tmp_path.rglob("fusion-*.so"))
    assert sos
    for so in sos:
        d = subprocess.run(["objdump", "-d", str(so)], capture_output=True, text=True)
        if d.returncode != 0:
            pytest.skip("no objdump")
        assert "zmm" not in d.stdout
        if march == "x86-64":
            assert "ymm" not in d.stdout and "vfmadd" not in d.stdout


def test_march_override_reaches_the_compiler(tmp_path):
    p = run_checks("no-such-cpu-xyz", tmp_path)
    assert p.returncode != 0 and "no-such-cpu-xyz" in p.stdout + p.stderr


def test_march_override_malformed_is_value_error():
    code = ("import torch, thunder_c\n"
            "try:\n thunder_c.jit(lambda t: (t * 2.0).exp())(torch.ones(4))\n"
            "except ValueError as e:\n print('VALUE', e)\n")
    env = dict(os.environ, THUNDER_FUSER_MARCH="native -O0",
               PYTHONPATH=str(PYTHON_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "VALUE" in p.stdout and "THUNDER_FUSER_MARCH" in p.stdout, p.stdout + p.stderr


if __name__ == "__main__" and "--check" in sys.argv:
    import thunder_c

    check_conversions(thunder_c)
    print("ok")
