"""torch's random samplers inside thunder_c.jit (src/ops/torch/random.c): torch.rand, randn, randint,
randperm, their _like forms, bernoulli, normal, multinomial and the in-place Tensor.uniform_, normal_,
bernoulli_, exponential_, cauchy_, log_normal_.

They draw from the program's Philox stream, keyed from torch's default generator: the values are not
eager PyTorch's, so the tests check what must hold of them — the same torch.manual_seed gives the same
values (call after call, and in a fresh jitted function), calls without reseeding differ, two samplers
of one function draw different numbers (not merged by CSE), shapes and dtypes are eager's, and the
distributions are right: mean and variance of 1e5 samples against the exact values, and the largest
distance between the empirical CDF and the exact one (Kolmogorov-Smirnov; its 0.1% critical value at
n = 1e5 is 1.95 / sqrt(n) = 0.0062). Gradients follow PyTorch's: a sample is a constant, normal's mean
and std and bernoulli's p get zeros, and dropout's backward uses its forward's mask."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder_c

N = 100_000
KS_BOUND = 0.0062


def jit_run(f, *args, seed=0):
    torch.manual_seed(seed)
    return thunder_c.jit(f)(*args)


def ks_distance(samples, cdf):
    """max |F_n(x) - F(x)| over the sorted samples (float64), both sides of each step."""
    x, _ = torch.sort(samples.double().flatten())
    n = x.numel()
    f = cdf(x)
    hi = torch.arange(1, n + 1, dtype=torch.float64) / n
    lo = torch.arange(0, n, dtype=torch.float64) / n
    return max((hi - f).abs().max().item(), (f - lo).abs().max().item())


def normal_cdf(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


X = torch.full((3, 4), 0.5)
# name -> function of a (3, 4) float32 tensor x drawing with one sampler
SAMPLERS = {
    "rand": lambda x: torch.rand(2, 3),
    "rand_f64": lambda x: torch.rand((2, 3), dtype=torch.float64),
    "rand_bf16": lambda x: torch.rand(5, dtype=torch.bfloat16),
    "rand_like": lambda x: torch.rand_like(x),
    "rand_like_f64": lambda x: torch.rand_like(x, dtype=torch.float64),
    "randn": lambda x: torch.randn(2, 3),
    "randn_f16": lambda x: torch.randn(4, dtype=torch.float16),
    "randn_like": lambda x: torch.randn_like(x),
    "randint_high": lambda x: torch.randint(10, (2, 3)),
    "randint_low_high": lambda x: torch.randint(-5, 5, (7,), dtype=torch.int32),
    "randint_kw": lambda x: torch.randint(low=2, high=4, size=(5,)),
    "randint_float": lambda x: torch.randint(0, 3, (4,), dtype=torch.float32),
    "randint_bool": lambda x: torch.randint(0, 2, (6,), dtype=torch.bool),
    "randint_like": lambda x: torch.randint_like(x, 7),
    "randint_like_low_high": lambda x: torch.randint_like(x, 3, 9, dtype=torch.int64),
    "randperm": lambda x: torch.randperm(9),
    "randperm_int32": lambda x: torch.randperm(5, dtype=torch.int32),
    "randperm_0": lambda x: torch.randperm(0),
    "bernoulli": lambda x: torch.bernoulli(x),
    "bernoulli_method": lambda x: x.bernoulli(),
    "bernoulli_p": lambda x: torch.bernoulli(x, 0.3),
    "bernoulli_p_int": lambda x: torch.bernoulli(x.long(), 0.3),
    "normal_tensor_tensor": lambda x: torch.normal(x, x * 2),
    "normal_tensor_float": lambda x: torch.normal(x.double(), 2.0),
    "normal_float_tensor": lambda x: torch.normal(1.0, x),
    "normal_broadcast": lambda x: torch.normal(x[:, :1], x[0]),
    "normal_float_float": lambda x: torch.normal(1.0, 2.0, (3, 2)),
    "normal_float_float_f64": lambda x: torch.normal(1.0, 2.0, size=(3,), dtype=torch.float64),
    "multinomial": lambda x: torch.multinomial(x, 2),
    "multinomial_1d": lambda x: torch.multinomial(x[0], 4),
    "multinomial_replacement": lambda x: torch.multinomial(x, 6, replacement=True),
    "multinomial_method": lambda x: x[0].multinomial(9, True),
    "uniform_": lambda x: x.clone().uniform_(2, 3),
    "normal_": lambda x: x.clone().normal_(1.0, 0.5),
    "bernoulli_": lambda x: x.clone().bernoulli_(0.5),
    "bernoulli_tensor_p": lambda x: x.clone().bernoulli_(x * 0.3),
    "bernoulli_int": lambda x: x.long().bernoulli_(0.5),
    "exponential_": lambda x: x.clone().exponential_(),
    "cauchy_": lambda x: x.clone().cauchy_(),
    "log_normal_": lambda x: x.clone().log_normal_(),
    "geometric_": lambda x: x.clone().geometric_(0.3),
    "geometric_int": lambda x: x.long().geometric_(0.3),
    "random_": lambda x: x.clone().random_(),
    "random_to": lambda x: x.clone().random_(10),
    "random_from_to": lambda x: x.long().random_(-4, 4),
    "random_from_none": lambda x: x.to(torch.int8).random_(100, None),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_shape_and_dtype_are_eagers(name):
    f = SAMPLERS[name]
    got, want = jit_run(f, X), f(X)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_same_seed_same_values_and_calls_differ(name):
    """manual_seed(s) then a call gives the same values call after call and in a fresh jitted function;
    a second call without reseeding draws new ones (a sampler with at least 4 elements)."""
    f = SAMPLERS[name]
    jf = thunder_c.jit(f)
    torch.manual_seed(123)
    a = jf(X)
    b = jf(X)
    torch.manual_seed(123)
    a2 = jf(X)
    a3 = jit_run(f, X, seed=123)
    torch.testing.assert_close(a2, a, rtol=0, atol=0)
    torch.testing.assert_close(a3, a, rtol=0, atol=0)
    if a.numel() >= 4 and name not in ("randint_bool", "randint_kw", "multinomial_1d"):
        assert not torch.equal(a, b), name


def test_different_seeds_differ():
    f = thunder_c.jit(lambda x: torch.rand(64) + x)
    assert not torch.equal(jit_run(f, torch.zeros(1), seed=1), jit_run(f, torch.zeros(1), seed=2))


def test_two_samplers_in_one_function_are_not_merged():
    """Two identical torch.rand (and randn) calls draw different numbers: each has its own
    get_and_update_rng_state in the trace, which CSE never merges."""
    f = thunder_c.jit(lambda x: (torch.rand(16), torch.rand(16), torch.randn(16), torch.randn(16)))
    torch.manual_seed(0)
    a, b, c, d = f(torch.zeros(1))
    assert not torch.equal(a, b) and not torch.equal(c, d)
    text = str(thunder_c.last_traces(f)[-1])
    assert text.count("prims.get_and_update_rng_state(") == 6, text  # randn draws twice (Box-Muller)
    assert text.count("prims.uniform_philox(") == 6, text


def test_uniform_distribution():
    u = jit_run(lambda x: torch.rand(N) + x, torch.zeros(1), seed=1)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005
    assert abs(u.var().item() - 1 / 12) < 0.002
    assert ks_distance(u, lambda t: t.clamp(0, 1)) < KS_BOUND
    u64 = jit_run(lambda x: torch.rand(N, dtype=torch.float64), torch.zeros(1), seed=2)
    assert u64.dtype == torch.float64 and ks_distance(u64, lambda t: t.clamp(0, 1)) < KS_BOUND
    # 53 random bits: far more distinct values than float32's 2^24 grid would give
    assert (u64 * 2**30 % 1 != 0).float().mean() > 0.99


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normal_distribution(dtype):
    z = jit_run(lambda x: torch.randn(N, dtype=dtype), torch.zeros(1), seed=3)
    assert z.dtype == dtype and torch.isfinite(z).all()
    assert abs(z.mean().item()) < 0.015
    assert abs(z.var().item() - 1) < 0.025
    assert ks_distance(z, normal_cdf) < KS_BOUND
    assert abs((z.double() ** 4).mean().item() - 3) < 0.1  # the fourth moment of a normal


def test_normal_forms_shift_and_scale():
    mean = torch.full((N,), 2.0)
    z = jit_run(lambda m: torch.normal(m, 3.0), mean, seed=4)
    assert abs(z.mean().item() - 2) < 0.05 and abs(z.std().item() - 3) < 0.05
    z = jit_run(lambda s: torch.normal(-1.0, s), torch.full((N,), 0.5), seed=5)
    assert abs(z.mean().item() + 1) < 0.01 and abs(z.std().item() - 0.5) < 0.01
    z = jit_run(lambda x: torch.normal(4.0, 2.0, (N,)), torch.zeros(1), seed=6)
    assert ks_distance((z - 4) / 2, normal_cdf) < KS_BOUND
    z = jit_run(lambda x: x.normal_(-3.0, 0.25), torch.zeros(N), seed=7)
    assert ks_distance((z + 3) / 0.25, normal_cdf) < KS_BOUND


def test_randint_range_and_frequencies():
    v = jit_run(lambda x: torch.randint(-3, 7, (N,)), torch.zeros(1), seed=8)
    assert v.dtype == torch.int64 and v.min() == -3 and v.max() == 6
    counts = torch.bincount(v + 3, minlength=10).double()
    assert counts.numel() == 10 and (counts > 0).all()  # every value hit
    assert ((counts / N - 0.1).abs() < 0.006).all(), counts
    big = jit_run(lambda x: torch.randint(0, 2**40, (N,)), torch.zeros(1), seed=9)
    assert big.min() >= 0 and big.max() < 2**40 and abs(big.double().mean().item() / 2**40 - 0.5) < 0.005
    u8 = jit_run(lambda x: torch.randint(0, 256, (N,), dtype=torch.uint8), torch.zeros(1), seed=10)
    assert u8.dtype == torch.uint8 and torch.unique(u8).numel() == 256
    like = jit_run(lambda x: torch.randint_like(x, 5), torch.zeros(N, dtype=torch.float16), seed=11)
    assert like.dtype == torch.float16 and set(like.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}


def test_randperm_is_a_uniform_permutation():
    p = jit_run(lambda x: torch.randperm(1000), torch.zeros(1), seed=12)
    assert torch.equal(torch.sort(p).values, torch.arange(1000))
    assert not torch.equal(p, torch.arange(1000))
    f = thunder_c.jit(lambda x: torch.randperm(3))
    torch.manual_seed(13)
    counts = {}
    for _ in range(3000):
        key = tuple(f(torch.zeros(1)).tolist())
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 6 and all(abs(c / 3000 - 1 / 6) < 0.03 for c in counts.values()), counts


def test_bernoulli_frequencies():
    p = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]).repeat(N // 5)
    b = jit_run(lambda p: torch.bernoulli(p), p, seed=14)
    freq = b.view(-1, 5).mean(0)
    assert freq[0] == 0 and freq[4] == 1
    torch.testing.assert_close(freq, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]), rtol=0, atol=0.01)
    b = jit_run(lambda x: torch.bernoulli(x, 0.3), torch.zeros(N), seed=15)
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.006
    b = jit_run(lambda x: x.bernoulli_(0.25), torch.zeros(N, dtype=torch.int64), seed=16)
    assert b.dtype == torch.int64 and abs(b.double().mean().item() - 0.25) < 0.006
    b = jit_run(lambda x, p: x.bernoulli_(p), torch.zeros(N), torch.tensor(0.7), seed=17)
    assert abs(b.mean().item() - 0.7) < 0.006


def test_multinomial_with_replacement_frequencies():
    probs = torch.tensor([1.0, 2.0, 0.0, 3.0, 4.0])  # unnormalized, one impossible category
    s = jit_run(lambda p: torch.multinomial(p, N, replacement=True), probs, seed=18)
    assert s.dtype == torch.int64 and s.shape == (N,)
    freq = torch.bincount(s, minlength=5).double() / N
    assert freq[2] == 0
    torch.testing.assert_close(freq, probs.double() / 10, rtol=0, atol=0.006)


def test_multinomial_without_replacement():
    """Each row's samples are distinct; the first sample of each row is distributed as probs (the
    sequential draw's law), and num_samples == categories gives a permutation."""
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4]).repeat(20000, 1)
    s = jit_run(lambda p: torch.multinomial(p, 3), probs, seed=19)
    assert s.shape == (20000, 3) and s.dtype == torch.int64
    assert all(len(set(r)) == 3 for r in s.tolist())
    first = torch.bincount(s[:, 0], minlength=4).double() / 20000
    torch.testing.assert_close(first, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), rtol=0, atol=0.012)
    full = jit_run(lambda p: torch.multinomial(p, 4), probs[:100], seed=20)
    assert torch.equal(torch.sort(full, dim=1).values, torch.arange(4).repeat(100, 1))
    zero = jit_run(lambda p: torch.multinomial(p, 2), torch.tensor([[0.0, 1.0, 0.0, 1.0]] * 500), seed=21)
    assert set(zero.flatten().tolist()) == {1, 3}  # zero-probability categories are never drawn


