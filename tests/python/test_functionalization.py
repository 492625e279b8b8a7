"""In-place updates through thunder_c.jit, against PyTorch eager: functionalization (the op plus
prims.copy_, whose output is the new version; prims.update_aliases for every tensor that may share
memory with the updated one), views and their bases, setitem, inputs passed twice, and an Adam step
written with in-place ops (Thunder's in-place scenarios, on the CPU). Each case runs the same
function eagerly on clones of the inputs and compares the outputs AND the inputs afterwards."""
import math

import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def run_both(f, *inputs, jf=None):
    """(eager result, eager inputs after, jit result, jit inputs after) on clones of inputs."""
    ea = [t.clone() for t in inputs]
    ja = [t.clone() for t in inputs]
    want = f(*ea)
    got = (jf or thunder_c.jit(f))(*ja)
    return want, ea, got, ja


def close(a, b):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y)
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"expected a tensor, got {type(b)}"
        torch.testing.assert_close(b, a)
    else:
        assert a == b


def same_as_eager(f, *inputs):
    want, ea, got, ja = run_both(f, *inputs)
    close(want, got)
    close(ea, ja)  # the inputs were updated as eager updated them
    return got, ja


def qualnames(trace):
    return [b.qualname for b in trace.bound_symbols]


def test_seed004_iadd_updates_the_callers_tensor_and_returns_none():
    def f(a):
        a += 1
    for executors in (None, ["eager"], ["blas", "eager"]):
        a = torch.tensor(0)
        jf = thunder_c.jit(f, executors=executors)
        assert jf(a) is None
        assert a.item() == 1
        for t in thunder_c.last_traces(jf):
            ret = t.bound_symbols[-1]
            assert ret.qualname == "prims.python_return"
            # the return carries the copy's output (a's final version): a data edge copy_ -> return
            copies = [b for b in t.bound_symbols if b.qualname in ("prims.copy_", "ltorch.add_")]
            assert copies and copies[-1].output_names[0] in ret.arg_names


def test_add_then_return_other():
    def f(a, b):
        a += b
        return b
    a, b = torch.randn(4), torch.randn(4)
    a0 = a.clone()
    out = thunder_c.jit(f)(a, b)
    assert out.data_ptr() == b.data_ptr()
    torch.testing.assert_close(a, a0 + b)


def test_two_inputs_updated_and_combined():
    def f(x, y):
        x += 1
        y *= 2
        return x + y
    got, ja = same_as_eager(f, torch.randn(3), torch.randn(3))


def test_views_see_the_update_of_their_base():
    def j(x):
        a = x.view(-1)
        b = x.view(-1)
        x.add_(1)
        return a + 1, b + 1
    x = torch.randn(2, 3)
    got, _ = same_as_eager(j, x)
    torch.testing.assert_close(got[0], x.flatten() + 2)

    def k(x):
        y = x.view(2, 3)
        return x.exp_() * y.tanh_()
    same_as_eager(k, torch.randn(2, 3))


def test_update_through_a_view_changes_the_base():
    def f(x):
        y = x.view(6)
        y.add_(1)
        return x * 1
    same_as_eager(f, torch.randn(2, 3))

    def g(x):
        y = x.t()
        y.mul_(2)
        return x + 0, y + 0
    same_as_eager(g, torch.randn(2, 3))

    def h(x):  # a slice: only part of the base changes
        x[1:].zero_()
        return x.sum()
    same_as_eager(h, torch.randn(4))


def test_reshape_that_copies_does_not_change_the_base():
    def f(x):
        y = x.t().reshape(-1)  # not viewable: PyTorch copies, so the update stays in y
        y.add_(1)
        return x + 0, y
    same_as_eager(f, torch.randn(2, 3))


def test_setitem_with_basic_indexing():
    def f(x, v):
        x[0] = 5.0
        x[:, 1] = v
        x[1, 2:] = v[0]
        return x * 2
    same_as_eager(f, torch.randn(3, 4), torch.randn(3))


