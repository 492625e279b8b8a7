"""Autograd through thunder_c.jit against PyTorch eager (the installed torch) as the reference.

When grad is enabled and a tensor input or module parameter requires grad, a jitted call runs the
forward program of thunder-c's grad transform and attaches its outputs to PyTorch's autograd graph;
`loss.backward()` runs the backward program and fills `.grad`. Each test runs the same code eagerly
(same inputs, same initial parameters) and compares the loss and every gradient: plain functions, an
MLP, the GPT-2 block of examples/python/gpt2_module.py, the nanoGPT-style model of
examples/python/train_gpt.py (one step, then 5 AdamW steps), autocast (the function transform and
torch.autocast regions), in-place updates of intermediates, inputs that require grad only in part,
accumulation, retain_graph, double backward (refused), non-differentiable outputs, and the traces
(last_traces is the forward, last_backward_traces the backward)."""
import copy
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import SOURCE_DIR, import_thunder_c

sys.path.insert(0, str(SOURCE_DIR / "examples" / "python"))
import gpt2_module  # noqa: E402
import train_gpt  # noqa: E402

thunder_c = import_thunder_c()


def R(*shape, seed=0, dtype=torch.float32, rg=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)
    return t.requires_grad_() if rg else t


def close(got, want, rtol=1e-5, atol=1e-5, what=""):
    assert got is not None, f"{what}: no gradient"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def clone_leaves(*ts):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def check_fn(fn, *inputs, rtol=1e-5, atol=1e-5, probe_seed=7):
    """Runs fn eagerly and jitted on copies of `inputs`, back-propagates a random cotangent through
    every floating output, and compares outputs and input gradients."""
    a, b = clone_leaves(*inputs), clone_leaves(*inputs)
    want, got = fn(*a), thunder_c.jit(fn)(*b)
    ws = want if isinstance(want, tuple) else (want,)
    gs = got if isinstance(got, tuple) else (got,)
    assert len(ws) == len(gs)
    lw, lg = 0, 0
    for i, (w, g) in enumerate(zip(ws, gs)):
        close(g.detach(), w.detach(), rtol, atol, f"output {i}")
        assert g.requires_grad == w.requires_grad, f"output {i}: requires_grad {g.requires_grad} != {w.requires_grad}"
        if w.requires_grad:
            p = R(*w.shape, seed=probe_seed + i, dtype=w.dtype)
            lw, lg = lw + (w * p).sum(), lg + (g * p).sum()
    lw.backward()
    lg.backward()
    for i, (x, y) in enumerate(zip(a, b)):
        if x.requires_grad:
            close(y.grad, x.grad, rtol, atol, f"grad of input {i}")
        else:
            assert y.grad is None
    return got