def test_in_place_continuous_distributions():
    u = jit_run(lambda x: x.uniform_(-2.0, 3.0), torch.zeros(N), seed=22)
    assert u.min() >= -2 and u.max() < 3 and ks_distance((u + 2) / 5, lambda t: t.clamp(0, 1)) < KS_BOUND
    e = jit_run(lambda x: x.exponential_(2.0), torch.zeros(N, dtype=torch.float64), seed=23)
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.006 and abs(e.var().item() - 0.25) < 0.01
    assert ks_distance(e, lambda t: 1 - torch.exp(-2 * t)) < KS_BOUND
    c = jit_run(lambda x: x.cauchy_(1.0, 2.0), torch.zeros(N), seed=24)
    assert ks_distance(c, lambda t: 0.5 + torch.atan((t - 1) / 2) / math.pi) < KS_BOUND
    ln = jit_run(lambda x: x.log_normal_(0.5, 0.25), torch.zeros(N), seed=25)
    assert ln.min() > 0 and ks_distance((ln.log() - 0.5) / 0.25, normal_cdf) < KS_BOUND


def test_geometric_and_random_():
    g = jit_run(lambda x: x.geometric_(0.25), torch.zeros(N, dtype=torch.float64), seed=26)
    assert g.min() == 1 and abs(g.mean().item() - 4) < 0.05 and abs(g.var().item() - 12) < 0.5  # 1/p, (1-p)/p^2
    k = torch.arange(1, 8, dtype=torch.float64)
    torch.testing.assert_close(torch.stack([(g == i).double().mean() for i in k]), 0.25 * 0.75 ** (k - 1), rtol=0,
                               atol=0.006)
    r = jit_run(lambda x: x.random_(), torch.zeros(N, dtype=torch.uint8), seed=27)
    assert torch.unique(r).numel() == 256
    r = jit_run(lambda x: x.random_(), torch.zeros(N, dtype=torch.bfloat16), seed=28)
    assert r.min() == 0 and r.max() == 256 and torch.equal(r, r.round())  # [0, 2^8]: bf16's exact integers
    r = jit_run(lambda x: x.random_(-3, 4), torch.zeros(N, dtype=torch.int8), seed=29)
    assert set(r.unique().tolist()) == set(range(-3, 4))
    r = jit_run(lambda x: x.random_(5), torch.zeros(N), seed=30)
    assert set(r.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    r = jit_run(lambda x: x.random_(100, None), torch.zeros(N, dtype=torch.int8), seed=31)
    assert set(r.unique().tolist()) == set(range(100, 128))
    r = jit_run(lambda x: x.random_(to=3), torch.zeros(N, dtype=torch.int64), seed=32)
    assert set(r.unique().tolist()) == {0, 1, 2}
    r = jit_run(lambda x: x.random_(), torch.zeros(N, dtype=torch.int64), seed=33)
    assert r.min() >= 0 and abs(r.double().mean().item() / 2**63 - 0.5) < 0.005


def test_in_place_sampler_writes_its_input():
    x = torch.zeros(8)
    torch.manual_seed(0)
    r = thunder_c.jit(lambda t: t.uniform_(1.0, 2.0))(x)
    assert torch.equal(r, x) and (x >= 1).all() and (x < 2).all()


@pytest.mark.parametrize("call,torch_name", [
    (lambda x, g: torch.rand(3, generator=g), "torch.rand"),
    (lambda x, g: torch.randn_like(x, generator=g), "torch.randn_like"),
    (lambda x, g: torch.randint(0, 4, (3,), generator=g), "torch.randint"),
    (lambda x, g: torch.normal(x, 1.0, generator=g), "torch.normal"),
    (lambda x, g: torch.bernoulli(x, generator=g), "torch.bernoulli"),
    (lambda x, g: torch.multinomial(x, 1, generator=g), "torch.multinomial"),
    (lambda x, g: torch.randperm(4, generator=g), "torch.randperm"),
    (lambda x, g: x.clone().uniform_(generator=g), "uniform_"),
    (lambda x, g: x.clone().normal_(generator=g), "normal_"),
])
def test_a_generator_is_refused_naming_the_function(call, torch_name):
    g = torch.Generator().manual_seed(0)
    with pytest.raises(NotImplementedError, match=rf"{torch_name}.* with a generator is not supported"):
        thunder_c.jit(call)(torch.full((3,), 0.5), g)


@pytest.mark.parametrize("call", [
    lambda x: torch.rand(3, dtype=torch.int64),
    lambda x: torch.rand_like(x.long()),
    lambda x: torch.randn(3, dtype=torch.int32),
    lambda x: torch.randint(5, 5, (3,)),
    lambda x: torch.randint(-3, (3,)),
    lambda x: torch.randint(0, 300, (3,), dtype=torch.uint8),
    lambda x: torch.randint(0, 3, (3,), requires_grad=True),
    lambda x: torch.bernoulli(x.long()),
    lambda x: torch.bernoulli(x, 1.5),
    lambda x: torch.normal(0.0, -1.0, (3,)),
    lambda x: torch.normal(x, -1.0),
    lambda x: torch.normal(x.long(), 1.0),
    lambda x: x.clone().uniform_(2, 1),
    lambda x: x.long().uniform_(),
    lambda x: x.long().normal_(),
    lambda x: x.clone().exponential_(-1),
    lambda x: x.long().exponential_(),
    lambda x: torch.multinomial(x.long(), 2),
    lambda x: torch.multinomial(x, 4),
    lambda x: torch.multinomial(x, 0),
    lambda x: torch.multinomial(x.reshape(1, 1, 3), 1),
    lambda x: torch.randperm(-1),
    lambda x: x.clone().geometric_(1.0),
    lambda x: x.clone().geometric_(0),
    lambda x: x.clone().random_(5, 2),
    lambda x: x.to(torch.uint8).random_(300),
])
def test_errors_match_torch(call):
    """PyTorch's error type and message for a bad dtype, range or shape (thunder_c prefixes the op)."""
    x = torch.full((3,), 0.5)
    with pytest.raises(Exception) as want:
        call(x)
    with pytest.raises(type(want.value)) as got:
        thunder_c.jit(call)(x)
    first = str(want.value).split("\n")[0].split(" (Could")[0]
    assert first in str(got.value), (str(got.value), first)


def test_requires_grad_true_is_not_supported():
    with pytest.raises(NotImplementedError, match="requires_grad=True is not supported"):
        thunder_c.jit(lambda x: torch.rand(3, requires_grad=True) + x)(torch.zeros(3))


def test_a_sample_is_a_constant_for_the_gradient():
    def f(x):
        z = torch.randn(6)
        return z * x, z

    x = torch.ones(6, requires_grad=True)
    torch.manual_seed(0)
    y, z = thunder_c.jit(f)(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, z)


@pytest.mark.parametrize("name,f", [
    ("normal_tensor_tensor", lambda m, s: torch.normal(m, s) + m * s),
    ("normal_tensor_float", lambda m, s: torch.normal(m, 2.0) * s),
    ("bernoulli", lambda m, s: torch.bernoulli(m * 0.5) * s + m),
])
def test_gradients_of_sampler_inputs_are_torchs(name, f):
    """normal's mean and std and bernoulli's p get zero gradients, as PyTorch's derivatives give; the
    other paths of the function still carry theirs (the sample enters as the constant it drew)."""
    m0, s0 = torch.full((5,), 0.5), torch.full((5,), 2.0)
    m, s = m0.clone().requires_grad_(), s0.clone().requires_grad_()
    torch.manual_seed(0)
    out = thunder_c.jit(f)(m, s)
    out.sum().backward()
    me, se = m0.clone().requires_grad_(), s0.clone().requires_grad_()
    f(me, se).sum().backward()
    if name == "normal_tensor_tensor":
        torch.testing.assert_close(m.grad, me.grad)  # normal's zero gradient plus m * s's: s
        torch.testing.assert_close(s.grad, se.grad)
        torch.testing.assert_close(m.grad, s0)
    elif name == "normal_tensor_float":
        assert torch.equal(m.grad, torch.zeros(5))
        torch.testing.assert_close(s.grad, out.detach() / s0)  # the sample itself
    else:
        torch.testing.assert_close(m.grad, torch.ones(5))
        assert set(s.grad.tolist()) <= {0.0, 1.0}


def test_dropout_backward_uses_the_forward_mask():
    """h = x @ w, d = dropout(h): w's gradient is x^T (mask * scale) with mask the forward's kept
    elements (d != 0), the mask the backward recomputes or saves from the same draw."""
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    w = torch.randn(8, 32, requires_grad=True)
    torch.manual_seed(1)
    d = thunder_c.jit(lambda x, w: F.dropout(x @ w, 0.25, training=True))(x, w)
    d.sum().backward()
    mask = (d.detach() != 0).float()
    assert 0.6 < mask.mean() < 0.9
    torch.testing.assert_close(w.grad, x.T @ (mask / 0.75))


def test_model_with_dropout_trains_through_jit():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1)).train()
    jm = thunder_c.jit(model)
    x = torch.randn(256, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = F.mse_loss(jm(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0], losses[::10]
    model.eval()
    a, b = jm(x), jm(x)
    assert torch.equal(a, b)  # eval mode: dropout is the identity
