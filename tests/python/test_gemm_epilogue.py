"""GEMM epilogues: the execution transform folds a GEMM the BLAS executor claims and the elementwise ops
after it (GELU tanh/erf, SiLU, ReLU, a residual add, a scale, a conversion) into one bsym BLAS claims,
which runs one oneDNN matmul with the ops as post-ops (src/executors/passes.c, "GEMM epilogues";
src/executors/blas.c). Each case is checked three ways: the printed execution trace shows the fused op
(and, with THUNDER_GEMM_EPILOGUE=0, does not), the fused result matches the unfused path (the same
program compiled with the epilogue off), and both match PyTorch eager. A GEMM result with a second
consumer, or one a grad transform's forward saves for the backward, is not folded, and gradients still
match eager's."""
import pytest
import torch
import torch.nn.functional as F

import thunder_c
from thunder_c import last_traces


def R(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def run(fn, args, monkeypatch, epilogue, execs=None):
    monkeypatch.setenv("THUNDER_GEMM_EPILOGUE", "1" if epilogue else "0")
    jf = thunder_c.jit(fn, executors=execs)
    out = jf(*args)
    return out, str(last_traces(jf)[-1])


def check(fn, args, monkeypatch, fused_name, rtol, atol, execs=None):
    got, trace = run(fn, args, monkeypatch, True, execs)
    assert f"{fused_name}0(" in trace, trace
    ref, trace_off = run(fn, args, monkeypatch, False, execs)
    assert f"{fused_name}0(" not in trace_off, trace_off
    want = fn(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    return trace


EXECS = pytest.mark.parametrize("execs", [None, ["blas", "eager"]], ids=["default", "blas"])


@EXECS
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_linear_gelu(approximate, execs, monkeypatch):
    x, w, b = R(2, 24, 64, seed=1), R(96, 64, seed=2) * 0.2, R(96, seed=3)
    trace = check(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate=approximate), (x, w, b), monkeypatch,
                  "linear_gelu", 1e-5, 1e-5, execs)
    # the GEMM and the activation are the fused op's subsymbols
    assert "# t0 = ltorch.linear(x, w, b)" in trace and "ltorch.gelu(t0" in trace


@EXECS
def test_linear_silu(execs, monkeypatch):
    x, w = R(48, 64, seed=4), R(80, 64, seed=5) * 0.2
    check(lambda x, w: F.silu(F.linear(x, w)), (x, w), monkeypatch, "linear_silu", 1e-5, 1e-5, execs)


@EXECS
def test_linear_relu(execs, monkeypatch):
    x, w, b = R(48, 64, seed=6), R(80, 64, seed=7), R(80, seed=8)
    check(lambda x, w, b: torch.relu(F.linear(x, w, b)), (x, w, b), monkeypatch, "linear_relu", 1e-6, 1e-6,
          execs)


@EXECS
def test_matmul_residual_add(execs, monkeypatch):
    a, bm, r = R(40, 72, seed=9), R(72, 56, seed=10), R(40, 56, seed=11)
    check(lambda a, bm, r: r + a @ bm, (a, bm, r), monkeypatch, "matmul_add", 1e-6, 1e-5, execs)


@EXECS
def test_linear_gelu_residual_scale(execs, monkeypatch):
    x, w, b, r = R(32, 64, seed=12), R(64, 64, seed=13) * 0.2, R(64, seed=14), R(32, 64, seed=15)
    check(lambda x, w, b, r: (F.gelu(F.linear(x, w, b), approximate="tanh") + r) * 0.5, (x, w, b, r), monkeypatch,
          "linear_gelu_add_mul", 1e-5, 1e-5, execs)


def test_f32_linear_to_bf16(monkeypatch):
    # f32 GEMM, result rounded to bf16: a conversion joins the GEMM only where oneDNN makes a matmul
    # with a bf16 dst from f32 operands (oneDNN 2.6 does not); either way one rounding, as eager
    x, w, b = R(32, 64, seed=16), R(48, 64, seed=17), R(48, seed=18)
    fn = lambda x, w, b: F.linear(x, w, b).to(torch.bfloat16)  # noqa: E731
    got, _ = run(fn, (x, w, b), monkeypatch, True)
    torch.testing.assert_close(got, fn(x, w, b), rtol=0, atol=0)


def bf16_ulps(got, want):
    g, w = got.double(), want.double()
    ulp = torch.ldexp(torch.ones_like(w), torch.frexp(w).exponent - 8)
    return ((g - w).abs() / ulp).max().item()


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_bf16_linear_gelu(approximate, monkeypatch):
    # The unfused path rounds the GEMM result to bf16 before the GELU; the fused one rounds once, at the
    # end: they differ by what one rounding of the pre-activation moves the GELU, about one bf16 ulp.
    x, w, b = R(2, 24, 64, seed=19, dtype=torch.bfloat16), R(96, 64, seed=20, dtype=torch.bfloat16), R(
        96, seed=21, dtype=torch.bfloat16)
    fn = lambda x, w, b: F.gelu(F.linear(x, w, b), approximate=approximate)  # noqa: E731
    got, trace = run(fn, (x, w, b), monkeypatch, True)
    if "linear_gelu0(" not in trace:
        pytest.skip("no bf16 matmul in oneDNN on this CPU: bf16 GEMMs are widened and not fused")
    ref, trace_off = run(fn, (x, w, b), monkeypatch, False)
    assert "linear_gelu0(" not in trace_off
    want = fn(x, w, b)
    assert got.dtype == torch.bfloat16
    # relative to the output's ulp, with an absolute floor near GELU's zero crossings
    torch.testing.assert_close(got.float(), ref.float(), rtol=2 ** -7, atol=2 ** -6)
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=2 ** -6)
    assert bf16_ulps(got[want.abs() > 0.5], want[want.abs() > 0.5]) <= 2


