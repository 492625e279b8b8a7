"""Indexing through thunder_c.jit against eager PyTorch, forward and gradients: advanced getitem (tensor
indices in any position, several broadcast together, Python lists, bools, None and Ellipsis mixed in),
assignment through advanced indices (functionalized Tensor.__setitem__), index_put / scatter_add /
index_add with duplicate indices (their gradients accumulate), the dim-wise index ops, embedding_bag,
searchsorted, and the errors and NotImplementedErrors of the data-dependent cases."""
import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def jit_value_and_grad(fn, *args):
    """fn traced by thunder_c.jit, its forward and backward run (eager executor) with a fixed cotangent:
    (output, gradients of the floating inputs) next to PyTorch's autograd for the same call."""
    jf = thunder_c.jit(fn, executors=["eager"])
    jf(*args)
    tr = thunder_c.last_traces(jf)[0]
    ref_in = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    want = fn(*ref_in)
    torch.manual_seed(7)
    cot = torch.randn_like(want)
    got, grads = thunder_c.transforms.value_and_grad(tr, *args, cotangents=(cot,), executors=["eager"])
    diff = [t for t in ref_in if t.requires_grad]
    ref = torch.autograd.grad(want, diff, cot, allow_unused=True)
    ref = iter(ref)
    pairs = []
    for t, g in zip(ref_in, grads):
        if t.requires_grad:
            r = next(ref)
            pairs.append((g, torch.zeros_like(t) if r is None else r))
    return got, want.detach(), pairs


def check(fn, *args):
    got, want, pairs = jit_value_and_grad(fn, *args)
    torch.testing.assert_close(got, want)
    for g, r in pairs:
        torch.testing.assert_close(g, r)


X = torch.randn(4, 3, 5, dtype=torch.float64)
I = torch.tensor([0, 2, -1, 2])  # a repeated index: the gradient accumulates


I32 = torch.tensor([1, 0], dtype=torch.int32)
T2 = torch.tensor(2)
J = torch.tensor([[0, 1], [1, 0]])


@pytest.mark.parametrize("name,fn", [
    ("list_last", lambda x, i, j: x[:, [-1], :]),  # nanoGPT's generate
    ("list_rows", lambda x, i, j: x[[0, 2]]),
    ("tensor_first", lambda x, i, j: x[i]),
    ("tensor_middle", lambda x, i, j: x[:, i[:3]]),
    ("tensor_last_ellipsis", lambda x, i, j: x[..., i]),
    ("two_adjacent", lambda x, i, j: x[i, i[:1] + 1]),  # broadcast (4,) with (1,), in place of dims 0, 1
    ("two_separated", lambda x, i, j: x[i, :, i]),  # separated by a slice: the index dims go first
    ("int_then_tensor", lambda x, i, j: x[1, :, i]),  # ints apply first, as PyTorch (not NumPy)
    ("none_between", lambda x, i, j: x[j, None, j % 3]),
    ("slice_and_tensor", lambda x, i, j: x[1:3, i[:2], ::2]),
    ("two_dim_index", lambda x, i, j: x[:, j]),
    ("bool_true", lambda x, i, j: x[True]),
    ("bool_false", lambda x, i, j: x[False] + 1),
    ("bool_list", lambda x, i, j: x[[True, False, True, True]]),
    ("nested_list", lambda x, i, j: x[[[0, 1], [2, 3]], 1]),
    ("tuple_in_key", lambda x, i, j: x[(0, 1), ]),
])
def test_getitem_matches_eager(name, fn):
    check(fn, X, I, J)


def test_getitem_int32_and_0dim_indices():
    check(lambda x, i: x[:, i], X, I32)
    check(lambda x, i: x[i], X, T2)


def test_getitem_result_placement_matches_numpy_rules():
    x = torch.randn(2, 3, 4, 5)
    i = torch.tensor([[0, 1], [1, 0]])
    for f in (lambda t: t[:, i, i], lambda t: t[i, :, i], lambda t: t[..., i, :], lambda t: t[None, :, i, None]):
        got = thunder_c.jit(f)(x)
        assert got.shape == f(x).shape
        assert torch.equal(got, f(x))