def check_module(make, *inputs, loss=lambda out: out.float().pow(2).mean(), rtol=1e-5, atol=1e-5):
    """Same init (a deep copy), same inputs: the jitted module's loss and every parameter's gradient
    match eager's. Returns the jitted module."""
    m_eager = make()
    m_jit = copy.deepcopy(m_eager)
    tm = thunder_c.jit(m_jit)
    a, b = clone_leaves(*inputs), clone_leaves(*inputs)
    lw, lg = loss(m_eager(*a)), loss(tm(*b))
    close(lg.detach(), lw.detach(), rtol, atol, "loss")
    lw.backward()
    lg.backward()
    for (name, pw), (name2, pj) in zip(m_eager.named_parameters(), m_jit.named_parameters()):
        assert name == name2
        close(pj.grad, pw.grad, rtol, atol, f"grad of {name}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.requires_grad:
            close(y.grad, x.grad, rtol, atol, f"grad of input {i}")
    return tm


# ---- functions --------------------------------------------------------------------------------------

def test_elementwise_and_reduction():
    check_fn(lambda x, y: (torch.tanh(x) * y + x.exp() / (1 + y * y)).sum(dim=1), R(4, 5, rg=True),
             R(4, 5, seed=1, rg=True))


def test_linear_gelu_layer_norm_f64():
    def f(x, w, b, g):
        h = F.gelu(F.linear(x, w, b), approximate="tanh")
        return F.layer_norm(h, (16,), g, None).softmax(-1)

    d = torch.float64
    check_fn(f, R(3, 8, dtype=d, rg=True), R(16, 8, seed=1, dtype=d, rg=True), R(16, seed=2, dtype=d, rg=True),
             R(16, seed=3, dtype=d, rg=True), rtol=1e-10, atol=1e-10)


def test_multiple_outputs_and_broadcasting():
    def f(x, b):
        y = x + b  # b broadcasts: its gradient is summed over the broadcast dims
        return y.relu(), (y * x).mean()

    check_fn(f, R(2, 3, 4, rg=True), R(4, seed=1, rg=True))


def test_cross_entropy_and_embedding():
    def f(idx, w, tgt):
        return F.cross_entropy((F.embedding(idx, w) @ w.t()).view(-1, 5), tgt)

    idx = torch.tensor([[1, 2, 3], [4, 0, 2]])
    check_fn(lambda w: f(idx, w, torch.tensor([0, 1, 2, 3, 4, 0])), R(5, 6, rg=True))


def test_requires_grad_on_some_inputs_only():
    x, w = R(3, 4, rg=True), R(4, 4, seed=1)  # w does not require grad
    jf = thunder_c.jit(lambda x, w: (x @ w).sin().sum())
    got = jf(x, w)
    got.backward()
    xe = x.detach().clone().requires_grad_()
    (xe @ w).sin().sum().backward()
    close(x.grad, xe.grad, what="x.grad")
    assert w.grad is None
    check_fn(lambda x, w, b: (x @ w + b).sum(0), R(3, 4), R(4, 2, seed=1, rg=True), R(2, seed=2))


def test_no_input_requires_grad_or_no_grad_mode_runs_forward_only():
    jf = thunder_c.jit(lambda x: x * 2)
    assert not jf(R(3)).requires_grad
    x = R(3, rg=True)
    with torch.no_grad():
        y = jf(x)
    assert not y.requires_grad and y.grad_fn is None
    y = jf(x)
    assert y.requires_grad and y.grad_fn is not None
    assert thunder_c.cache_misses(jf) == 3  # grad mode and requires_grad are in the key


def test_gradients_accumulate_as_in_pytorch():
    x = R(4, rg=True)
    jf = thunder_c.jit(lambda x: (x * x).sum())
    jf(x).backward()
    jf(x).backward()
    torch.testing.assert_close(x.grad, 4 * x.detach())
    assert thunder_c.cache_hits(jf) == 1


def test_output_used_by_eager_code_and_input_used_twice():
    x = R(3, 3, rg=True)
    jf = thunder_c.jit(lambda a, b: a @ b + a)
    y = jf(x, x)  # one tensor, two inputs: both gradients reach it
    (y.exp() * 0.5).sum().backward()
    xe = x.detach().clone().requires_grad_()
    ((xe @ xe + xe).exp() * 0.5).sum().backward()
    close(x.grad, xe.grad, what="x.grad")


def test_non_differentiable_outputs():
    def f(x):
        return x.sum(), x.argmax(dim=1), x > 0

    s, am, pos = thunder_c.jit(f)(R(3, 4, rg=True))
    assert s.requires_grad
    assert not am.requires_grad and am.dtype == torch.int64
    assert not pos.requires_grad and pos.dtype == torch.bool
    s.backward()


def test_in_place_update_of_an_intermediate():
    def f(x, w):
        y = x @ w
        y.mul_(2)
        y += x.sum(1, keepdim=True)
        y.tanh_()
        return (y * y).sum(), y

    check_fn(f, R(3, 4, rg=True), R(4, 5, seed=1, rg=True))


def test_setitem_on_an_intermediate_works_or_is_refused_clearly():
    """`y[:, 0] = 0` updates y through a view (prims.update_aliases); eager differentiates it
    (CopySlices). thunder-c either matches eager or refuses with NotImplementedError naming the
    aliasing, never a wrong gradient."""
    def f(x, w):
        y = x @ w
        y[:, 0] = 0.0
        return (y * y).sum()

    try:
        check_fn(f, R(3, 4, rg=True), R(4, 5, seed=1, rg=True))
    except NotImplementedError as e:
        assert "alias" in str(e)


def test_output_structures_and_captured_tensors():
    w = R(3, seed=1, rg=True)  # captured from the closure: it requires grad, so it gets one

    def f(x):
        return {"y": x * w, "n": x.shape[0], "s": (x * x).sum()}

    x = R(3, rg=True)
    out = thunder_c.jit(f)(x)
    assert out["n"] == 3 and out["y"].requires_grad
    (out["y"].sum() + out["s"]).backward()
    close(x.grad, w.detach() + 2 * x.detach(), what="x.grad")
    close(w.grad, x.detach(), what="w.grad")


def test_returning_an_input_and_a_number():
    x = R(3, rg=True)
    y, n = thunder_c.jit(lambda x: (x, 2))(x)
    assert n == 2 and y.requires_grad
    (y * 3).sum().backward()
    close(x.grad, torch.full((3,), 3.0), what="x.grad")


def test_dropout_gradient_uses_the_forward_mask():
    torch.manual_seed(0)
    m = nn.Dropout(0.5).train()
    x = R(64, rg=True)
    y = thunder_c.jit(m)(x)
    y.sum().backward()
    kept = y.detach() != 0
    assert 10 < kept.sum() < 54  # a real mask
    close(x.grad, kept.float() * 2.0, what="x.grad")  # 1 / (1 - p) where kept, 0 where dropped


def test_detach_and_no_grad_inside_are_refused_clearly():
    """No stop-gradient op yet: a detach() or torch.no_grad() region inside a differentiated function
    would give wrong gradients, so it is refused; without autograd both still work."""
    def f(x):
        return x.detach() * x

    def g(x):
        with torch.no_grad():
            y = x * 2
        return y * x

    for fn in (f, g):
        x = R(3, rg=True)
        with pytest.raises(NotImplementedError, match="stop-gradient"):
            thunder_c.jit(fn)(x)
        with torch.no_grad():
            close(thunder_c.jit(fn)(x), fn(x), what=fn.__name__)
        close(thunder_c.jit(fn)(x.detach()), fn(x.detach()), what=fn.__name__)


def test_in_place_update_of_a_leaf_that_requires_grad_is_refused():
    def f(x):
        x.add_(1)
        return x

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        thunder_c.jit(f)(R(3, rg=True))


def test_double_backward_is_refused_clearly():
    x = R(3, rg=True)
    y = thunder_c.jit(lambda x: (x ** 3).sum())(x)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(y, x, create_graph=True)


def test_retain_graph():
    x = R(3, rg=True)
    jf = thunder_c.jit(lambda x: (x.sin() * x).sum())
    xe = x.detach().clone().requires_grad_()
    (xe.sin() * xe).sum().backward()
    y = jf(x)
    y.backward(retain_graph=True)
    y.backward()  # retained: runs again and accumulates
    close(x.grad, 2 * xe.grad, what="x.grad")
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()  # saved tensors freed, as PyTorch


def test_saved_input_modified_before_backward_is_detected():
    """The backward program reads the input tensors saved by PyTorch's own mechanism, so an in-place
    change between forward and backward raises PyTorch's version-counter error, as eager does."""
    x, w = R(3, 4, rg=True), R(4, 2, seed=1, rg=True)
    y = thunder_c.jit(lambda x, w: (x @ w).sum())(x, w)
    with torch.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_traces():
    jf = thunder_c.jit(lambda x, w: torch.tanh(x @ w).sum())
    jf(R(2, 3, rg=True), R(3, 3, seed=1, rg=True)).backward()
    fw = thunder_c.last_traces(jf)
    bw = thunder_c.last_backward_traces(jf)
    assert len(fw) >= 2 and len(bw) >= 1
    assert "tanh" in str(fw[-1])
    text = str(bw[-1])
    assert "Delete Last Used" in text
    assert "mul" in text or "sub" in text  # tanh's derivative 1 - y^2
    # forward only: no backward traces
    jf2 = thunder_c.jit(lambda x: x + 1)
    jf2(R(2))
    assert thunder_c.last_backward_traces(jf2) == []
    with pytest.raises(TypeError, match="thunder compiled function"):
        thunder_c.last_backward_traces(lambda x: x)


# ---- modules ----------------------------------------------------------------------------------------

def test_mlp_module():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))

    tm = check_module(make, R(5, 8))
    assert thunder_c.cache_misses(tm) == 1
    assert thunder_c.last_backward_traces(tm)  # it ran under autograd