def test_bf16_linear_to_f32(monkeypatch):
    # bf16 GEMM then .float(): dst f32, so the fused result skips the bf16 rounding the unfused path
    # makes (within half a bf16 ulp of it)
    x, w = R(32, 64, seed=34, dtype=torch.bfloat16), R(48, 64, seed=35, dtype=torch.bfloat16)
    fn = lambda x, w: F.linear(x, w).float()  # noqa: E731
    got, trace = run(fn, (x, w), monkeypatch, True)
    if "linear_convert0(" not in trace:
        pytest.skip("no bf16 matmul in oneDNN on this CPU: bf16 GEMMs are widened and not fused")
    ref, _ = run(fn, (x, w), monkeypatch, False)
    want = torch.matmul(x.double(), w.double().t())
    assert got.dtype == torch.float32
    assert ((got.double() - want).abs() <= (ref.double() - want).abs() + 1e-4).all()
    torch.testing.assert_close(got, ref, rtol=2 ** -8, atol=1e-5)


def test_second_consumer_not_fused(monkeypatch):
    x, w, b = R(16, 32, seed=22), R(24, 32, seed=23), R(24, seed=24)

    def fn(x, w, b):
        y = F.linear(x, w, b)
        return F.gelu(y, approximate="tanh") + y  # y is read twice: the GEMM must write it

    got, trace = run(fn, (x, w, b), monkeypatch, True)
    assert "linear_gelu" not in trace and "prims.linear(x, w, b)" in trace, trace
    torch.testing.assert_close(got, fn(x, w, b), rtol=1e-5, atol=1e-5)


def test_returned_intermediate_not_fused(monkeypatch):
    x, w = R(16, 32, seed=25), R(24, 32, seed=26)

    def fn(x, w):
        y = x @ w.t()
        return y, torch.relu(y)

    (y, z), trace = run(fn, (x, w), monkeypatch, True)
    assert "matmul_relu" not in trace, trace
    torch.testing.assert_close(y, x @ w.t())
    torch.testing.assert_close(z, torch.relu(x @ w.t()))


