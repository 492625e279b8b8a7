"""torch.unbind / Tensor.unbind (llama2.c's rotary embedding) and torch._assert (vit_b_16's shape check)
under thunder_c.jit against PyTorch eager: unbind's pieces for several dims (negative, size 1, size 0)
and dtypes, alone and inside a fused region, its gradient against torch.autograd, PyTorch's dim errors;
torch._assert with a Python bool (a no-op, or AssertionError(msg) at trace time as in eager) and with a
tensor condition (refused: data-dependent)."""
import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def _close(a, b, dtype):
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype, 1e-5)
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape,dim", [((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), -3),
                                       ((1, 5), 0), ((3, 1), -1), ((0, 3), 0), ((2, 0), 1), ((2, 0), 0), ((6,), 0)])
def test_unbind_forward(shape, dim, dtype):
    x = (torch.randn(shape) * 4).to(dtype)

    def f(x):
        return torch.unbind(x, dim)

    def g(x):
        return x.unbind(dim=dim)

    for fn in (f, g):
        got = thunder_c.jit(fn)(x)
        want = fn(x)
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_unbind_default_dim():
    x = torch.randn(3, 4)
    got = thunder_c.jit(lambda x: x.unbind())(x)
    assert len(got) == 3
    for a, b in zip(got, x.unbind()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unbind_in_fusion(dtype):
    x = torch.randn(4, 5, 3).to(dtype)

    def f(x):
        a, b, c = (x * 2 + 1).unbind(-1)
        return (a.exp() * b - c).sum(0), a + c

    jf = thunder_c.jit(f)
    got, want = jf(x), f(x)
    for a, b in zip(got, want):
        _close(a, b, dtype)


@pytest.mark.parametrize("shape,dim", [((2, 3, 4), 1), ((2, 3, 4), -1), ((1, 5), 0), ((3, 2), 0)])
def test_unbind_grad(shape, dim):
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)

    def f(x):
        ps = torch.unbind(x.sin(), dim)
        return sum(p * (i + 1) for i, p in enumerate(ps)).tanh()

    jf = thunder_c.jit(f)
    out = jf(x)
    want = f(x)
    torch.testing.assert_close(out, want)
    g = torch.randn_like(want)
    (gx,) = torch.autograd.grad(out, x, g)
    (wx,) = torch.autograd.grad(want, x, g)
    torch.testing.assert_close(gx, wx)
    # unbind's own rule: one cat of the unsqueezed cotangents (no zero-padded slice per piece)
    if shape[dim] > 1:
        assert "prims.cat" in str(thunder_c.last_backward_traces(jf)[0])


def test_unbind_grad_some_pieces_unused():
    x = torch.randn(4, 3, requires_grad=True)

    def f(x):
        a, b, c = x.unbind(1)
        return (a * b).sum()  # no gradient reaches c

    out = thunder_c.jit(f)(x)
    (gx,) = torch.autograd.grad(out, x)
    x2 = x.detach().clone().requires_grad_(True)
    (wx,) = torch.autograd.grad(f(x2), x2)
    torch.testing.assert_close(gx, wx)
    assert (gx[:, 2] == 0).all()


def test_unbind_grad_size1_and_empty():
    x = torch.randn(1, 4, requires_grad=True)
    out = thunder_c.jit(lambda x: x.unbind(0)[0].exp().sum())(x)
    (gx,) = torch.autograd.grad(out, x)
    torch.testing.assert_close(gx, x.detach().exp())

    y = torch.randn(0, 4, requires_grad=True)

    def h(y):
        return y.unbind(0), y.sum(0)

    pieces, s = thunder_c.jit(h)(y)
    assert pieces == ()
    (gy,) = torch.autograd.grad(s.sum(), y)
    assert gy.shape == (0, 4)


def _rotary(xq, freqs_cos, freqs_sin):
    # llama2.c's apply_rotary_emb, for one tensor
    xq_r, xq_i = xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)
    freqs_cos = freqs_cos.view(1, xq_r.size(1), 1, xq_r.size(3))
    freqs_sin = freqs_sin.view(1, xq_r.size(1), 1, xq_r.size(3))
    xq_out_r = xq_r * freqs_cos - xq_i * freqs_sin
    xq_out_i = xq_r * freqs_sin + xq_i * freqs_cos
    xq_out = torch.stack([xq_out_r, xq_out_i], dim=-1).flatten(3)
    return xq_out.type_as(xq)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama2c_rotary(dtype):
    B, T, H, D = 2, 5, 3, 8
    xq = torch.randn(B, T, H, D).to(dtype)
    t = torch.arange(T, dtype=torch.float32)[:, None]
    freqs = t * torch.arange(D // 2, dtype=torch.float32)[None, :] * 0.1
    cos, sin = freqs.cos(), freqs.sin()
    got = thunder_c.jit(_rotary)(xq, cos, sin)
    want = _rotary(xq, cos, sin)
    assert got.dtype == want.dtype and got.shape == want.shape
    _close(got, want, dtype)

    xg = torch.randn(B, T, H, D, requires_grad=True)
    out = thunder_c.jit(_rotary)(xg, cos, sin)
    g = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, xg, g)
    x2 = xg.detach().clone().requires_grad_(True)
    (wx,) = torch.autograd.grad(_rotary(x2, cos, sin), x2, g)
    torch.testing.assert_close(gx, wx)


@pytest.mark.parametrize("dim", [2, -3])
def test_unbind_dim_errors(dim):
    x = torch.randn(2, 3)
    with pytest.raises(IndexError) as eager:
        x.unbind(dim)
    with pytest.raises(IndexError) as got:
        thunder_c.jit(lambda x: x.unbind(dim))(x)
    assert str(eager.value) in str(got.value)
    assert f"Dimension out of range (expected to be in range of [-2, 1], but got {dim})" in str(got.value)


def test_unbind_zero_dim_error():
    with pytest.raises(IndexError, match="Dimension specified as 0 but tensor has no dimensions"):
        thunder_c.jit(lambda x: x.unbind(0))(torch.tensor(1.0))


# ---- torch._assert ----------------------------------------------------------------------------------


def _vit_check(x, seq_length):
    torch._assert(x.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {x.shape}")
    torch._assert(x.shape[1] == seq_length, "wrong sequence length")
    return x * 2


def test_assert_true_is_noop():
    x = torch.randn(2, 4, 3)
    jf = thunder_c.jit(lambda x: _vit_check(x, 4))
    torch.testing.assert_close(jf(x), x * 2)
    trace = str(thunder_c.last_traces(jf)[0])
    assert "ltorch.mul(x, 2)" in trace and "assert(" not in trace  # nothing recorded for the checks


def test_assert_false_raises_like_eager():
    x = torch.randn(2, 5, 3)
    with pytest.raises(AssertionError, match="wrong sequence length") as eager:
        _vit_check(x, 4)
    with pytest.raises(AssertionError) as got:
        thunder_c.jit(lambda x: _vit_check(x, 4))(x)
    assert str(got.value) == str(eager.value)


def test_assert_tensor_condition_refused():
    x = torch.randn(3)

    def f(x):
        torch._assert(x.sum() > 0, "positive")
        return x + 1

    with pytest.raises(NotImplementedError, match=r"torch\._assert with a tensor condition"):
        thunder_c.jit(f)(x)
