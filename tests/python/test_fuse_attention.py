"""Attention written out by hand (nanoGPT's and minGPT's path without flash: q @ k^T, a scale, masked_fill
with -inf, softmax, dropout 0, @ v) compiles to the fused flash-attention prim (transforms/
fuse_attention.c), against PyTorch eager and float64:
  * the traces show prims.scaled_dot_product_flash_attention (and none with THUNDER_FUSE_ATTENTION=0);
  * float32 outputs and gradients equal eager's within 1e-5 over the chain's variants (multiply or
    divide by a constant, no scale, no mask, dropout p=0, a registered tril buffer, a k^T that is not a
    transpose op);
  * bfloat16: no farther from the float64 result than eager bfloat16 (the chain rounds at every op);
  * a row whose every key is masked is NaN, as eager's softmax gives it;
  * chains whose scores or probabilities are used elsewhere, float64, dropout p > 0, a mask that widens
    the scores and fewer than 128 keys (the fused kernel's tiles gain nothing there) stay unfused."""
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
from gpt2_module import CausalSelfAttention  # noqa: E402

FLASH = "prims.scaled_dot_product_flash_attention"


def rnd(*shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def traces_text(jf):
    return "\n".join(str(t) for t in thunder_c.last_traces(jf))


def fwd_bwd(fn, ins, seed=7, ngrad=3):
    """fn's output and the gradients of its first ngrad inputs for a random cotangent."""
    xs = [t.detach().clone().requires_grad_(i < ngrad) for i, t in enumerate(ins)]
    out = fn(*xs)
    g = rnd(*out.shape, seed=seed, dtype=torch.float64).to(out.dtype)
    grads = torch.autograd.grad(out, [x for x in xs if x.requires_grad], g)
    return out.detach(), grads


def tril(T):
    return torch.tril(torch.ones(T, T)).view(1, 1, T, T)


def manual(scale_kind="mul", masked=True, dropout=False):
    def f(q, k, v, bias):
        T = q.size(-2)
        att = q @ k.transpose(-2, -1)
        if scale_kind == "mul":
            att = att * (1.0 / math.sqrt(k.size(-1)))
        elif scale_kind == "div":
            att = att / math.sqrt(k.size(-1))
        if masked:
            att = att.masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        if dropout:
            att = F.dropout(att, 0.0, training=True)
        return att @ v

    return f


VARIANTS = [("mul", True, False), ("div", True, False), ("none", True, False), ("mul", False, False),
            ("mul", True, True)]


@pytest.mark.parametrize("scale_kind,masked,dropout", VARIANTS, ids=["-".join(map(str, v)) for v in VARIANTS])
def test_chain_variants_fuse_and_match_eager_float32(scale_kind, masked, dropout):
    q, k, v = (rnd(2, 3, 130, 32, seed=s) for s in (1, 2, 3))
    fn = manual(scale_kind, masked, dropout)
    ins = [q, k, v, tril(140)]
    jf = thunder_c.jit(fn)
    out, grads = fwd_bwd(jf, ins)
    assert FLASH in traces_text(jf), traces_text(jf)
    want, wgrads = fwd_bwd(fn, ins)
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-5)
    for g, w in zip(grads, wgrads):
        torch.testing.assert_close(g, w, atol=3e-5, rtol=1e-5)


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("THUNDER_FUSE_ATTENTION", "0")
    q, k, v = (rnd(1, 2, 130, 32, seed=s) for s in (1, 2, 3))
    fn = manual()
    jf = thunder_c.jit(fn)
    out = jf(q, k, v, tril(130))
    assert FLASH not in traces_text(jf)
    torch.testing.assert_close(out, fn(q, k, v, tril(130)), atol=2e-5, rtol=1e-5)


def test_nanogpt_attention_module_fuses_forward_and_backward():
    torch.manual_seed(0)
    m = CausalSelfAttention(64, 4, 130)
    x = rnd(2, 130, 64, seed=4)
    jm = thunder_c.jit(m)
    out, (gx,) = fwd_bwd(jm, [x], ngrad=1)
    assert FLASH in traces_text(jm)
    bwd = "\n".join(str(t) for t in thunder_c.last_backward_traces(jm))
    assert "prims.scaled_dot_product_flash_attention_backward" in bwd
    want, (wx,) = fwd_bwd(m, [x], ngrad=1)
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(gx, wx, atol=3e-5, rtol=1e-5)


def test_bfloat16_no_farther_from_float64_than_eager():
    q, k, v = (rnd(2, 4, 130, 64, seed=s) for s in (1, 2, 3))
    fn = manual()
    ins = [t.bfloat16() for t in (q, k, v)] + [tril(130)]
    jf = thunder_c.jit(fn)
    out = jf(*ins)
    assert FLASH in traces_text(jf) and out.dtype == torch.bfloat16
    want = fn(*ins)
    exact = fn(*[t.double() for t in ins[:3]], tril(130))
    err, werr = (out.double() - exact).abs().max().item(), (want.double() - exact).abs().max().item()
    assert err <= werr, (err, werr)


