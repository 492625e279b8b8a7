"""Losses and distances through thunder_c.jit against PyTorch eager, for each reduction ('none', 'mean',
'sum'): the values and the gradients of the inputs and predictions (float64; targets and weights take
none), and the deprecated
size_average / reduce arguments mapped to a reduction as PyTorch maps them."""
import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 5, dtype=torch.float64, generator=g)
    y = torch.randn(4, 5, dtype=torch.float64, generator=g)
    p = torch.rand(4, 5, dtype=torch.float64, generator=g) * 0.9 + 0.05
    t = torch.rand(4, 5, dtype=torch.float64, generator=g)
    sign = torch.randint(0, 2, (4, 5), generator=g).double() * 2 - 1
    return x, y, p, t, sign


LOSSES = {
    "l1_loss": lambda x, y, p, t, s, r: F.l1_loss(x, y, reduction=r),
    "smooth_l1_loss": lambda x, y, p, t, s, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.7),
    "huber_loss": lambda x, y, p, t, s, r: F.huber_loss(x, y, reduction=r, delta=0.6),
    "binary_cross_entropy": lambda x, y, p, t, s, r: F.binary_cross_entropy(p, t, weight=t + 1, reduction=r),
    "binary_cross_entropy_with_logits": lambda x, y, p, t, s, r: F.binary_cross_entropy_with_logits(
        x, t, pos_weight=t[0] + 0.5, reduction=r),
    "kl_div": lambda x, y, p, t, s, r: F.kl_div(x.log_softmax(-1), p, reduction=r),
    "poisson_nll_loss": lambda x, y, p, t, s, r: F.poisson_nll_loss(x, t * 3, full=True, reduction=r),
    "gaussian_nll_loss": lambda x, y, p, t, s, r: F.gaussian_nll_loss(x, y, p, reduction=r),
    "hinge_embedding_loss": lambda x, y, p, t, s, r: F.hinge_embedding_loss(x, s, margin=0.5, reduction=r),
    "margin_ranking_loss": lambda x, y, p, t, s, r: F.margin_ranking_loss(x, y, s, margin=0.2, reduction=r),
    "soft_margin_loss": lambda x, y, p, t, s, r: F.soft_margin_loss(x, s, reduction=r),
    "multilabel_soft_margin_loss": lambda x, y, p, t, s, r: F.multilabel_soft_margin_loss(x, t, reduction=r),
    "cosine_embedding_loss": lambda x, y, p, t, s, r: F.cosine_embedding_loss(x, y, s[:, 0], margin=0.1,
                                                                               reduction=r),
    "triplet_margin_loss": lambda x, y, p, t, s, r: F.triplet_margin_loss(x, y, p, swap=True, reduction=r),
}


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_matches_eager_with_gradients(name, reduction):
    fn = LOSSES[name]
    inputs = _inputs(hash(name) % 1000)
    # x, y, p are differentiated; t and the signs are targets / weights that take no gradient
    ea = [t.clone().requires_grad_(i < 3) for i, t in enumerate(inputs)]
    ja = [t.clone().requires_grad_(i < 3) for i, t in enumerate(inputs)]
    want = fn(*ea, reduction)
    got = thunder_c.jit(lambda *a: fn(*a, reduction))(*ja)
    torch.testing.assert_close(got, want)
    cot = torch.randn_like(want)
    want.backward(cot)
    got.backward(cot)
    for i, (a, b) in enumerate(zip(ja[:3], ea[:3])):
        ga = torch.zeros_like(a) if a.grad is None else a.grad
        gb = torch.zeros_like(b) if b.grad is None else b.grad
        torch.testing.assert_close(ga, gb, msg=lambda m: f"input {i}: {m}")


@pytest.mark.parametrize("size_average,reduce", [(None, False), (False, None), (True, True), (False, True)])
def test_deprecated_size_average_and_reduce(size_average, reduce):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    f = lambda a, b: F.l1_loss(a, b, size_average=size_average, reduce=reduce)  # noqa: E731
    with pytest.warns(UserWarning):
        want = f(x, y)
    torch.testing.assert_close(thunder_c.jit(f)(x, y), want)


def test_distances_and_similarity():
    torch.manual_seed(0)
    a, b = torch.randn(6, 7), torch.randn(6, 7)
    for f in (lambda a, b: F.pairwise_distance(a, b, p=3.0, keepdim=True),
              lambda a, b: F.cosine_similarity(a, b, dim=0),
              lambda a, b: torch.dist(a, b, 1.5),
              lambda a, b: F.softmin(a, dim=1),
              lambda a, b: F.normalize(a, p=1.0, dim=0)):
        torch.testing.assert_close(thunder_c.jit(f)(a, b), f(a, b))
