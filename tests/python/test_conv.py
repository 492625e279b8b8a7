"""Convolutions through thunder_c.jit against PyTorch eager: conv1d/2d/3d and conv_transpose1d/2d/3d with
groups, strides, dilations, padding (ints, tuples, 'valid', 'same' split evenly and unevenly), output
padding (below the stride, and at or above it where the dilation allows), unbatched inputs and
torch.convolution; forward and gradients (input, weight, bias) in float32 and float64 (float64 results
are the independent reference: the eager executor's direct loops against PyTorch's kernels), bfloat16
against PyTorch's float32-accumulating bf16 convolution; autocast to bfloat16; nn.Conv2d modules
forward and backward; which executor runs each prims.convolution (oneDNN through the BLAS executor for
float32 and bfloat16, the eager executor for float64); PyTorch's errors; torchvision's resnet18 getting
past its convolutions."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import import_thunder_c

pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel lengths")

thunder_c = import_thunder_c()

TOL = {torch.float64: dict(rtol=1e-9, atol=1e-9), torch.float32: dict(rtol=1e-4, atol=1e-4),
       torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}

# (name, torch function, input shape, weight shape, bias?, kwargs)
CASES = [
    ("conv1d_plain", F.conv1d, (2, 4, 11), (6, 4, 3), True, {}),
    ("conv1d_groups_stride_dilation", F.conv1d, (2, 4, 12), (6, 2, 3), True, dict(stride=2, padding=2, dilation=3, groups=2)),
    ("conv1d_unbatched_same_even_kernel", F.conv1d, (4, 9), (3, 4, 4), False, dict(padding="same")),
    ("conv2d_resnet_like", F.conv2d, (2, 8, 10, 10), (8, 8, 3, 3), False, dict(padding=1)),
    ("conv2d_downsample_1x1_stride2", F.conv2d, (2, 8, 9, 9), (16, 8, 1, 1), False, dict(stride=2)),
    ("conv2d_asymmetric", F.conv2d, (2, 4, 9, 8), (6, 2, 3, 2), True, dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)),
    ("conv2d_depthwise", F.conv2d, (2, 6, 7, 7), (12, 1, 3, 3), True, dict(groups=6, padding=1)),
    ("conv2d_same_dilated", F.conv2d, (1, 3, 8, 7), (4, 3, 2, 3), True, dict(padding="same", dilation=(3, 2))),
    ("conv2d_valid", F.conv2d, (1, 3, 8, 7), (4, 3, 2, 3), True, dict(padding="valid", stride=2)),
    ("conv2d_unbatched", F.conv2d, (3, 6, 6), (2, 3, 3, 3), True, dict(stride=2, padding=1)),
    ("conv3d", F.conv3d, (1, 2, 5, 6, 7), (3, 2, 2, 3, 2), True, dict(stride=(2, 1, 2), padding=(1, 0, 1))),
    ("conv3d_same_groups", F.conv3d, (2, 4, 4, 5, 4), (4, 2, 3, 2, 2), False, dict(padding="same", groups=2)),
    ("conv_transpose1d", F.conv_transpose1d, (2, 4, 7), (4, 3, 3), True, dict(stride=2, padding=1, output_padding=1)),
    ("conv_transpose2d_groups_dilation", F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 2), True,
     dict(stride=(3, 2), padding=(1, 0), output_padding=(2, 1), groups=2, dilation=(2, 2))),
    ("conv_transpose2d_output_padding_above_stride", F.conv_transpose2d, (2, 2, 4, 4), (2, 2, 4, 5), True,
     dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2, dilation=(4, 4))),
    ("conv_transpose2d_unbatched", F.conv_transpose2d, (4, 5, 5), (4, 2, 3, 3), False, dict(stride=2)),
    ("conv_transpose3d", F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 3, 2, 3, 2), True, dict(stride=2, padding=(0, 1, 0))),
]
IDS = [c[0] for c in CASES]


def _inputs(case, dtype, requires_grad=False):
    _, _, xs, ws, has_bias, _ = case
    g = torch.Generator().manual_seed(0)
    mk = lambda s: torch.randn(s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(requires_grad)  # noqa: E731
    out_ch = ws[0] if case[1] in (F.conv1d, F.conv2d, F.conv3d) else ws[1] * case[5].get("groups", 1)
    return mk(xs), mk(ws), mk((out_ch,)) if has_bias else None


def _executors_of(jf, backward=False):
    traces = thunder_c.last_backward_traces(jf) if backward else thunder_c.last_traces(jf)
    return [b.executor for b in traces[-1].bound_symbols if b.qualname == "prims.convolution"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_torch(case, dtype):
    fn, kw = case[1], case[5]
    x, w, b = _inputs(case, dtype)
    f = lambda x, w, b: fn(x, w, b, **kw)  # noqa: E731
    jf = thunder_c.jit(f)
    got = jf(x, w, b)
    want = f(x, w, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **TOL[dtype])
    assert _executors_of(jf) == (["eager"] if dtype == torch.float64 else ["blas"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_match_torch(case, dtype):
    fn, kw = case[1], case[5]
    x, w, b = _inputs(case, dtype, requires_grad=True)
    f = lambda x, w, b: fn(x, w, b, **kw)  # noqa: E731
    jf = thunder_c.jit(f)
    y = jf(x, w, b)
    ct = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    params = [t for t in (x, w, b) if t is not None]
    got = torch.autograd.grad(y, params, ct)
    want = torch.autograd.grad(f(x, w, b), params, ct)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, **TOL[dtype])
    # the backward's convolutions (input and weight gradients) run where the forward's do
    execs = _executors_of(jf, backward=True)
    assert len(execs) == 2 and set(execs) == ({"eager"} if dtype == torch.float64 else {"blas"})


def test_bfloat16_gradients_run_on_onednn_and_match_torch():
    x = torch.randn(2, 8, 9, 9).bfloat16().requires_grad_()
    w = (torch.randn(8, 4, 3, 3) / 6).bfloat16().requires_grad_()
    b = torch.randn(8).bfloat16().requires_grad_()
    f = lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2)  # noqa: E731
    jf = thunder_c.jit(f)
    y = jf(x, w, b)
    got = torch.autograd.grad(y.float().square().sum(), (x, w, b))
    want = torch.autograd.grad(f(x, w, b).float().square().sum(), (x, w, b))
    for g, e in zip(got, want):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), e.float(), rtol=3e-2, atol=0.3)
    assert _executors_of(jf) == ["blas"] and set(_executors_of(jf, backward=True)) == {"blas"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_strided_operands(dtype, transposed):
    """Views oneDNN reads through their strides (channels-last input, a weight stored with its channel
    dims swapped, a sliced input) and one it cannot (a broadcast input, stride 0), copied first."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 7, 6, generator=g).to(dtype)
    w = torch.randn(3, 6, 3, 3, generator=g).to(dtype).transpose(0, 1)  # (6, 3, 3, 3), not contiguous
    fn = F.conv_transpose2d if transposed else F.conv2d
    f = lambda x, w: fn(x, w, stride=2, padding=1, groups=1 if not transposed else 2)  # noqa: E731
    c = 6 if transposed else 3  # the input channels the weight takes
    for xv in (x[:, :c], x[:, :c].contiguous(memory_format=torch.channels_last),
               x[:1, :c, :1].expand(2, c, 7, 6)):
        jf = thunder_c.jit(f)
        torch.testing.assert_close(jf(xv, w), f(xv, w), **TOL[dtype])
        assert _executors_of(jf) == ["blas"]


