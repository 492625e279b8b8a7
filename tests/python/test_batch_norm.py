"""Batch normalization through thunder_c.jit against PyTorch eager: nn.BatchNorm2d / BatchNorm1d modules
in training mode (outputs, the running statistics and num_batches_tracked updated in place after
several calls, gradients of input, weight and bias) and in evaluation mode; F.batch_norm with running
statistics read after the update in the same function; instance_norm's running statistics; and the
error for momentum=None (the cumulative average needs float(num_batches_tracked), a value the tracer
cannot read)."""
import copy

import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()

TOL = dict(rtol=1e-5, atol=1e-5)


def assert_same_state(m, ref):
    for (name, a), (_, b) in zip(m.state_dict().items(), ref.state_dict().items()):
        torch.testing.assert_close(a, b, **TOL, msg=lambda s: f"{name}: {s}")


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("executors", [None, ["eager"]])
def test_batchnorm2d_training_updates_running_stats_like_eager(affine, executors):
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm2d(3, momentum=0.3, affine=affine)
    m = copy.deepcopy(ref)
    jm = thunder_c.jit(m, executors=executors)
    for step in range(4):
        x = torch.randn(4, 3, 5, 6) * (step + 1) + step
        torch.testing.assert_close(jm(x), ref(x), **TOL)
        assert_same_state(m, ref)
    assert m.num_batches_tracked.item() == 4
    ref.eval()
    m.eval()
    x = torch.randn(2, 3, 5, 6)
    torch.testing.assert_close(jm(x), ref(x), **TOL)
    assert_same_state(m, ref)  # evaluation mode leaves the statistics alone


def test_batchnorm2d_gradients_of_input_weight_bias():
    torch.manual_seed(1)
    ref = torch.nn.BatchNorm2d(3).double()
    with torch.no_grad():
        ref.weight.uniform_(0.5, 2.0)
        ref.bias.uniform_(-1.0, 1.0)
    m = copy.deepcopy(ref)
    jm = thunder_c.jit(m)
    for _ in range(2):
        x = torch.randn(5, 3, 4, 4, dtype=torch.float64)
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        g = torch.randn(5, 3, 4, 4, dtype=torch.float64)
        ye, yj = ref(xe), jm(xj)
        torch.testing.assert_close(yj, ye)
        ye.backward(g)
        yj.backward(g)
        torch.testing.assert_close(xj.grad, xe.grad)
        torch.testing.assert_close(m.weight.grad, ref.weight.grad)
        torch.testing.assert_close(m.bias.grad, ref.bias.grad)
        assert_same_state(m, ref)


def test_batchnorm2d_eval_mode_gradients():
    torch.manual_seed(2)
    ref = torch.nn.BatchNorm2d(4).double()
    ref.running_mean.uniform_(-1, 1)
    ref.running_var.uniform_(0.5, 2)
    ref.eval()
    m = copy.deepcopy(ref)
    jm = thunder_c.jit(m)
    x = torch.randn(3, 4, 2, 5, dtype=torch.float64)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yj = ref(xe), jm(xj)
    torch.testing.assert_close(yj, ye)
    ye.sum().backward()
    yj.sum().backward()
    torch.testing.assert_close(xj.grad, xe.grad)
    torch.testing.assert_close(m.weight.grad, ref.weight.grad)
    assert_same_state(m, ref)


def test_batchnorm1d_without_running_stats_uses_batch_stats():
    torch.manual_seed(3)
    ref = torch.nn.BatchNorm1d(6, track_running_stats=False)
    m = copy.deepcopy(ref)
    jm = thunder_c.jit(m)
    x = torch.randn(8, 6, 3)
    torch.testing.assert_close(jm(x), ref(x), **TOL)
    m.eval()
    ref.eval()  # no running statistics: evaluation mode still normalizes with the batch's
    torch.testing.assert_close(jm(x), ref(x), **TOL)


def test_functional_batch_norm_running_stats_read_after_update():
    def f(x, rm, rv, w, b):
        before = rm * 1
        y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.25, eps=1e-3)
        return y, before, rm * 1, rv + 0

    torch.manual_seed(4)
    inputs = [torch.randn(4, 3, 5), torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)]
    e = [t.clone() for t in inputs]
    j = [t.clone() for t in inputs]
    want = f(*e)
    got = thunder_c.jit(f)(*j)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)
    torch.testing.assert_close(j[1], e[1], **TOL)
    torch.testing.assert_close(j[2], e[2], **TOL)


def test_batch_norm_bfloat16_input_with_float32_stats():
    torch.manual_seed(5)
    x = torch.randn(6, 4, 3).bfloat16()
    rm, rv = torch.zeros(4), torch.ones(4)
    rm2, rv2 = rm.clone(), rv.clone()
    want = F.batch_norm(x, rm, rv, training=True)
    got = thunder_c.jit(lambda x, a, b: F.batch_norm(x, a, b, training=True))(x, rm2, rv2)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(rm2, rm, **TOL)
    torch.testing.assert_close(rv2, rv, **TOL)


def test_instance_norm_updates_running_stats_like_eager():
    torch.manual_seed(6)
    ref = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.2)
    m = copy.deepcopy(ref)
    jm = thunder_c.jit(m)
    for _ in range(3):
        x = torch.randn(2, 3, 4, 5) * 2 + 1
        torch.testing.assert_close(jm(x), ref(x), **TOL)
        assert_same_state(m, ref)
    ref.eval()
    m.eval()
    x = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(jm(x), ref(x), **TOL)


def test_group_norm_module_forward_and_gradients():
    torch.manual_seed(7)
    ref = torch.nn.GroupNorm(2, 6).double()
    m = copy.deepcopy(ref)
    jm = thunder_c.jit(m)
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yj = ref(xe), jm(xj)
    torch.testing.assert_close(yj, ye)
    (ye * ye).sum().backward()
    (yj * yj).sum().backward()
    torch.testing.assert_close(xj.grad, xe.grad)
    torch.testing.assert_close(m.weight.grad, ref.weight.grad)
    torch.testing.assert_close(m.bias.grad, ref.bias.grad)


def test_errors_name_the_op():
    x = torch.randn(1, 3)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        thunder_c.jit(lambda x: F.batch_norm(x, None, None, training=True))(x)
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 2"):
        thunder_c.jit(lambda x, r: F.batch_norm(x, r, r))(torch.randn(4, 3), torch.zeros(2))
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        thunder_c.jit(lambda x: F.group_norm(x, 4))(torch.randn(2, 6, 3))


def test_momentum_none_is_not_supported():
    m = torch.nn.BatchNorm2d(3, momentum=None)
    with pytest.raises(NotImplementedError, match="num_batches_tracked|data-dependent"):
        thunder_c.jit(m)(torch.randn(2, 3, 4, 4))