def test_fully_masked_rows_are_nan_as_in_eager():
    q, k, v = (rnd(1, 2, 130, 32, seed=s) for s in (1, 2, 3))
    mask = rnd(130, 130, seed=5) > 0.5
    mask[3] = True  # row 3: every key masked

    def f(q, k, v, m):
        return F.softmax((q @ k.transpose(-2, -1) * 0.2).masked_fill(m, float("-inf")), dim=-1) @ v

    jf = thunder_c.jit(f)
    out = jf(q, k, v, mask)
    want = f(q, k, v, mask)
    assert FLASH in traces_text(jf)
    assert torch.isnan(want[:, :, 3]).all() and torch.isnan(out[:, :, 3]).all()
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-5, equal_nan=True)


def test_key_transposed_by_mT_and_bias_free_mask():
    q, k, v = (rnd(2, 2, 130, 32, seed=s) for s in (1, 2, 3))
    m = torch.triu(torch.ones(130, 130, dtype=torch.bool), diagonal=1)

    def f(q, k, v):
        kt = k.mT.contiguous()  # not a transpose op: transposed back inside the fused call
        return torch.softmax((q @ kt / 4.0).masked_fill(m, -math.inf), dim=-1) @ v

    jf = thunder_c.jit(f)
    out, grads = fwd_bwd(jf, [q, k, v])
    assert FLASH in traces_text(jf)
    want, wgrads = fwd_bwd(f, [q, k, v])
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-5)
    for g, w in zip(grads, wgrads):
        torch.testing.assert_close(g, w, atol=3e-5, rtol=1e-5)


def test_chains_that_cannot_fuse_stay_as_written():
    q, k, v = (rnd(1, 2, 128, 16, seed=s) for s in (1, 2, 3))

    def probs_returned(q, k, v):
        p = F.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
        return p @ v, p

    def dropout_p(q, k, v):
        return F.dropout(F.softmax(q @ k.transpose(-2, -1), dim=-1), 0.5, training=False) @ v

    for fn, ins in [(probs_returned, (q, k, v)), (manual(), (q.double(), k.double(), v.double(), tril(128))),
                    (manual(), (q[..., :64, :], k[..., :64, :], v[..., :64, :], tril(64)))]:
        jf = thunder_c.jit(fn)
        got, want = jf(*ins), fn(*ins)
        assert FLASH not in traces_text(jf)
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)
    # a mask that widens the scores' batch dims: the chain's result has them, sdpa's would not
    def widened(q, k, v, m):
        return F.softmax((q @ k.transpose(-2, -1)).masked_fill(m, -math.inf), dim=-1) @ v

    m = torch.zeros(2, 1, 128, 128, dtype=torch.bool)
    m[1, :, :, 5:] = True
    jf = thunder_c.jit(widened)
    got = jf(q, k, v, m)
    assert got.shape == (2, 2, 128, 16) and FLASH not in traces_text(jf)
    torch.testing.assert_close(got, widened(q, k, v, m), atol=2e-5, rtol=1e-5)
    # dropout with p > 0 (even with training=False, where it is the identity) is not matched
    jf = thunder_c.jit(dropout_p)
    torch.testing.assert_close(jf(q, k, v), dropout_p(q, k, v), atol=2e-5, rtol=1e-5)
    assert FLASH not in traces_text(jf)


def test_a_chain_feeding_another_chain():
    """The first attention's output is the second's q (and k): the second call reads the fused value."""
    q, k, v = rnd(1, 2, 16, 32, seed=1), rnd(1, 2, 128, 32, seed=2), rnd(1, 2, 128, 32, seed=3)

    def attn(q, k, v):
        return F.softmax((q @ k.transpose(-2, -1)) * 0.25, dim=-1) @ v

    def two(q, k, v):
        y = attn(q, k, v)
        return attn(y, k, v), attn(q, torch.cat([y] * 8, dim=2), v)

    jf = thunder_c.jit(two)
    got, want = jf(q, k, v), two(q, k, v)
    assert traces_text(jf).count(FLASH + "(") >= 3
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


def test_in_place_writes_inside_the_chain_keep_it_unfused():
    q, k, v = rnd(1, 1, 4, 16, seed=1), rnd(1, 1, 128, 16, seed=2), rnd(1, 1, 128, 16, seed=3)
    m = rnd(4, 128, seed=4) > 0.5

    def f(q, k, v):
        s = q @ k.transpose(-2, -1)
        q.mul_(0)  # q changes after the scores were computed
        return F.softmax(s * 0.25, dim=-1) @ v

    def g(q, k, v, m):
        s = (q @ k.transpose(-2, -1) * 0.25).masked_fill(m, float("-inf"))
        m.logical_not_()  # the mask changes after masked_fill read it
        return F.softmax(s, dim=-1) @ v

    torch.testing.assert_close(thunder_c.jit(f)(q.clone(), k, v), f(q.clone(), k, v), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(thunder_c.jit(g)(q, k, v, m.clone()), g(q, k, v, m.clone()), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_and_infinite_scores_give_nan_rows_as_eager(dtype):
    q, k, v = rnd(1, 1, 4, 32, seed=1), rnd(1, 1, 130, 32, seed=2), rnd(1, 1, 130, 32, seed=3)
    q[0, 0, 1, 0] = float("nan")
    q[0, 0, 2, 0] = float("inf")
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    fn = manual(masked=False)
    jf = thunder_c.jit(fn)
    got, want = jf(q, k, v, None), fn(q, k, v, None)
    assert FLASH in traces_text(jf)
    assert torch.isnan(want[0, 0, 1:3]).all() and torch.isnan(got[0, 0, 1:3]).all()
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2, equal_nan=True)