def test_bool_mask_getitem_is_not_implemented():
    m = torch.tensor([True, False, True, False])
    with pytest.raises(NotImplementedError, match="bool"):
        thunder_c.jit(lambda x, m: x[m])(X, m)
    with pytest.raises(NotImplementedError, match="0-dim bool"):
        thunder_c.jit(lambda x: x[torch.tensor(True)])(X)


def test_out_of_range_index_is_an_index_error():
    with pytest.raises(IndexError):
        thunder_c.jit(lambda x, i: x[i])(X, torch.tensor([4]))
    with pytest.raises(IndexError):  # below -size: not wrapped into range by the linearization
        thunder_c.jit(lambda x, i, j: x[i, j])(X, torch.tensor([1]), torch.tensor([-4]))


MASK = torch.tensor([True, False, True, True])


@pytest.mark.parametrize("name,key,vshape", [
    ("tensor", lambda i, m: (i[:3],), (3, 3, 5)),
    ("list", lambda i, m: (slice(None), [0, 2]), (4, 2, 5)),
    ("separated", lambda i, m: (i[:2], slice(None), i[1:3] + 1), (2, 3)),
    ("broadcast_values", lambda i, m: (Ellipsis, i[:1]), (1,)),
    ("mask_row_values", lambda i, m: (m,), (5,)),  # one value row for every selected row
    ("mask_values_per_row", lambda i, m: (m,), (3, 3, 5)),  # one value per selected element
    ("mask_inner", lambda i, m: (slice(None), m[:3]), (1, 5)),
])
def test_setitem_matches_eager(name, key, vshape):
    def f(x, v, i, m):
        y = x.clone()
        y[key(i, m)] = v
        return y * 2
    check(f, X, torch.randn(vshape, dtype=torch.float64), I, MASK)


def test_setitem_number_and_the_input_is_updated():
    x = X.clone()
    y = X.clone()

    def f(t):
        t[[0, 3], 1] = 7.0
        return t + 0

    got = thunder_c.jit(f)(x)
    want = f(y)
    assert torch.equal(got, want) and torch.equal(x, y)


def test_index_put_accumulate_with_duplicates():
    i0, i1 = torch.tensor([0, 0, 3, 0]), torch.tensor([1, 1, 2, 1])
    v = torch.randn(4, 5, dtype=torch.float64)
    check(lambda x, v, i0, i1: torch.index_put(x, (i0, i1), v, accumulate=True), X, v, i0, i1)
    check(lambda x, v, i0, i1: x.index_put((i0[1:], i1[1:]), v[1:, :1]), X, v, i0, i1)  # unique positions


def test_scatter_add_and_index_add_duplicates_backward():
    idx = torch.tensor([[0, 1, 0], [2, 2, 2]])
    src = torch.randn(2, 3, dtype=torch.float64)
    check(lambda a, s, i: torch.scatter_add(a, 0, i, s), torch.randn(3, 3, dtype=torch.float64), src, idx)
    check(lambda a, s, i: a.index_add(1, i, s, alpha=2), torch.randn(2, 3, dtype=torch.float64), src,
          torch.tensor([0, 0, 2]))
    check(lambda a, i: torch.gather(a, 1, i), torch.randn(2, 3, dtype=torch.float64), torch.tensor([[0, 0], [2, 1]]))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_eager(reduce, include_self):
    idx = torch.tensor([[0, 1, 0, 2], [1, 1, 1, 0]])
    src = torch.randn(2, 4, dtype=torch.float64)
    src[0, 2] = 0.0  # a zero in a product
    check(lambda a, s, i: a.scatter_reduce(1, i, s, reduce, include_self=include_self),
          torch.randn(2, 3, dtype=torch.float64), src, idx)


def test_scatter_reduce_integer_mean_floors():
    a = torch.tensor([5, -7, 3])
    i = torch.tensor([0, 0, 1])
    s = torch.tensor([2, 2, -2])
    for incl in (True, False):
        f = lambda a, s: a.scatter_reduce(0, i, s, "mean", include_self=incl)  # noqa: E731
        assert torch.equal(thunder_c.jit(f)(a, s), f(a, s))


