"""The BLAS executor's bfloat16 GEMMs on operands of every layout it meets in attention and linear
layers (a head-split view of a fused qkv projection whose batch dims do not collapse, its transpose,
transposed weights, a strided linear input, broadcast vectors), jitted, against an independent
reference: the bf16 operands widened to float64, multiplied exactly enough (float64), and rounded to
bfloat16 once, as PyTorch does (f32 accumulation can flip a rounding, so within one bf16 ulp). On CPUs
without a native bf16 matmul these run the executor's widen-multiply-round path, the one the GPT-2 block
takes under autocast. Each layout takes a different widening branch: a strided gather straight into
f32 for views oneDNN cannot take (row-major, or column-major for a transposed view), a gather of a
spread-out 3-D layout, a linear pass over a dense span. A wrong stride or orientation in any of them
gives wrong numbers here. Each test runs twice: with ["blas", "eager"] (the BLAS kernel widens inside) and
with the default executors, where on such CPUs the execution transform spells the bf16 GEMM out as
converts around a float32 GEMM and the fuser takes the converts (test_bf16_gemm_spelled_out_for_the_fuser)."""
import pytest
import torch

import thunder_c

# None: the default executors (fuser, blas, eager)
pytestmark = pytest.mark.parametrize("execs", [["blas", "eager"], None], ids=["blas", "default"])


def J(f, execs):
    return thunder_c.jit(f, executors=execs)


def R(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(torch.bfloat16)


def ref_matmul(a, b):
    return torch.matmul(a.double(), b.double()).to(torch.bfloat16)


def assert_bf16_close(got, want):
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    g, w = got.double(), want.double()
    # one bf16 ulp of the reference: 2^(exponent - 7)
    ulp = torch.ldexp(torch.ones_like(w), torch.frexp(w).exponent - 8)
    bad = (g - w).abs() > ulp
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements off by more than one bf16 ulp"


def heads(qkv, B, T, C, H, i):
    return qkv[..., i * C:(i + 1) * C].reshape(B, T, H, C // H).transpose(1, 2)


@pytest.mark.parametrize("which", ["q@kT", "att@v", "qT@att", "kT^T@att"])
def test_head_split_views(which, execs):
    B, T, C, H = 2, 16, 32, 4
    qkv = R(B, T, 3 * C, seed=1)
    att = R(B, H, T, T, seed=2)

    def f(qkv, att):
        q, k, v = heads(qkv, B, T, C, H, 0), heads(qkv, B, T, C, H, 1), heads(qkv, B, T, C, H, 2)
        if which == "q@kT":
            return q @ k.transpose(-2, -1)
        if which == "att@v":
            return att @ v
        if which == "qT@att":
            return q.transpose(-2, -1) @ att
        return k.transpose(-2, -1).transpose(-2, -1).transpose(-2, -1) @ att

    got = J(f, execs)(qkv, att)
    assert_bf16_close(got, f(qkv.double(), att.double()).to(torch.bfloat16))


@pytest.mark.parametrize("layout", ["row step", "leading dims that do not collapse"])
def test_linear_on_strided_input(layout, execs):
    if layout == "row step":
        x = R(4, 6, 40, seed=3)[:, ::2, 8:]  # rows 80 apart, batches 240: one run of rows, widely spread
    else:
        x = R(6, 4, 40, seed=3).transpose(0, 1)[..., 8:]  # [4, 6, 32], strides (40, 160, 1)
    w = R(24, 32, seed=4)
    bias = R(24, seed=5)
    f = torch.nn.functional.linear
    got = J(f, execs)(x, w, bias)
    want = (torch.nn.functional.linear(x.double(), w.double()) + bias.double()).to(torch.bfloat16)
    assert_bf16_close(got, want)


def test_matmul_with_a_transposed_and_a_sliced_operand(execs):
    a = R(40, 48, seed=6).t()[:, ::2]      # [48, 20], column-major with a column step
    b = R(3, 20, 33, seed=7)[1].t().t()    # [20, 33]
    got = J(torch.matmul, execs)(a, b)
    assert_bf16_close(got, ref_matmul(a, b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_overlapping_batch_view(dtype, execs):
    """A batch stride smaller than the matrix (an as_strided view whose batches overlap): oneDNN refuses
    the layout, so the executor multiplies contiguous copies, also on the bf16 path, which widens the
    operand (keeping the overlapping layout there fails with "primitive creation failed")."""
    st = torch.randn(64, generator=torch.Generator().manual_seed(13)).to(dtype)
    b = st.as_strided((6, 5, 4), (1, 1, 5))
    a = R(6, 3, 5, seed=14).to(dtype)
    got = J(torch.matmul, execs)(a, b)
    want = torch.matmul(a.double(), b.double()).to(dtype)
    if dtype == torch.bfloat16:
        assert_bf16_close(got, want)
    else:
        assert torch.allclose(got.double(), want.double(), rtol=1e-5, atol=1e-6)


def test_vector_operands(execs):
    v = R(3, 20, seed=8)[:, 5]  # stride 20
    m = R(20, 7, seed=9)
    assert_bf16_close(J(torch.matmul, execs)(R(7, seed=10), m.t()), ref_matmul(R(7, seed=10), m.t()))
    assert_bf16_close(J(torch.matmul, execs)(m.t(), R(20, seed=11)[::1]), ref_matmul(m.t(), R(20, seed=11)))
    assert_bf16_close(J(torch.matmul, execs)(R(5, 3, seed=12), v), ref_matmul(R(5, 3, seed=12), v))


def native_bf16_gemm():
    flags = open("/proc/cpuinfo").read()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def test_bf16_gemm_spelled_out_for_the_fuser(execs):
    """Without a native bf16 GEMM and with the fuser listed, the execution trace has no bf16 GEMM: the
    operands are converted to float32 once each (a bf16 value feeding two GEMMs is converted once), the
    GEMMs run in float32, and their results are rounded to bf16 — bit for bit what the BLAS kernel gives
    when it widens internally (["blas", "eager"], which keeps the bf16 GEMM in the trace)."""
    x, w1, w2, b = R(24, 32, seed=13), R(40, 32, seed=14), R(40, 32, seed=15), R(40, seed=16)

    def f(x, w1, w2, b):
        return torch.nn.functional.linear(x, w1, b), x @ w2.t()

    jf = J(f, execs)
    got = jf(x, w1, w2, b)
    want = thunder_c.jit(f, executors=["blas", "eager"])(x, w1, w2, b)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    text = str(thunder_c.last_traces(jf)[-1])
    gemms = [ln for ln in text.splitlines() if "prims.linear(" in ln or "prims.matmul(" in ln]
    assert len(gemms) == 2
    spelled = execs is None and not native_bf16_gemm()
    assert all(('"cpu f32[' in ln) == spelled for ln in gemms), text
    assert all(('"cpu bf16[' in ln) != spelled for ln in gemms), text
    if spelled:
        assert text.count("prims.convert_element_type(x, dtypes.float32)") == 1, text