def test_mlp_module_with_input_grad_and_mse_loss():
    def make():
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))

    tgt = R(4, 3, seed=9)
    check_module(make, R(4, 6, rg=True), loss=lambda out: F.mse_loss(out, tgt))


def test_gpt2_block_module():
    def make():
        torch.manual_seed(0)
        return gpt2_module.Block(n_embd=64, n_head=4, block_size=32, dropout=0.0)

    probe = R(2, 16, 64, seed=5)
    check_module(make, R(2, 16, 64, rg=True), loss=lambda out: (out * probe).sum(), rtol=1e-4, atol=1e-4)


def test_frozen_parameters_get_no_grad():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    m[0].weight.requires_grad_(False)
    tm = thunder_c.jit(m)
    tm(R(3, 4)).sum().backward()
    assert m[0].weight.grad is None
    assert m[0].bias.grad is not None and m[1].weight.grad is not None


def nano(vocab=20):
    torch.manual_seed(0)
    return train_gpt.GPT(vocab, n_layer=2, n_head=4, n_embd=32, block_size=16)


def nano_batch(seed, vocab=20, B=3, T=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (B, T), generator=g), torch.randint(0, vocab, (B, T), generator=g)


def test_nanogpt_one_step_loss_and_every_gradient():
    x, y = nano_batch(0)
    check_module(nano, x, y, loss=lambda l: l, rtol=1e-4, atol=1e-5)


