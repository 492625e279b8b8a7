"""The activations of torch.nn.functional (src/ops/torch/activation.c) against eager PyTorch: every
in-place spelling (F.<name>(x, inplace=True), nn modules with inplace=True, the F.<name>_ / torch.<name>_
functions) updates the tensor like eager and records its ltorch in-place op; integer inputs where PyTorch
takes them; gradients of the parameterized forms; rrelu's evaluation mode, and its training mode refused."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def sample(dtype=torch.float32):
    torch.manual_seed(0)
    return (torch.randn(4, 6) * 3).to(dtype)


# name -> (call with inplace=True, the ltorch op it records)
INPLACE = {
    "hardswish": (lambda t: F.hardswish(t, inplace=True), "ltorch.hardswish_"),
    "hardsigmoid": (lambda t: F.hardsigmoid(t, True), "ltorch.hardsigmoid_"),
    "hardtanh": (lambda t: F.hardtanh(t, -0.5, 2.0, inplace=True), "ltorch.hardtanh_"),
    "relu6": (lambda t: F.relu6(t, inplace=True), "ltorch.relu6_"),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2, True), "ltorch.leaky_relu_"),
    "elu": (lambda t: F.elu(t, alpha=0.7, inplace=True), "ltorch.elu_"),
    "selu": (lambda t: F.selu(t, inplace=True), "ltorch.selu_"),
    "celu": (lambda t: F.celu(t, 1.5, inplace=True), "ltorch.celu_"),
    "mish": (lambda t: F.mish(t, inplace=True), "ltorch.mish_"),
    "threshold": (lambda t: F.threshold(t, 0.3, -1.0, inplace=True), "ltorch.threshold_"),
    "rrelu": (lambda t: F.rrelu(t, 0.1, 0.3, training=False, inplace=True), "ltorch.rrelu_"),
    "F.elu_": (lambda t: F.elu_(t, 0.5), "ltorch.elu_"),
    "F.leaky_relu_": (lambda t: F.leaky_relu_(t, 0.3), "ltorch.leaky_relu_"),
    "F.hardtanh_": (lambda t: F.hardtanh_(t, -1.5, 0.5), "ltorch.hardtanh_"),
    "F.threshold_": (lambda t: F.threshold_(t, 0.0, 2.0), "ltorch.threshold_"),
    "F.celu_": (lambda t: F.celu_(t), "ltorch.celu_"),
    "F.selu_": (lambda t: F.selu_(t), "ltorch.selu_"),
    "F.rrelu_": (lambda t: F.rrelu_(t), "ltorch.rrelu_"),
    "torch.selu_": (lambda t: torch.selu_(t), "ltorch.selu_"),
}


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_updates_intermediate_and_input(name):
    act, recorded = INPLACE[name]

    def fn(x):
        y = x * 1.5
        r = act(y)
        return r, y + 1, x

    x, xe = sample(), sample()
    jf = thunder_c.jit(fn)
    for got, want in zip(jf(x), fn(xe)):
        close(got, want)
    assert recorded in str(thunder_c.last_traces(jf)[0])
    x, xe = sample(), sample()
    close(thunder_c.jit(act)(x), act(xe))
    close(x, xe)  # the caller's tensor is updated, as eager updates it


MODULES = [lambda: nn.Hardswish(inplace=True), lambda: nn.Hardtanh(-2.0, 2.0, inplace=True),
           lambda: nn.ReLU6(inplace=True), lambda: nn.LeakyReLU(0.1, inplace=True), lambda: nn.ELU(inplace=True),
           lambda: nn.SELU(inplace=True), lambda: nn.CELU(0.5, inplace=True), lambda: nn.Mish(inplace=True),
           lambda: nn.Hardsigmoid(inplace=True), lambda: nn.Threshold(0.1, 20.0, inplace=True)]


@pytest.mark.parametrize("make", MODULES)
def test_inplace_module_grads_through_sequential(make):
    torch.manual_seed(2)
    m = nn.Sequential(nn.Linear(6, 8), make(), nn.Linear(8, 3)).double()
    me = copy.deepcopy(m)
    x = sample(torch.float64).requires_grad_(True)
    xe = x.detach().clone().requires_grad_(True)
    out, oute = thunder_c.jit(m)(x), me(xe)
    close(out, oute)
    g = torch.randn_like(oute)
    out.backward(g)
    oute.backward(g)
    close(x.grad, xe.grad)
    for p, pe in zip(m.parameters(), me.parameters()):
        close(p.grad, pe.grad)


@pytest.mark.parametrize("fn", [lambda t: F.hardtanh(t, -1.7, 2.9), lambda t: F.relu6(t),
                                lambda t: F.threshold(t, 1.5, -2.7), lambda t: F.hardtanh(t, -0.5, 0.5),
                                lambda t: F.softsign(t), lambda t: F.tanhshrink(t)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_inputs(fn, dtype):
    x = torch.arange(-8, 9).to(dtype)
    got, want = thunder_c.jit(fn)(x), fn(x)
    assert got.dtype == want.dtype
    close(got, want)


@pytest.mark.parametrize("fn,exc,msg", [
    (lambda t: F.hardtanh(t, 2.0, 1.0), ValueError, "min_val cannot be greater than max_val"),
    (lambda t: F.elu(t.long()), RuntimeError, "elu_cpu"),
    (lambda t: F.glu(t[:, :5]), RuntimeError, "Halving dimension must be even"),
    (lambda t: F.softshrink(t, -0.5), RuntimeError, "lambda must be in range"),
    (lambda t: F.celu(t, 0.0), RuntimeError, "alpha cannot be 0"),
    (lambda t: F.prelu(t, torch.ones(2)), RuntimeError, "Mismatch of parameter numbers and input channel size"),
    (lambda t: F.rrelu(t, training=True), NotImplementedError, "training=True"),
])
def test_errors(fn, exc, msg):
    with pytest.raises(exc, match=msg):
        thunder_c.jit(fn)(sample())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bf16_threshold_rounds_its_parameters(dtype):
    """threshold and value are rounded to the element type before the comparison, as PyTorch's kernel."""
    x = torch.linspace(4.25, 4.375, 9).to(dtype)
    fn = lambda t: F.threshold(t, 4.319, -1.0)
    torch.testing.assert_close(thunder_c.jit(fn)(x), fn(x), rtol=0, atol=0)


def test_softplus_large_values_and_gradient():
    x = torch.tensor([-30.0, -1.0, 0.0, 5.0, 25.0, 900.0], dtype=torch.float64, requires_grad=True)
    xe = x.detach().clone().requires_grad_(True)
    fn = lambda t: F.softplus(t, beta=2, threshold=15)
    y, ye = thunder_c.jit(fn)(x), fn(xe)
    close(y, ye)
    y.sum().backward()
    ye.sum().backward()
    close(x.grad, xe.grad)  # finite: the unselected exponential never overflows