def test_grad_path_matches_eager(monkeypatch):
    # the forward saves the pre-activation for GELU's backward: that GEMM keeps its output; the
    # backward's GEMMs may take epilogues of their own. Gradients match eager.
    monkeypatch.setenv("THUNDER_GEMM_EPILOGUE", "1")
    x = R(2, 16, 32, seed=27)
    w1, b1 = R(64, 32, seed=28) * 0.2, R(64, seed=29)
    w2, r = R(32, 64, seed=30) * 0.2, R(2, 16, 32, seed=31)

    def fn(x, w1, b1, w2, r):
        h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
        return F.linear(h, w2) + r

    ins = [t.clone().requires_grad_(True) for t in (x, w1, b1, w2, r)]
    ref_ins = [t.clone().requires_grad_(True) for t in (x, w1, b1, w2, r)]
    jf = thunder_c.jit(fn)
    out = jf(*ins)
    want = fn(*ref_ins)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    g = R(2, 16, 32, seed=32)
    out.backward(g)
    want.backward(g)
    for a, e in zip(ins, ref_ins):
        torch.testing.assert_close(a.grad, e.grad, rtol=1e-4, atol=1e-5)
    fwd = str(last_traces(jf)[-1])
    assert "linear_gelu" not in fwd, fwd  # t0 is saved for the backward
    assert "linear_add0(" in fwd, fwd  # the second linear's output is read only by the residual add


def test_torch_module_mlp(monkeypatch):
    # nn.Linear layers with a GELU between them and a residual, as a transformer MLP
    monkeypatch.setenv("THUNDER_GEMM_EPILOGUE", "1")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(128, 32))
    x = R(4, 8, 32, seed=33)
    jm = thunder_c.jit(m)
    with torch.no_grad():
        got, want = jm(x), m(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert "linear_gelu0(" in str(last_traces(jm)[-1])


def test_strided_operands_and_residual(monkeypatch):
    # transposed views as the GEMM's input and as the residual (copied to the output's layout)
    a, bm, r = R(72, 40, seed=36).t(), R(72, 56, seed=37), R(56, 40, seed=38).t()
    check(lambda a, bm, r: a @ bm + r, (a, bm, r), monkeypatch, "matmul_add", 1e-6, 1e-5)


def test_parsed_trace_without_subsymbols(monkeypatch, tmp_path):
    # a trace in Thunder's printed format at depth 1 (as bench_gpt2 builds): ltorch ops without
    # decompositions still fold
    src = """def computation(x, w, b, r):
  # x: "cpu f32[8, 32]"
  # w: "cpu f32[16, 32]"
  # b: "cpu f32[16]"
  # r: "cpu f32[8, 16]"
  t0 = ltorch.linear(x, w, b)
  t1 = ltorch.gelu(t0, approximate='tanh')
  t2 = ltorch.add(r, t1, alpha=None)
  return t2
"""
    import numpy as np
    from conftest import run_cli

    prog = tmp_path / "mlp.py"
    prog.write_text(src)
    outs = {}
    for on in ("1", "0"):
        monkeypatch.setenv("THUNDER_GEMM_EPILOGUE", on)
        out = tmp_path / f"out{on}.npy"
        p = run_cli("run", prog, "--random-inputs", "7", "--print-trace", "--quiet", "--output", out, check=True)
        assert ("t2 = linear_gelu_add0(x, w, b, r)" in p.stdout) == (on == "1"), p.stdout
        outs[on] = np.load(out)
    np.testing.assert_allclose(outs["1"], outs["0"], rtol=1e-5, atol=1e-6)


def test_primitive_cache_keys_on_the_chain(monkeypatch):
    # the same GEMM (shapes, layouts, dtype) plain, with ReLU, with GELU and with a scale in one
    # program: oneDNN primitives are cached by problem, so each chain must be a key of its own
    x = R(24, 40, seed=39)
    ws = [R(32, 40, seed=40 + i) for i in range(4)]  # distinct weights, or CSE would merge the GEMMs

    def fn(x, w0, w1, w2, w3):
        return F.linear(x, w0), torch.relu(F.linear(x, w1)), F.gelu(F.linear(x, w2)), F.linear(x, w3) * 3.0

    monkeypatch.setenv("THUNDER_GEMM_EPILOGUE", "1")
    jf = thunder_c.jit(fn)
    for _ in range(2):
        got = jf(x, *ws)
        for g, e in zip(got, fn(x, *ws)):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    trace = str(last_traces(jf)[-1])
    assert "linear_relu" in trace and "linear_gelu" in trace and "linear_mul" in trace, trace