def test_nanogpt_five_adamw_steps_match_eager_training():
    m_eager = nano()
    m_jit = copy.deepcopy(m_eager)
    tm = thunder_c.jit(m_jit)
    init = [p.detach().clone() for p in m_eager.parameters()]
    opt_e = torch.optim.AdamW(m_eager.parameters(), lr=1e-2, weight_decay=0.1)
    opt_j = torch.optim.AdamW(m_jit.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(5):
        x, y = nano_batch(step)
        for m, opt in ((m_eager, opt_e), (tm, opt_j)):
            opt.zero_grad(set_to_none=True)
            loss = m(x, y)
            loss.backward()
            opt.step()
            if m is tm:
                close(loss.detach(), want.detach(), 1e-4, 1e-5, f"loss at step {step}")
            else:
                want = loss
    # Adam divides each gradient by its running RMS, so a gradient that is rounding noise (the key
    # projection's bias has gradient exactly 0 in exact arithmetic: softmax ignores a per-row shift)
    # moves its parameter by noise / |noise| * lr in both runs, differently. The tolerance is 2% of one
    # step (lr = 1e-2); a wrong gradient moves a parameter by ~lr per step.
    moved = 0
    for (name, pw), (_, pj), p0 in zip(m_eager.named_parameters(), m_jit.named_parameters(), init):
        close(pj.detach(), pw.detach(), 1e-4, 2e-4, f"{name} after 5 steps")
        moved += (pw.detach() - p0).abs().max().item() > 1e-2
    assert moved >= len(init) - 1  # the steps really changed the parameters
    assert thunder_c.cache_misses(tm) == 1


# ---- autocast ----------------------------------------------------------------------------------------

def mlp_fn(x, w1, b1, w2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2).float().pow(2).mean()


def autocast_inputs():
    return R(8, 16, rg=True), R(32, 16, seed=1, rg=True), R(32, seed=2, rg=True), R(4, 32, seed=3, rg=True)


def check_autocast_grads(got_fn):
    """Eager AMP's gradients and thunder-c's agree within bfloat16 tolerance: both round the same
    tensors to bfloat16 (eager rounds every elementwise result too, thunder-c once per fused chain), so
    each is compared with eager at 3% of the gradient's scale (bfloat16 has 8 bits of mantissa), and
    thunder-c's error against the float64 gradient is no worse than twice eager's."""
    a, b = clone_leaves(*autocast_inputs()), clone_leaves(*autocast_inputs())
    c = [t.detach().double().requires_grad_() for t in autocast_inputs()]
    with torch.autocast("cpu", torch.bfloat16):
        lw = mlp_fn(*a)
    lg = got_fn(*b)
    close(lg.detach(), lw.detach(), 2e-2, 2e-2, "loss")
    lw.backward()
    lg.backward()
    mlp_fn(*c).backward()
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        assert y.grad.dtype == torch.float32  # float32 leaves get float32 gradients
        scale = z.grad.abs().max().item()
        close(y.grad, x.grad, 0, 0.03 * scale, f"grad of input {i}")
        err_eager = (x.grad.double() - z.grad).abs().max().item()
        err_thunder = (y.grad.double() - z.grad).abs().max().item()
        assert err_thunder <= 2 * err_eager + 1e-3 * scale, (i, err_thunder, err_eager)
        assert err_eager > 1e-4 * scale  # the reference really ran in bfloat16
    return b


def test_grad_of_autocast_function_transform():
    jf = thunder_c.jit(thunder_c.autocast(mlp_fn, thunder_c.bfloat16))
    check_autocast_grads(jf)
    assert "bf16" in str(thunder_c.last_backward_traces(jf)[-1])  # the backward's matmuls are bf16 too


def test_grad_under_torch_autocast_region():
    jf = thunder_c.jit(mlp_fn)

    def run(*xs):
        with torch.autocast("cpu", torch.bfloat16):
            return jf(*xs)

    check_autocast_grads(run)
    assert "bf16" in str(thunder_c.last_backward_traces(jf)[-1])


def test_autocast_region_inside_the_function():
    def f(x, w):
        with torch.autocast("cpu", torch.bfloat16):
            y = x @ w
        return y.float().sum()

    x, w = R(4, 8, rg=True), R(8, 3, seed=1, rg=True)
    got = check_fn(f, x, w, rtol=2e-2, atol=2e-2)
    assert got.dtype == torch.float32


# ---- more ops ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, fn", [
    ("lgamma", lambda x, y: torch.lgamma(x + 2) * y),
    ("atan2", lambda x, y: torch.atan2(x, y)),
    ("fmod_floor", lambda x, y: torch.fmod(x, 0.7) * y + torch.floor(x) * y),
    ("where_max", lambda x, y: torch.where(x > y, x * x, y.exp()) + torch.maximum(x, y)),
    ("pow_rsqrt", lambda x, y: (x * x + 1).rsqrt() * y.abs().pow(1.5)),
])
def test_elementwise_ops_f64(name, fn):
    d = torch.float64
    check_fn(fn, R(3, 4, dtype=d, rg=True), R(3, 4, seed=1, dtype=d, rg=True), rtol=1e-9, atol=1e-9)