def test_aliased_arguments():
    def f(a, b):
        return a.exp_() + b.tanh_(), a
    jf = thunder_c.jit(f)
    a0 = torch.randn(3)
    ea, ja = a0.clone(), a0.clone()
    want = f(ea, ea)
    got = jf(ja, ja)
    torch.testing.assert_close(ja, ea)  # a == tanh(exp(a0))
    torch.testing.assert_close(got[0], want[0])  # == 2 * a
    assert got[1].data_ptr() == ja.data_ptr()
    # call sequence (a,a), (a,b), (b,b), (b,a): aliasing is part of the cache key
    jf2 = thunder_c.jit(f)
    a, b = torch.randn(3), torch.randn(3)
    seen = []
    for args in ((a, a), (a, b), (b, b), (b, a)):
        jf2(*args)
        seen.append((thunder_c.cache_hits(jf2), thunder_c.cache_misses(jf2)))
    assert seen == [(0, 1), (0, 2), (1, 2), (2, 2)]

    def z(a):
        return a.zero_()
    a = torch.randn(3)
    out = thunder_c.jit(z)(a)
    assert torch.count_nonzero(a) == 0 and torch.count_nonzero(out) == 0


def test_inplace_on_a_leaf_that_requires_grad_raises():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        thunder_c.jit(lambda x: x.copy_(x))(x)
    # the source is converted to the destination's dtype inside copy_
    def f(x, y):
        x.add_(y)
        return x
    same_as_eager(f, torch.randn(4).bfloat16(), torch.randn(4))


def test_adam_step_with_inplace_ops_matches_torch_optim():
    torch.manual_seed(0)
    params = [torch.randn(4, 3), torch.randn(3)]
    grads = [torch.randn(4, 3), torch.randn(3)]
    lr, beta1, beta2, eps = 1e-2, 0.9, 0.999, 1e-8

    def adam_step(params, grads, exp_avgs, exp_avg_sqs, step):
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
            m.mul_(beta1).add_(g, alpha=1 - beta1)
            v.mul_(beta2).add_(g * g, alpha=1 - beta2)
            denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)
            p.add_(m / denom, alpha=-lr / bias_correction1)

    # reference: torch.optim.Adam on the same parameters, two steps
    ref = [p.clone().requires_grad_() for p in params]
    opt = torch.optim.Adam(ref, lr=lr, betas=(beta1, beta2), eps=eps)
    mine = [p.clone() for p in params]
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    jstep = thunder_c.jit(adam_step)
    for step in (1, 2):
        for r, g in zip(ref, grads):
            r.grad = g.clone()
        opt.step()
        jstep(mine, grads, ms, vs, step)
    for r, p in zip(ref, mine):
        torch.testing.assert_close(p, r.detach())


def test_update_aliases_in_the_trace_and_return_last():
    def k(x):
        y = x.view(2, 3)
        return x.exp_() * y.tanh_()
    jk = thunder_c.jit(k)
    jk(torch.randn(2, 3))
    for t in thunder_c.last_traces(jk):
        t.verify()
        names = qualnames(t)
        assert names[-1] == "prims.python_return"
    final = qualnames(thunder_c.last_traces(jk)[-1])
    assert final.count("prims.copy_") == 2
    assert final.count("prims.update_aliases") == 2


def test_cse_does_not_merge_reads_across_an_update():
    def f(x):
        a = x * 2
        x.add_(1)
        b = x * 2  # x is a new version: not the same expression as a
        return a, b
    same_as_eager(f, torch.randn(3))


def test_random_op_twice_stays_twice():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True), torch.nn.functional.dropout(x, 0.5, training=True)
    jf = thunder_c.jit(f)
    a, b = jf(torch.ones(1000))
    assert not torch.equal(a, b)
    assert [n for n in qualnames(thunder_c.last_traces(jf)[-1]) if "uniform" in n].__len__() == 2


def test_bool_tensor_with_python_int_promotes_like_pytorch():
    b = torch.tensor([True, False])
    for f in (lambda b: b + 300, lambda b: b * 2, lambda b: 1 + b, lambda b: b // 2,
              lambda b: b + 1 + torch.ones(2, dtype=torch.int8)):
        want, got = f(b), thunder_c.jit(f)(b)
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_isinstance_tensor_and_constants_inside_the_function():
    def f(x, bias):
        if isinstance(bias, torch.Tensor) and torch.is_tensor(x):
            x = x + bias
        return x.masked_fill(x > 1, torch.tensor(0.5)) + torch.tensor([1.0, 2.0, 3.0]), torch.numel(x)
    want = f(torch.zeros(3), torch.ones(3) * 2)
    got = thunder_c.jit(f)(torch.zeros(3), torch.ones(3) * 2)
    close(want, got)


