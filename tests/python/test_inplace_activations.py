"""Activations called with inplace=True (F.relu / F.silu / F.dropout, nn.ReLU / nn.SiLU / nn.Dropout with
inplace=True) against eager PyTorch: recorded as their in-place ops (ltorch.relu_, silu_, dropout_: the
out-of-place op, then prims.copy_ into the input), they update the tensor in place and return it — an
intermediate, a graph input (the caller's tensor), and under autograd inside nn.Sequential."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder_c

# name -> (functional call with inplace=True, module with inplace=True, in-place op recorded). Dropout
# with p=1.0 is deterministic (every element dropped, input * 0) and still writes into its input.
ACTS = {
    "relu": (lambda t: F.relu(t, inplace=True), lambda: nn.ReLU(inplace=True), "ltorch.relu_"),
    "silu": (lambda t: F.silu(t, inplace=True), lambda: nn.SiLU(inplace=True), "ltorch.silu_"),
    "dropout_p1": (lambda t: F.dropout(t, p=1.0, training=True, inplace=True), lambda: nn.Dropout(1.0, inplace=True),
                   "ltorch.dropout_"),
}


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def sample():
    torch.manual_seed(0)
    return torch.randn(4, 6)


@pytest.mark.parametrize("name", ACTS)
def test_intermediate_updated_in_place(name):
    act = ACTS[name][0]

    def fn(x):
        y = x * 2
        r = act(y)
        return r, y + 1  # y read after the call sees the update

    x = sample()
    jf = thunder_c.jit(fn)
    for got, want in zip(jf(x), fn(x)):
        close(got, want)
    assert ACTS[name][2] in str(thunder_c.last_traces(jf)[0])


@pytest.mark.parametrize("name", ACTS)
def test_result_discarded_input_read(name):
    act = ACTS[name][0]

    def fn(x):
        y = x - 0.5
        act(y)
        return y

    x = sample()
    close(thunder_c.jit(fn)(x), fn(x))


@pytest.mark.parametrize("name", ACTS)
def test_graph_input_updated_like_eager(name):
    act = ACTS[name][0]
    x, xe = sample(), sample()
    r = thunder_c.jit(lambda t: act(t))(x)
    re = act(xe)
    close(r, re)
    close(x, xe)  # the caller's tensor is updated, as eager updates it
    close(r, x)


@pytest.mark.parametrize("name", ACTS)
def test_module_after_linear(name):
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(6, 5), ACTS[name][1]())
    x = sample()
    with torch.no_grad():
        close(thunder_c.jit(m)(x), m(x))


# silu_ on an intermediate: silu's vjp reads the Linear output that prims.copy_ then overwrites, so
# the forward saves a clone of it taken before the write.
GRAD_CASES = list(ACTS)


@pytest.mark.parametrize("name", GRAD_CASES)
def test_grads_through_sequential(name):
    torch.manual_seed(2)
    m = nn.Sequential(nn.Linear(6, 8), ACTS[name][1](), nn.Linear(8, 3))
    me = copy.deepcopy(m)
    x = sample().requires_grad_(True)
    xe = x.detach().clone().requires_grad_(True)
    out = thunder_c.jit(m)(x)
    oute = me(xe)
    close(out, oute)
    g = torch.randn_like(oute)
    out.backward(g)
    oute.backward(g)
    close(x.grad, xe.grad)
    for p, pe in zip(m.parameters(), me.parameters()):
        close(p.grad, pe.grad)


@pytest.mark.parametrize("name", ACTS)
def test_leaf_requiring_grad_refused(name):
    act = ACTS[name][0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        act(sample().requires_grad_(True))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        thunder_c.jit(lambda t: act(t))(sample().requires_grad_(True))


def test_inplace_false_unchanged():
    x = sample()
    x0 = x.clone()
    r = thunder_c.jit(lambda t: (F.relu(t, inplace=False), F.silu(t), F.dropout(t, 0.0, True, False)))(x)
    close(r[0], F.relu(x0))
    close(r[1], F.silu(x0))
    close(x, x0)
    jf = thunder_c.jit(lambda t: F.relu(t, inplace=False))
    jf(x)
    assert "copy_" not in str(thunder_c.last_traces(jf)[0])


def test_positional_inplace_flag():
    x, xe = sample(), sample()
    close(thunder_c.jit(lambda t: F.relu(t, True))(x), F.relu(xe, True))
    close(x, xe)


@pytest.mark.parametrize("training,p", [(False, 0.5), (True, 0.0)])
def test_dropout_identity_cases(training, p):
    x = sample()
    x0 = x.clone()
    r = thunder_c.jit(lambda t: F.dropout(t, p=p, training=training, inplace=True))(x)
    close(r, x0)
    close(x, x0)


def test_dropout_random_writes_its_input():
    x = sample().abs() + 1.0
    x0 = x.clone()
    r = thunder_c.jit(lambda t: F.dropout(t, p=0.5, training=True, inplace=True))(x)
    close(r, x)  # the input holds the result
    kept = r != 0
    close(r[kept], x0[kept] * 2.0)  # kept elements are scaled by 1 / (1 - p)
    assert 0 < int(kept.sum()) < x.numel()


def test_nn_dropout_module_random():
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(6, 64), nn.Dropout(0.5, inplace=True))
    x = sample()
    with torch.no_grad():
        lin = m[0](x)
        r = thunder_c.jit(m)(x)
    kept = r != 0
    close(r[kept], lin[kept] * 2.0)
    assert 0 < int(kept.sum()) < r.numel()


def test_grad_of_a_value_overwritten_in_place():
    """y.sin_() on an intermediate: sin's vjp reads y before the write; the forward saves a clone."""
    def f(x, w):
        y = x @ w
        y.sin_()
        return y * 3

    torch.manual_seed(3)
    x = torch.randn(4, 5, dtype=torch.float64)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    we = w.detach().clone().requires_grad_(True)
    jf = thunder_c.jit(f)
    jf(x, w).sum().backward()
    f(x, we).sum().backward()
    torch.testing.assert_close(w.grad, we.grad, rtol=1e-12, atol=1e-12)
    fwd = str(thunder_c.last_traces(jf)[-1])
    assert "prims.clone" in fwd
