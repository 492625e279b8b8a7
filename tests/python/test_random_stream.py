"""Random ops inside thunder_c.jit follow torch's default CPU generator on every call.

Each call of a jitted function with dropout takes its Philox key from torch.default_generator and
advances that generator by the words eager PyTorch draws for the same ops (docs/python.md, "Random
numbers"). The references are PyTorch's own: the generator's next draws after the eager function
(torch.rand after F.dropout), torch.manual_seed's reproducibility, and the masks' statistics. The masks
themselves are thunder-c's stream, so no test compares them with eager's bits."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def after(fn, *args, seed=1):
    """fn(*args) right after torch.manual_seed(seed), and the next three numbers torch draws then."""
    torch.manual_seed(seed)
    out = fn(*args)
    return out, torch.rand(3)


def drop(x):
    return F.dropout(x, 0.5) * 2


def test_manual_seed_reproduces_every_call_cached_or_not():
    jf = thunder_c.jit(drop)
    x = torch.ones(1000)
    first, _ = after(jf, x)  # the compiling call
    for _ in range(3):       # cached calls
        again, _ = after(jf, x)
        assert torch.equal(first, again)
    other, _ = after(jf, x, seed=2)
    assert not torch.equal(first, other)


def test_calls_without_reseeding_differ():
    jf = thunder_c.jit(drop)
    x = torch.ones(1000)
    torch.manual_seed(0)
    outs = [jf(x) for _ in range(4)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert (outs[i] != outs[j]).sum() > 100


@pytest.mark.parametrize("shape,dtype", [((1,), torch.float32), ((3,), torch.float32), ((623,), torch.float32),
                                         ((624,), torch.float32), ((625,), torch.float32), ((8, 33, 7), torch.float32),
                                         ((40, 50), torch.bfloat16), ((2, 300), torch.float64)],
                         ids=lambda v: str(v))
def test_generator_advances_as_eager_does(shape, dtype):
    """After the call torch draws what it draws after the eager function: the call consumed as many
    words of the Mersenne Twister as eager's dropout (across twists of its 624-word state)."""
    x = torch.ones(shape, dtype=dtype)
    jf = thunder_c.jit(drop)
    _, want = after(drop, x)
    for _ in range(2):
        _, got = after(jf, x)
        assert torch.equal(got, want)


def test_generator_advances_as_eager_does_for_two_dropouts_and_sdpa():
    def f(x, q):
        a = F.dropout(x, 0.1)
        b = F.dropout(x.sin(), 0.7)
        c = F.scaled_dot_product_attention(q, q, q, dropout_p=0.2)
        return a + b, c

    x, q = torch.ones(37, 5), torch.randn(2, 3, 8, 4)
    jf = thunder_c.jit(f)
    _, want = after(f, x, q)
    _, got = after(jf, x, q)
    assert torch.equal(got, want)


def test_no_draw_without_sampling():
    """Dropout in eval mode or with p == 0 draws nothing, as eager."""
    x = torch.ones(100)
    for f in (lambda x: F.dropout(x, 0.5, training=False) + 1, lambda x: F.dropout(x, 0.0) + 1):
        _, want = after(f, x)
        _, got = after(thunder_c.jit(f), x)
        assert torch.equal(got, want)
        torch.manual_seed(1)
        assert torch.equal(torch.rand(3), want)  # nothing drawn at all


def test_two_dropouts_in_one_trace_never_share_a_stream():
    def f(x):
        return F.dropout(x, 0.5), F.dropout(x, 0.5)

    jf = thunder_c.jit(f)
    x = torch.ones(4000)
    torch.manual_seed(0)
    a, b = jf(x)
    # independent masks agree on about half of the elements, equal ones on all
    agree = ((a != 0) == (b != 0)).float().mean().item()
    assert 0.45 < agree < 0.55
    final = str(thunder_c.last_traces(jf)[-1])
    assert final.count("prims.get_and_update_rng_state(") == 2  # CSE merged neither draw
    assert final.count("prims.uniform_philox(") == 2


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_mask_statistics(p):
    """The kept fraction is 1 - p within 5 standard deviations; kept elements are scaled by 1 / (1 - p)."""
    n = 20000
    x = torch.ones(n)
    torch.manual_seed(0)
    y = thunder_c.jit(lambda x: F.dropout(x, p))(x)
    kept = (y != 0).float().mean().item()
    assert abs(kept - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p)))