def test_out_kwarg_is_not_supported():
    with pytest.raises(NotImplementedError, match="out="):
        thunder_c.jit(lambda a, b, c: torch.add(a, b, out=c))(torch.ones(2), torch.ones(2), torch.ones(2))


def test_module_state_side_effects():
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            self.count += 1  # a buffer updated in place: replayed at every call
            return self.lin(x)

    m = Cache()
    tm = thunder_c.jit(m)
    x = torch.randn(2, 3)
    for _ in range(3):
        torch.testing.assert_close(tm(x), m.lin(x))
    assert m.count.item() == 3
    assert set(tm.state_dict()) == set(m.state_dict()) == {"lin.weight", "lin.bias", "count"}

    class Stores(torch.nn.Module):
        def forward(self, x):
            self.cache = x * 2  # a computed tensor stored on the module: set after each call, as in eager
            self.note = "seen"
            return x

    sm = Stores()
    jsm = thunder_c.jit(sm)
    for i in range(3):
        x = torch.randn(2)
        jsm(x)
        torch.testing.assert_close(sm.cache, x * 2)
    assert sm.note == "seen"
    assert (thunder_c.cache_misses(jsm), thunder_c.cache_hits(jsm)) == (1, 2)  # the new attribute is no edit


def test_tensor_assigned_to_a_module_attribute_is_read_after_the_call_and_differentiates():
    """llama2.c's pattern: forward stores its loss in self.last_loss (None at inference); after each call
    the attribute holds what eager's would, and loss.backward() through it fills the gradients."""
    import torch.nn.functional as F

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.last_loss = None

        def forward(self, x, targets=None):
            y = self.lin(x)
            if targets is not None:
                self.last_loss = F.cross_entropy(y, targets)
            else:
                self.last_loss = None
            return y

    torch.manual_seed(0)
    m, ref = LM(), LM()
    ref.load_state_dict(m.state_dict())
    jm = thunder_c.jit(m)
    x, t = torch.randn(5, 4), torch.randint(0, 3, (5,))
    jm(x, t)
    ref(x, t)
    torch.testing.assert_close(m.last_loss, ref.last_loss)
    assert jm.last_loss is m.last_loss  # the jitted module reads the model's attributes
    m.last_loss.backward()
    ref.last_loss.backward()
    torch.testing.assert_close(m.lin.weight.grad, ref.lin.weight.grad)
    torch.testing.assert_close(m.lin.bias.grad, ref.lin.bias.grad)
    with torch.no_grad():
        jm(x)
    assert m.last_loss is None
    jm(x, t)
    torch.testing.assert_close(m.last_loss, ref.last_loss)
    assert thunder_c.cache_misses(jm) == 2  # with targets (under autograd) and without: no retrace after that


def test_returned_model_output_keeps_its_type():
    """A dict subclass returned by forward (transformers' ModelOutput) comes back as that type."""
    import collections
    import dataclasses

    @dataclasses.dataclass
    class Out(collections.OrderedDict):
        logits: torch.Tensor = None

        def __post_init__(self):
            self["logits"] = self.logits

    jf = thunder_c.jit(lambda x: Out(logits=x * 2))
    r = jf(torch.ones(2))
    assert type(r) is Out
    torch.testing.assert_close(r.logits, torch.full((2,), 2.0))


G = torch.zeros(2)


def test_inplace_on_a_captured_tensor_is_seen_by_later_reads():
    def f(x):
        a = G * 1
        G.add_(x)
        b = G * 1  # must see the update
        v = G[0:1]
        G.mul_(2)
        return a, b, v * 1
    G.zero_()
    want = f(torch.ones(2))
    G.zero_()
    got = thunder_c.jit(f)(torch.ones(2))
    close(want, got)
    torch.testing.assert_close(G, torch.full((2,), 2.0))


def test_plain_tensor_attribute_updated_in_place():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.plain = torch.zeros(1)

        def forward(self, x):
            self.plain += 1
            return x * self.plain

    m = M()
    jm = thunder_c.jit(m)
    x = torch.ones(2)
    assert jm(x).tolist() == [1.0, 1.0] and jm(x).tolist() == [2.0, 2.0]
    assert isinstance(m.plain, torch.Tensor) and m.plain.item() == 2.0