# ---- the training example ----------------------------------------------------------------------------

def test_train_gpt_example_runs_and_matches_eager(capsys):
    """examples/python/train_gpt.py, 2 steps of batch 2 in both modes: the same losses (same init, same
    batches), the unigram entropy and the tokens/s line printed."""
    losses = {}
    for mode in (["--eager"], []):
        assert train_gpt.main(["--steps", "2", "--batch", "2", *mode]) == 0
        out = capsys.readouterr().out
        assert "unigram entropy of the text" in out and "tokens/s" in out
        losses[bool(mode)] = [float(l.rsplit("loss", 1)[1]) for l in out.splitlines() if l.startswith("step")]
    assert len(losses[True]) == 2
    for a, b in zip(losses[True], losses[False]):
        assert abs(a - b) < 1e-3, (losses[True], losses[False])


def test_output_independent_of_grad_inputs_does_not_require_grad():
    # as eager: an output computed only from tensors that do not require grad has requires_grad False
    # and one computed from them keeps requires_grad even where its gradient is zero (floor)
    f = lambda c, y: (y + c, c * 1, (c * y).sum(), torch.floor(y), (y > 0).float())  # noqa: E731
    c, y = torch.randn(3), torch.randn(3, requires_grad=True)
    ref = f(c, y)
    out = thunder_c.jit(f)(c, y)
    assert [o.requires_grad for o in out] == [o.requires_grad for o in ref] == [True, False, True, True, False]
    torch.testing.assert_close(out[1], ref[1])
    (out[0].sum() + out[2]).backward()
    g = y.grad.clone()
    y.grad = None
    (ref[0].sum() + ref[2]).backward()
    torch.testing.assert_close(g, y.grad)