WIDENED = """
import torch, thunder_c, torch.nn.functional as F
g = torch.Generator().manual_seed(0)
x, w = torch.randn(2, 8, 9, 9, generator=g).bfloat16(), torch.randn(6, 4, 3, 3, generator=g).bfloat16()
b = torch.randn(6, generator=g).bfloat16()
for f in (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
          lambda x, w, b: F.conv_transpose2d(x[:, :6].transpose(2, 3), w, None, stride=2, output_padding=1)):
    jf = thunder_c.jit(f)
    got = jf(x, w, b)
    assert [e.executor for e in thunder_c.last_traces(jf)[-1].bound_symbols
            if e.qualname == "prims.convolution"] == ["blas"]
    # the float32 convolution of the same (exactly widened) operands, rounded once
    want = thunder_c.jit(f)(x.float(), w.float(), b.float()).bfloat16()
    assert torch.equal(got, want), (got - want).abs().max()
    torch.testing.assert_close(got.float(), f(x, w, b).float(), rtol=2e-2, atol=5e-2)
print("ok")
"""


def test_bfloat16_without_a_bf16_convolution_runs_widened():
    """On a CPU without oneDNN's bf16 convolution (forced here by THUNDER_TEST_BLAS_CONV_WIDEN=1) the
    BLAS executor still claims bf16 convolutions: the float32 primitive on widened operands, rounded to
    bf16 once."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, THUNDER_TEST_BLAS_CONV_WIDEN="1", PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", WIDENED], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "ok" in p.stdout, p.stdout + p.stderr


def test_torch_convolution_is_the_prim():
    x, w, b = torch.randn(2, 4, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(6)
    f = lambda x, w, b: torch.convolution(x, w, b, [2, 1], [1, 0], [1, 1], True, [1, 0], 2)  # noqa: E731
    jf = thunder_c.jit(f)
    torch.testing.assert_close(jf(x, w, b), f(x, w, b), **TOL[torch.float32])
    top = [b.qualname for b in thunder_c.last_traces(jf)[0].bound_symbols]
    assert "ltorch.convolution" in top


def test_autocast_bfloat16_matches_torch_autocast():
    x, w, b = torch.randn(2, 3, 8, 8), torch.randn(5, 3, 3, 3), torch.randn(5)

    def f(x, w, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.conv2d(x, w, b, padding=1)
        return y, y.float().relu()

    jf = thunder_c.jit(f)
    got, want = jf(x, w, b), f(x, w, b)
    assert got[0].dtype == want[0].dtype == torch.bfloat16
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, **TOL[torch.bfloat16])
    assert _executors_of(jf) == ["blas"]
    # float64 is left alone by autocast, as PyTorch's
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = thunder_c.jit(lambda x, w: F.conv2d(x, w))(x.double(), w.double())
    assert y.dtype == torch.float64


@pytest.mark.parametrize("padding_mode_args", [dict(padding=1), dict(padding="same"), dict(padding=0, stride=2)],
                         ids=["pad1", "same", "stride2"])
def test_nn_conv2d_module_forward_and_backward(padding_mode_args):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, **padding_mode_args), nn.ReLU(),
                      nn.Conv2d(8, 4, 3, groups=2, dilation=2, bias=False))
    jm = thunder_c.jit(m)
    x = torch.randn(2, 3, 17, 15, requires_grad=True)
    jm(x).square().sum().backward()
    got = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    for p in m.parameters():
        p.grad = None
    x.grad = None
    y = m(x)
    y.square().sum().backward()
    want = [p.grad for p in m.parameters()] + [x.grad]
    torch.testing.assert_close(jm(x), y, **TOL[torch.float32])
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-3)


ERRORS = [  # (id, function, input shape, weight shape, bias shape, kwargs, PyTorch's message)
    ("channels", F.conv2d, (2, 3, 5, 5), (6, 4, 3, 3), None, {},
     "Given groups=1, weight of size [6, 4, 3, 3], expected input[2, 3, 5, 5] to have 4 channels, but got 3 channels instead"),
    ("groups", F.conv2d, (2, 4, 5, 5), (5, 2, 3, 3), None, dict(groups=2),
     "Given groups=2, expected weight to be divisible by 2 at dimension 0"),
    ("bias", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), (5,), {},
     "Given weight of size [6, 4, 3, 3], expected bias to be 1-dimensional with 6 elements, but got bias of size [5] instead"),
    ("kernel_too_large", F.conv2d, (2, 4, 2, 2), (6, 4, 3, 3), None, {},
     "Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be greater than actual input size"),
    ("rank", F.conv2d, (4, 5), (6, 4, 3, 3), None, {},
     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [4, 5]"),
    ("stride", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(stride=0), "non-positive stride is not supported"),
    ("padding", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(padding=-1), "negative padding is not supported"),
    ("dilation", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(dilation=0), "non-positive dilation is not supported"),
    ("groups0", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(groups=0), "non-positive groups is not supported"),
    ("stride_len", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(stride=(1, 1, 1)),
     "expected stride to be a single integer value or a list of 2 values to match the convolution dimensions"),
    ("same_strided", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(padding="same", stride=2),
     "padding='same' is not supported for strided convolutions"),
    ("padding_str", F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), None, dict(padding="foo"), "Invalid padding string: 'foo'"),
    ("transposed_channels", F.conv_transpose2d, (2, 4, 5, 5), (3, 6, 3, 3), None, {},
     "Given transposed=1, weight of size [3, 6, 3, 3], expected input[2, 4, 5, 5] to have 3 channels, but got 4 channels instead"),
    ("transposed_bias", F.conv_transpose2d, (2, 4, 5, 5), (4, 6, 3, 3), (5,), {},
     "Given transposed=1, weight of size [4, 6, 3, 3], expected bias to be 1-dimensional with 6 elements"),
    ("weight_rows", F.conv2d, (2, 4, 5, 5), (0, 4, 3, 3), None, {},
     "Given groups=1, expected weight to be at least 1 at dimension 0, but got weight of size [0, 4, 3, 3] instead"),
    ("empty_spatial", F.conv2d, (2, 4, 0, 5), (6, 4, 1, 1), None, dict(padding=1),
     "Only zero batch or zero channel inputs are supported, but got input shape: [2, 4, 0, 5]"),
    ("output_padding", F.conv_transpose2d, (2, 4, 5, 5), (4, 6, 3, 3), None, dict(output_padding=1),
     "output padding must be smaller than either stride or dilation"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_pytorchs(case):
    _, fn, xs, ws, bs, kw, message = case
    x, w, b = torch.randn(xs), torch.randn(ws), torch.randn(bs) if bs else None
    f = lambda x, w, b: fn(x, w, b, **kw)  # noqa: E731
    with pytest.raises(RuntimeError) as want:
        f(x, w, b)
    assert message.replace("[5, 2, 3, 3]", "[[5, 2, 3, 3]]") in str(want.value) or case[0] == "groups"
    with pytest.raises(RuntimeError) as got:
        thunder_c.jit(f)(x, w, b)
    assert message in str(got.value)


@pytest.mark.parametrize("fn, xs, ws", [(F.conv2d, (0, 4, 5, 5), (6, 4, 3, 3)), (F.conv2d, (2, 0, 5, 5), (6, 0, 3, 3)),
                                         (F.conv_transpose2d, (0, 4, 5, 5), (4, 6, 3, 3))],
                         ids=["batch0", "channels0", "transposed_batch0"])
def test_empty_inputs(fn, xs, ws):
    x, w = torch.randn(xs, requires_grad=True), torch.randn(ws, requires_grad=True)
    jf = thunder_c.jit(lambda x, w: fn(x, w))
    y = jf(x, w)
    assert y.shape == fn(x, w).shape
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    assert gx.shape == x.shape and gw.shape == w.shape and not gw.any()


def test_bool_is_not_implemented():
    x, w = torch.ones(1, 2, 3, 3, dtype=torch.bool), torch.ones(1, 2, 1, 1, dtype=torch.bool)
    with pytest.raises(NotImplementedError):
        F.conv2d(x, w)
    with pytest.raises(NotImplementedError, match="not implemented for 'bool'"):
        thunder_c.jit(F.conv2d)(x, w)


def test_dtype_mismatch_is_an_error():
    x, w = torch.randn(2, 4, 5, 5), torch.randn(6, 4, 3, 3)
    with pytest.raises(RuntimeError, match="Input type"):
        F.conv2d(x, w.double())
    with pytest.raises(RuntimeError, match=r"Input type \(float32\) and weight type \(float64\) should be the same"):
        thunder_c.jit(F.conv2d)(x, w.double())
    with pytest.raises(RuntimeError, match=r"Input type \(float32\) and bias type \(float64\) should be the same"):
        thunder_c.jit(F.conv2d)(x, w, torch.randn(6).double())


def test_resnet18_gets_past_its_convolutions():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    try:
        got = thunder_c.jit(m)(x)
    except NotImplementedError as e:  # an op of another family (batch_norm, max_pool2d), not a convolution
        assert "conv" not in str(e), str(e)
    else:
        with torch.no_grad():
            torch.testing.assert_close(got, m(x), rtol=1e-3, atol=1e-3)