def test_backward_recomputes_the_forward_mask():
    """Under autograd the backward recomputes the mask from the saved generator state (two 0-dim
    int64 tensors, not the mask) and the gradient is that of the forward's mask."""
    def f(x):
        return (F.dropout(x, 0.5) * x.sin()).sum()

    jf = thunder_c.jit(f)
    x = torch.randn(4096, requires_grad=True)
    torch.manual_seed(3)
    y = thunder_c.jit(lambda x: F.dropout(x, 0.5))(x.detach())
    torch.manual_seed(3)
    jf(x).backward()
    keep = (y != 0).float() * 2
    xd = x.detach()
    torch.testing.assert_close(x.grad, keep * (xd.sin() + xd * xd.cos()))
    bwd = str(thunder_c.last_backward_traces(jf)[-1])
    assert "prims.uniform_philox(" in bwd and "get_and_update_rng_state" not in bwd
    # the saved tensors (the lines unpacking C0): x and the generator state, no mask
    lines = bwd.splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().endswith("= C0"))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "del C0")
    saved_types = [l.split(":", 1)[1].strip() for l in lines[start + 1:end]]
    assert sorted(saved_types) == ['"cpu f32[4096]"', '"cpu i64[]"', '"cpu i64[]"']


def test_module_dropout_follows_manual_seed_in_training():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.25), nn.Linear(32, 4))
    jm = thunder_c.jit(m)
    x = torch.randn(8, 16)
    a, ra = after(jm, x)
    b, rb = after(jm, x)
    assert torch.equal(a, b) and torch.equal(ra, rb)
    _, re = after(m, x)
    assert torch.equal(ra, re)
    m.eval()
    torch.testing.assert_close(jm(x), m(x))


def test_seeding_inside_the_jitted_function_is_refused():
    """torch.manual_seed inside the function would run once, while traced: refused, saying so."""
    def f(x):
        torch.manual_seed(0)
        return F.dropout(x, 0.5)

    with pytest.raises(NotImplementedError, match="changed torch's default generator while it was traced"):
        thunder_c.jit(f)(torch.ones(8))


def test_dropout_p1_is_input_times_zero():
    """p == 1: input * 0 as eager (NaN and inf give NaN) and the gradient, zeros, reaches the input."""
    def f(x):
        return F.dropout(x, 1.0) * 3

    x = torch.tensor([float("nan"), 1.0, float("inf"), -2.0], requires_grad=True)
    y = thunder_c.jit(f)(x)
    torch.testing.assert_close(y, f(x), equal_nan=True)
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros(4))


def test_sampling_prims_follow_manual_seed():
    """The prims themselves (a jitted execution trace, or thunder_c.prims called directly) take their
    state from torch's generator on every call too."""
    cpu = torch.device("cpu")
    P = thunder_c.prims

    def g(x):
        s, o = P.get_and_update_rng_state(2, device=cpu)
        return x + P.uniform_philox((8,), 0.0, 1.0, device=cpu, dtype=torch.float32, seed=s, offset=o)

    x = torch.zeros(8)
    jg = thunder_c.jit(g)
    a, _ = after(jg, x)
    b, _ = after(jg, x)
    c, _ = after(jg, x, seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)

    jd = thunder_c.jit(drop)
    jd(torch.ones(100))
    jt = thunder_c.jit(thunder_c.trace_from_text(str(thunder_c.last_traces(jd)[-1])))
    a, _ = after(jt, torch.ones(100))
    b, _ = after(jt, torch.ones(100))
    c, _ = after(jt, torch.ones(100), seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)