def test_dimwise_and_scatter_views():
    a = torch.randn(4, 5, dtype=torch.float64)
    check(lambda a, i: a.index_fill(1, i, -2.0), a, torch.tensor([0, -1]))
    check(lambda a, s, i: a.index_copy(0, i, s), a, torch.randn(2, 5, dtype=torch.float64), torch.tensor([3, 1]))
    check(lambda a, s: torch.select_scatter(a, s, 1, -2), a, torch.randn(4, dtype=torch.float64))
    check(lambda a, s: torch.slice_scatter(a, s, 1, 1, 5, 2), a, torch.randn(4, 2, dtype=torch.float64))
    check(lambda a, s: torch.diagonal_scatter(a, s, -1), a, torch.randn(3, dtype=torch.float64))
    check(lambda a, i: torch.take(a, i), a, torch.tensor([[0, -1], [7, 7]]))
    check(lambda a, s, i: a.put(i, s, accumulate=True), a, torch.randn(3, dtype=torch.float64), torch.tensor([0, 0, -1]))
    check(lambda a, i: torch.take_along_dim(a, i, 1), a, torch.tensor([[0], [2], [1], [0]]))
    m = torch.tensor([[True, False, True, False, False]] * 4)
    check(lambda a, s, m: a.masked_scatter(m, s), a, torch.randn(3, 4, dtype=torch.float64), m)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_offsets_and_padding(mode):
    w = torch.randn(6, 3, dtype=torch.float64)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0])
    offs = torch.tensor([0, 2, 2, 5])  # an empty bag
    check(lambda w, i, o: torch.nn.functional.embedding_bag(i, w, o, mode=mode, padding_idx=2), w, idx, offs)
    check(lambda w, i: torch.nn.functional.embedding_bag(i, w, mode=mode), w, idx.reshape(2, 4))


def test_one_hot_needs_num_classes():
    x = torch.tensor([0, 3, 1])
    assert torch.equal(thunder_c.jit(lambda x: torch.nn.functional.one_hot(x, 5))(x),
                       torch.nn.functional.one_hot(x, 5))
    with pytest.raises(NotImplementedError, match="torch.nn.functional.one_hot"):
        thunder_c.jit(lambda x: torch.nn.functional.one_hot(x))(x)


def test_searchsorted_bucketize_tri_indices():
    seq = torch.tensor([1.0, 2.0, 2.0, 5.0])
    v = torch.tensor([[0.0, 2.0, 6.0], [2.0, 5.0, float("nan")]])
    for right in (False, True):
        f = lambda s, v: torch.searchsorted(s, v, right=right)  # noqa: E731
        assert torch.equal(thunder_c.jit(f)(seq, v), f(seq, v))
        g = lambda v, b: torch.bucketize(v, b, right=right, out_int32=True)  # noqa: E731
        assert torch.equal(thunder_c.jit(g)(v, seq), g(v, seq))
    for off in (-2, 0, 3):
        assert torch.equal(thunder_c.jit(lambda: torch.tril_indices(4, 6, off))(), torch.tril_indices(4, 6, off))
        assert torch.equal(thunder_c.jit(lambda: torch.triu_indices(5, 3, off))(), torch.triu_indices(5, 3, off))


def test_new_tensor_factories():
    x = torch.randn(2, dtype=torch.float64)
    f = lambda x: (x.new_zeros(2, 3), x.new_ones([1]), x.new_full((2,), 3), x.new_empty(0),  # noqa: E731
                   x.new_tensor([[1, 2], [3, 4]]), x.new_tensor(2.5, dtype=torch.float32))
    for k, (got, want) in enumerate(zip(thunder_c.jit(f)(x), f(x))):
        assert got.dtype == want.dtype and got.shape == want.shape
        if k != 3:  # new_empty's values are unspecified
            assert torch.equal(got, want)


def test_advanced_index_results_are_copies_and_assignments_reach_views():
    def f(x, i):
        y = x[i]  # a copy: the update below does not reach it
        z = x[:, [1]]
        v = x[0]  # a view: the assignment below reaches it
        x[i] = 5.0
        x.add_(1)
        return y * 1, z * 1, v * 1, x * 1

    x, i = torch.randn(4, 3), torch.tensor([0, 2])
    for got, want in zip(thunder_c.jit(f)(x.clone(), i), f(x.clone(), i)):
        assert torch.equal(got, want)