def test_two_threads_tracing_at_once():
    import threading
    ev1, ev2 = threading.Event(), threading.Event()

    def fa(x):
        y = x + 1
        ev1.set()
        ev2.wait(5)
        return y

    def fb(x):
        ev1.wait(5)
        y = x * 2
        ev2.set()
        return y

    ja, jb = thunder_c.jit(fa), thunder_c.jit(fb)
    res = {}

    def run(name, j):
        try:
            res[name] = j(torch.ones(2))
        except Exception as e:  # noqa: BLE001 - reported below
            res[name] = e

    ts = [threading.Thread(target=run, args=("A", ja)), threading.Thread(target=run, args=("B", jb))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert torch.equal(res["A"], torch.full((2,), 2.0)) and torch.equal(res["B"], torch.full((2,), 2.0))
    assert not thunder_c._C.is_tracing()


def test_adversarial_regressions():
    """Findings of the adversarial pass, each a silent wrong result or crash before its fix."""
    import numpy as np
    x = torch.ones(2)
    # `G += x` on a global leaves the user's tensor bound (not a proxy)
    g = {"G": torch.zeros(2)}
    exec("def f(x):\n    global G\n    G += x\n    return G * 1", g)
    jf = thunder_c.jit(g["f"])
    assert jf(x).tolist() == [1.0, 1.0] and type(g["G"]) is torch.Tensor and jf(x).tolist() == [2.0, 2.0]
    # a jitted function called inside another trace is inlined, even on real tensors
    H = torch.ones(2)
    inner = thunder_c.jit(lambda t: t * 3)
    outer = thunder_c.jit(lambda x: x + inner(H))
    assert outer(x).tolist() == [4.0, 4.0]
    H.add_(1)
    assert outer(x).tolist() == [7.0, 7.0]
    # two equal computed outputs are two tensors
    a, b = thunder_c.jit(lambda x: (x * 2, x * 2))(torch.ones(3))
    a.add_(100)
    assert b.tolist() == [2.0, 2.0, 2.0]
    # a lazily negated view is read with its sign
    z = torch.tensor([1 + 2j, 3 - 4j])
    v = z.conj().imag
    torch.testing.assert_close(thunder_c.jit(lambda v: v * 1)(v), v * 1)
    # empty tensors slice like PyTorch
    e = torch.zeros(0, 4)
    assert thunder_c.jit(lambda e: e[:, 2:])(e).shape == (0, 2)
    # devices, dtypes and numpy scalars are keyed by value (no retrace per call)
    jd = thunder_c.jit(lambda x, d, s: x.to(d) * s)
    for _ in range(5):
        jd(x, x.device, np.float64(2.0))
    assert thunder_c.cache_misses(jd) == 1
    # a NumPy array operand, and thunder_c dtypes hash like torch's
    torch.testing.assert_close(thunder_c.jit(lambda x: x * np.array([2.0]))(x), x * np.array([2.0]))
    assert {torch.float32: 1}[thunder_c.float32] == 1
    # a captured tensor resized between calls: traced again, not an error
    V = torch.ones(4)
    jv = thunder_c.jit(lambda x: x.sum() + V.sum())
    assert jv(x).item() == 6.0
    V.data = torch.ones(8)
    assert jv(x).item() == 10.0
    # a module edited after jit(): a submodule replaced is seen
    m = torch.nn.Sequential(torch.nn.Linear(2, 2))
    tm = thunder_c.jit(m)
    tm(x)
    m[0] = torch.nn.Linear(2, 2)
    torch.testing.assert_close(tm(x), m(x))
    # torch.set_default_dtype other than float32 is refused, not ignored
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(NotImplementedError, match="set_default_dtype"):
            thunder_c.jit(lambda x: x + torch.ones(2))(x)
    finally:
        torch.set_default_dtype(prev)


def test_two_copies_into_one_destination():
    """Two copy_ into one input; outputs are distinct buffers equal to eager."""
    def f(t0):
        t1 = torch.sin(t0)
        t0.copy_(t1)
        t2 = torch.cos(t1)
        t0.copy_(t2)
        return t1, t2
    t0 = torch.randn(5)
    got, ja = same_as_eager(f, t0)
    assert got[0].data_ptr() != got[1].data_ptr()
    torch.testing.assert_close(ja[0], torch.cos(torch.sin(t0)))

    def g(x, y):  # z = x * y; copy_(z, x); copy_(y, x): the last copy wins, as in eager
        z = x * y
        x.copy_(z)
        x.copy_(y)
        return x, z
    same_as_eager(g, torch.randn(3), torch.randn(3))
