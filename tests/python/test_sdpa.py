"""F.scaled_dot_product_attention through thunder_c.jit, against PyTorch 2.14 eager.

torch 2.14's signature: query, key, value, attn_mask (bool: True attends; float: added; broadcast to
[..., Hq, L, S]), dropout_p, is_causal (top-left aligned: torch.ones(L, S).tril(), also for L != S),
scale (None: 1/sqrt(E)), enable_gqa (key/value heads repeat_interleave'd to query's). The call is
recorded as ltorch.scaled_dot_product_attention, whose decomposition into prims is printed under it.

What is compared with eager, and how:
  * forward outputs and the gradients of loss.backward() for q, k, v (and a float mask) in float64 to
    1e-12 and float32 to 1e-5, over masks, causal, scale, GQA and their combinations, ranks 2-5,
    broadcast batch dims, empty L or S;
  * rows whose logits are all -inf (blocked by the mask, or from infinite inputs): eager (its
    _safe_softmax) gives 0 for them, and 0 gradients, and so does thunder_c (asserted exactly, plus
    finiteness of every gradient);
  * bfloat16 (and torch.autocast('cpu', bfloat16)): the logits and the softmax run in float32 as
    eager's CPU (flash) kernel does, the probabilities rounded to bf16 for the product with value (and
    dropout, which eager's math path runs in bf16, runs in float32 too), so the error against a float64
    reference from the same bf16 inputs is asserted to be of eager's own size, and the output within
    bf16 tolerance of eager's;
  * PyTorch's OpInfo samples of the op (those without dropout), in float64, float32 and bfloat16;
  * errors: the checks eager makes, as Python exceptions naming the op and argument;
  * nanoGPT's model.py (a faithful small copy) with its flash path (F.scaled_dot_product_attention,
    is_causal=True) and its manual path, logits, loss and every parameter's gradient.
Dropout (dropout_p > 0) cannot match eager's random bits; its tests say what they compare."""
import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()

OP = "ltorch.scaled_dot_product_attention"


def R(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def bool_mask(*shape, seed=0, p_keep=0.6):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) < p_keep


def sdpa(q, k, v, m=None, **kw):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)


def run_both(fn, inputs, grad=True, probe_seed=99):
    """fn eagerly and jitted on copies of inputs (floating ones requiring grad when grad); with grad,
    backpropagates one random cotangent through both. Returns (eager out, jit out, [(eager grad,
    jit grad) per floating input])."""
    a = [t.detach().clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    b = [t.detach().clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    jf = thunder_c.jit(fn)
    want, got = fn(*a), jf(*b)
    grads = []
    if grad:
        p = R(*want.shape, seed=probe_seed, dtype=want.dtype)
        (want * p).sum().backward()
        (got * p).sum().backward()
        grads = [(x.grad, y.grad) for x, y in zip(a, b) if x.requires_grad]
    return want, got, grads, jf


def close(got, want, rtol, atol, what):
    assert got is not None, f"{what}: no gradient"
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{list(got.shape)} != " \
                                                               f"{want.dtype}{list(want.shape)}"
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=False, msg=lambda m: f"{what}: {m}")


# (id, q shape, k shape, v shape, mask maker or None, kwargs)
B, H, L, S, E, EV = 2, 3, 5, 7, 4, 6
CASES = [
    ("plain", (B, H, L, E), (B, H, S, E), (B, H, S, EV), None, {}),
    ("causal_L<S", (B, H, L, E), (B, H, S, E), (B, H, S, EV), None, {"is_causal": True}),
    ("causal_L>S", (B, H, S, E), (B, H, L, E), (B, H, L, EV), None, {"is_causal": True}),
    ("causal_square", (B, H, S, E), (B, H, S, E), (B, H, S, EV), None, {"is_causal": True}),
    ("scale", (B, H, L, E), (B, H, S, E), (B, H, S, EV), None, {"scale": 0.3}),
    ("negative_scale", (B, H, L, E), (B, H, S, E), (B, H, S, EV), None, {"scale": -0.7}),
    ("causal_scale", (B, H, L, E), (B, H, S, E), (B, H, S, EV), None, {"is_causal": True, "scale": 1.5}),
    ("bool_mask_LS", (B, H, L, E), (B, H, S, E), (B, H, S, EV), lambda dt: bool_mask(L, S, seed=1), {}),
    ("bool_mask_B11S", (B, H, L, E), (B, H, S, E), (B, H, S, EV), lambda dt: bool_mask(B, 1, 1, S, seed=2), {}),
    ("bool_mask_full", (B, H, L, E), (B, H, S, E), (B, H, S, EV), lambda dt: bool_mask(B, H, L, S, seed=3), {}),
    ("float_mask_H1S", (B, H, L, E), (B, H, S, E), (B, H, S, EV), lambda dt: R(H, 1, S, seed=4, dtype=dt), {}),
    ("float_mask_LS_scale", (B, H, L, E), (B, H, S, E), (B, H, S, EV), lambda dt: R(L, S, seed=5, dtype=dt),
     {"scale": 0.5}),
    ("gqa", (B, 6, L, E), (B, 2, S, E), (B, 2, S, EV), None, {"enable_gqa": True}),
    ("gqa_kv_heads_differ", (B, 6, L, E), (B, 3, S, E), (B, 2, S, EV), None, {"enable_gqa": True}),
    ("gqa_one_kv_head", (B, 4, L, E), (B, 1, S, E), (B, 1, S, EV), None, {"enable_gqa": True}),
    ("gqa_causal_scale", (B, 6, L, E), (B, 3, S, E), (B, 3, S, EV), None,
     {"enable_gqa": True, "is_causal": True, "scale": 0.8}),
    ("gqa_float_mask", (B, 6, L, E), (B, 2, S, E), (B, 2, S, EV), lambda dt: R(6, L, S, seed=6, dtype=dt),
     {"enable_gqa": True}),
    ("gqa_bool_mask", (B, 6, L, E), (B, 2, S, E), (B, 2, S, EV), lambda dt: bool_mask(B, 6, L, S, seed=7),
     {"enable_gqa": True}),
    ("gqa_3d", (6, L, E), (2, S, E), (2, S, EV), None, {"enable_gqa": True}),
    ("gqa_same_heads", (B, H, L, E), (B, H, S, E), (B, H, S, EV), None, {"enable_gqa": True}),
    ("rank2_causal", (L, E), (S, E), (S, EV), None, {"is_causal": True}),
    ("rank3_mask", (H, L, E), (H, S, E), (H, S, EV), lambda dt: bool_mask(L, S, seed=8), {}),
    ("rank5", (2, B, H, L, E), (2, B, H, S, E), (2, B, H, S, EV), None, {"is_causal": True}),
    ("broadcast_batch", (B, H, L, E), (1, H, S, E), (B, 1, S, EV), None, {}),
    ("kv_one_head_no_gqa", (B, H, L, E), (B, 1, S, E), (B, 1, S, EV), None, {}),
    ("empty_S", (B, H, L, E), (B, H, 0, E), (B, H, 0, EV), None, {}),
    ("empty_S_mask", (B, H, L, E), (B, H, 0, E), (B, H, 0, EV), lambda dt: torch.zeros(L, 0, dtype=torch.bool), {}),
    ("empty_L_causal", (B, H, 0, E), (B, H, S, E), (B, H, S, EV), None, {"is_causal": True}),
]


def case_inputs(qs, ks, vs, mk, dtype):
    ins = [R(*qs, seed=11, dtype=dtype), R(*ks, seed=12, dtype=dtype), R(*vs, seed=13, dtype=dtype)]
    if mk is not None:
        ins.append(mk(dtype))
    return ins


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["f64", "f32"])
@pytest.mark.parametrize("cid,qs,ks,vs,mk,kw", CASES, ids=[c[0] for c in CASES])
def test_forward_and_gradients_match_eager(cid, qs, ks, vs, mk, kw, dtype, tol):
    ins = case_inputs(qs, ks, vs, mk, dtype)
    want, got, grads, _ = run_both(lambda *a: sdpa(*a, **kw), ins)
    close(got.detach(), want.detach(), tol, tol, f"{cid} output")
    names = ["q", "k", "v", "attn_mask"]
    assert len(grads) == sum(t.is_floating_point() for t in ins)
    for (w, g), n in zip(grads, names):
        close(g, w, tol, tol, f"{cid} grad of {n}")


def test_recorded_as_ltorch_with_prims_subsymbols_and_one_softmax_region():
    q, k, v = R(2, 4, 16, 8, seed=1), R(2, 4, 16, 8, seed=2), R(2, 4, 16, 8, seed=3)
    jf = thunder_c.jit(lambda q, k, v: sdpa(q, k, v, is_causal=True, scale=0.25))
    jf(q, k, v)
    traces = thunder_c.last_traces(jf)
    initial = str(traces[0])
    assert f"{OP}(q, k, v, None, 0.0, True, scale=0.25, enable_gqa=False)" in initial
    for sub in ("# t", "prims.matmul", "prims.mul", "prims.iota", "prims.where", "prims.amax", "prims.exp",
                "prims.sum", "prims.div"):
        assert sub in initial, sub
    # what runs: matmul, one fusion region with the scaling, the causal mask and the softmax, matmul
    run = str(traces[-1])
    top = [ln.strip() for ln in run.splitlines() if ln.startswith("  ") and not ln.startswith("    ")
           and "=" in ln and not ln.strip().startswith("#")]
    kinds = [ln.split("=", 1)[1].strip().split("(")[0] for ln in top]
    assert kinds.count("prims.matmul") == 2, kinds
    assert sum(k.startswith("fusion") for k in kinds) == 1, kinds
    region = run[run.index("fusion0(") : run.index("del", run.index("fusion0("))]
    for p in ("prims.mul", "prims.where", "prims.amax", "prims.exp", "prims.sum", "prims.div"):
        assert p in region, (p, region)


def test_masked_path_is_one_region_too():
    q, k, v, m = R(2, 4, 16, 8, seed=1), R(2, 4, 16, 8, seed=2), R(2, 4, 16, 8, seed=3), bool_mask(16, 16)
    jf = thunder_c.jit(lambda q, k, v, m: sdpa(q, k, v, m))
    jf(q, k, v, m)
    run = str(thunder_c.last_traces(jf)[-1])
    assert run.count("fusion") == 1 and run.count("prims.matmul") == 2, run


def test_fully_masked_rows_give_zero_like_eager():
    """Eager (torch 2.14, both the CPU flash kernel and the math path's _safe_softmax) gives 0 for a
    query row whose keys are all masked, and 0 gradients through it; the plain softmax would be NaN."""
    for dt in (torch.float64, torch.float32):
        q, k, v = R(2, 3, 5, 4, seed=1, dtype=dt), R(2, 3, 7, 4, seed=2, dtype=dt), R(2, 3, 7, 6, seed=3, dtype=dt)
        mb = bool_mask(5, 7, seed=4)
        mb[1] = False
        mf = R(3, 1, 7, seed=5, dtype=dt).expand(3, 5, 7).clone()
        mf[0, 2] = float("-inf")
        mf[2, 4, :] = float("-inf")
        for m, rows in ((mb, [(slice(None), slice(None), 1)]), (mf, [(slice(None), 0, 2), (slice(None), 2, 4)])):
            want, got, grads, _ = run_both(sdpa, [q, k, v, m])
            assert not want.isnan().any()
            for r in rows:
                assert (want.detach()[r] == 0).all()
                assert (got.detach()[r] == 0).all(), got[r]
            close(got.detach(), want.detach(), 1e-5, 1e-5, "output")
            for w, g in grads:
                assert torch.isfinite(g).all()
                close(g, w, 1e-5, 1e-5, "grad")
            qg = grads[0][1]
            for r in rows:
                assert (qg[r] == 0).all()


def test_rows_of_infinite_logits_give_zero_like_eager():
    """Without a mask too: a query row whose logits are all -inf (here from an infinite query element)
    gives 0 in eager (_safe_softmax tests the logits, not the mask), not NaN; other rows are unaffected."""
    q, k, v = R(1, 2, 3, 4, seed=1), R(1, 2, 5, 4, seed=2).abs() + 0.1, R(1, 2, 5, 2, seed=3)
    q[0, 1, 1] = torch.tensor([-math.inf, 0.0, 0.0, 0.0])
    for kw in ({}, {"is_causal": True}):
        want = sdpa(q, k, v, **kw)
        got = thunder_c.jit(lambda q, k, v: sdpa(q, k, v, **kw))(q, k, v)
        assert (want[0, 1, 1] == 0).all() and not want.isnan().any()
        close(got, want, 1e-12, 1e-12, f"infinite row {kw}")


def test_printed_trace_parses_back_and_runs():
    """The printed call (every argument, enable_gqa included) parses back without its subsymbols; the
    parsed trace is decomposed again when compiled and gives the same result."""
    q, k, v = R(2, 4, 5, 8, seed=1), R(2, 2, 7, 8, seed=2), R(2, 2, 7, 3, seed=3)
    m = bool_mask(5, 7, seed=4)
    fn = lambda q, k, v, m: sdpa(q, k, v, m, enable_gqa=True, scale=0.2)  # noqa: E731
    jf = thunder_c.jit(fn)
    y = jf(q, k, v, m)
    text = thunder_c.last_traces(jf)[0].python(print_depth=1)
    assert f"{OP}(q, k, v, m, 0.0, False, scale=0.2, enable_gqa=True)" in text, text
    parsed = thunder_c.trace_from_text(text)
    parsed.verify()
    assert torch.equal(thunder_c.jit(parsed)(q, k, v, m), y)
    close(y, fn(q, k, v, m), 1e-12, 1e-12, "gqa + mask + scale")


def test_scale_none_is_one_over_sqrt_E():
    q, k, v = R(2, 2, 4, 9, seed=1), R(2, 2, 6, 9, seed=2), R(2, 2, 6, 3, seed=3)
    jf = thunder_c.jit(lambda q, k, v: sdpa(q, k, v))
    close(jf(q, k, v), sdpa(q, k, v, scale=1 / 3), 1e-12, 1e-12, "scale=None")
    assert not torch.allclose(jf(q, k, v), sdpa(q, k, v, scale=1 / 9))


def test_mask_true_attends():
    """A bool mask with exactly one True per row picks that key's value row (True = attend)."""
    q, k, v = R(1, 1, 4, 3, seed=1), R(1, 1, 5, 3, seed=2), R(1, 1, 5, 2, seed=3)
    m = torch.zeros(4, 5, dtype=torch.bool)
    pick = [3, 0, 4, 1]
    for i, j in enumerate(pick):
        m[i, j] = True
    got = thunder_c.jit(sdpa)(q, k, v, m)
    close(got, v[0, 0, pick][None, None], 0, 0, "one-hot mask")


# ---- errors -----------------------------------------------------------------------------------------

ERRORS = [
    ("mask_and_causal", lambda q, k, v: sdpa(q, k, v, torch.ones(5, 7, dtype=torch.bool), is_causal=True),
     ValueError, "Explicit attn_mask should not be set when is_causal=True"),
    ("dtypes_differ", lambda q, k, v: sdpa(q, k.double(), v), RuntimeError,
     "Expected query, key, and value to have the same dtype"),
    ("int_mask", lambda q, k, v: sdpa(q, k, v, torch.zeros(5, 7, dtype=torch.int64)), RuntimeError,
     "Expected attn_mask dtype to be bool or float or to match query dtype"),
    ("f64_mask_f32_query", lambda q, k, v: sdpa(q, k, v, torch.zeros(5, 7, dtype=torch.float64)), RuntimeError,
     "attn_mask.dtype: float64 and query.dtype: float32"),
    ("mask_shape", lambda q, k, v: sdpa(q, k, v, torch.zeros(5, 6)), RuntimeError,
     r"attn_mask of shape \[5, 6\] does not broadcast to the attention weights' shape \[2, 4, 5, 7\]"),
    ("mask_enlarges", lambda q, k, v: sdpa(q, k, v, torch.zeros(3, 2, 4, 5, 7)), RuntimeError,
     "does not broadcast"),
    ("gqa_not_divisible", lambda q, k, v: sdpa(q, k[:, :3], v[:, :3], enable_gqa=True), RuntimeError,
     r"Number of heads in key and value must divide the number of heads in query, but got query.size\(-3\)=4, "
     r"key.size\(-3\)=3"),
    ("gqa_rank2", lambda q, k, v: sdpa(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True), RuntimeError,
     "enable_gqa=True needs query, key and value of at least 3 dimensions"),
    ("heads_differ_without_gqa", lambda q, k, v: sdpa(q, k[:, :2], v[:, :2]), RuntimeError,
     r"the batch dims of query \[2, 4, 5, 8\] and key \[2, 2, 7, 8\] do not broadcast: query.size\(-3\)=4, "
     r"key.size\(-3\)=2 \(for grouped-query attention over fewer key/value heads pass enable_gqa=True\)"),
    ("batch_dims_differ", lambda q, k, v: sdpa(q, k, torch.cat([v, v, v])[:3]), RuntimeError,
     r"the batch dims of query \[2, 4, 5, 8\] and value \[3, 4, 7, 8\] do not broadcast: query.size\(-4\)=2"),
    ("dropout_p_above_1", lambda q, k, v: sdpa(q, k, v, dropout_p=1.5), RuntimeError,
     "dropout_p has to be between 0 and 1, but got 1.5"),
    ("dropout_p_negative", lambda q, k, v: sdpa(q, k, v, dropout_p=-0.1), RuntimeError,
     "dropout_p has to be between 0 and 1, but got -0.1"),
    ("rank1", lambda q, k, v: sdpa(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0]), RuntimeError,
     "Expected query, key, and value to all be at least 2 dimensional"),
    ("E_differs", lambda q, k, v: sdpa(q, k[..., :6], v), RuntimeError, r"key.size\(-1\) must match query.size\(-1\)"),
    ("S_differs", lambda q, k, v: sdpa(q, k, v[:, :, :6]), RuntimeError, r"value.size\(-2\) must match key.size\(-2\)"),
    ("integer_inputs", lambda q, k, v: sdpa(q.long(), k.long(), v.long()), ValueError,
     "query.dtype=int64 is expected to be a floating type"),
]


@pytest.mark.parametrize("eid,fn,exc,msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(eid, fn, exc, msg):
    q, k, v = R(2, 4, 5, 8, seed=1, dtype=torch.float32), R(2, 4, 7, 8, seed=2, dtype=torch.float32), \
        R(2, 4, 7, 8, seed=3, dtype=torch.float32)
    with pytest.raises(exc, match=msg) as ei:
        thunder_c.jit(fn)(q, k, v)
    text = str(ei.value)
    assert OP in text, text
    assert "\n" not in text.strip(), text  # one line
    if eid not in ("S_differs", "mask_shape", "E_differs", "rank1", "gqa_rank2", "gqa_not_divisible"):
        with pytest.raises(Exception):  # eager refuses these too (its wording differs in places)
            fn(q, k, v)


# ---- PyTorch's OpInfo samples ----------------------------------------------------------------------------

def sdpa_opinfo_samples(dtype):
    """The CPU samples of op_db's nn.functional.scaled_dot_product_attention (its op is a wrapper lambda,
    so test_opinfo.py does not map it) without dropout: (args, kwargs)."""
    import opinfo_util  # noqa: F401  (installs the expecttest stand-in op_db may need)
    from torch.testing._internal.common_methods_invocations import op_db
    oi = next(o for o in op_db if o.name == "nn.functional.scaled_dot_product_attention")
    out = []
    for s in oi.sample_inputs("cpu", dtype):
        args, kw = (s.input,) + tuple(s.args), dict(s.kwargs)
        p = kw.get("dropout_p", args[4] if len(args) > 4 else 0.0)
        if p == 0:
            out.append((args, kw))
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=["f64", "f32", "bf16"])
def test_opinfo_samples_match_eager(dtype):
    """Every dropout-free OpInfo sample (ranks 3-4, GQA, causal, masks, scale): the output within
    assert_close's tolerance of eager's, or, where the logits are large (inputs up to 9 give logits near
    230, whose float32 rounding moves the output by ~1e-5), at most 3x eager's own error against float64
    attention of the same inputs; in float64 also the gradients of q, k and v to 1e-10."""
    samples = sdpa_opinfo_samples(dtype)
    assert len(samples) >= 10
    fn = lambda *a, **k: sdpa_kw(*a, **k)  # noqa: E731
    for args, kw in samples:
        want = fn(*args, **kw)
        got = thunder_c.jit(fn)(*args, **kw)
        assert got.dtype == want.dtype and got.shape == want.shape
        try:
            torch.testing.assert_close(got, want)
        except AssertionError:
            wide = lambda a: a.double() if torch.is_tensor(a) and a.is_floating_point() else a  # noqa: E731
            ref = fn(*map(wide, args), **{n: wide(a) for n, a in kw.items()})
            e_err = (want.double() - ref).abs().max().item()
            j_err = (got.double() - ref).abs().max().item()
            assert j_err <= 3 * e_err, (dtype, [tuple(a.shape) for a in args if torch.is_tensor(a)], kw, j_err, e_err)
        if dtype == torch.float64:
            ts = [a for a in args if torch.is_tensor(a)][:3]
            _, _, grads, _ = run_both(lambda q, k, v: fn(q, k, v, *args[3:], **kw), ts)
            for w, g in grads:
                close(g, w, 1e-10, 1e-10, f"opinfo grad {kw}")


def sdpa_kw(*a, **k):
    return F.scaled_dot_product_attention(*a, **k)


# ---- bfloat16 and autocast --------------------------------------------------------------------------

BF16_CASES = [
    ("plain", (2, 4, 32, 16), {}, None),
    ("causal", (2, 4, 64, 32), {"is_causal": True}, None),
    ("bool_mask", (2, 4, 32, 16), {}, "bool"),
    ("float_mask_gqa", (2, 4, 32, 16), {"enable_gqa": True}, "float"),
]


def bf16_inputs(shape, kw, mk, dtype=torch.bfloat16):
    B_, H_, L_, E_ = shape
    hk = H_ // 2 if kw.get("enable_gqa") else H_
    ins = [R(B_, H_, L_, E_, seed=1, dtype=dtype), R(B_, hk, L_, E_, seed=2, dtype=dtype),
           R(B_, hk, L_, E_, seed=3, dtype=dtype)]
    if mk == "bool":
        ins.append(bool_mask(L_, L_, seed=4, p_keep=0.7))
    elif mk == "float":
        ins.append(R(H_, L_, L_, seed=5, dtype=dtype))
    return ins


@pytest.mark.parametrize("cid,shape,kw,mk", BF16_CASES, ids=[c[0] for c in BF16_CASES])
def test_bf16_forward_and_gradients(cid, shape, kw, mk):
    """bf16 in, bf16 out. Eager's CPU kernel computes the logits, the softmax and the normalization in
    float32 and rounds the probabilities to bf16 for the product with value; thunder_c's decomposition
    does the same steps in float32 (one rounding of the probabilities, one of the output), so its error
    against float64 attention of the same bf16 inputs is about eager's own. Gradients likewise."""
    ins = bf16_inputs(shape, kw, mk)
    fn = lambda *a: sdpa(*a, **kw)  # noqa: E731
    want, got, grads, jf = run_both(fn, ins)
    assert got.dtype == torch.bfloat16
    B_, H_, L_, _ = shape
    # float32 logits, or the fused kernel (test_flash_attention.py), which computes in float32 throughout
    initial = str(thunder_c.last_traces(jf)[0])
    assert f'"cpu f32[{B_}, {H_}, {L_}, {L_}]"' in initial or "prims.scaled_dot_product_flash_attention" in initial
    ref_in = [t.double().requires_grad_() if t.is_floating_point() else t for t in ins]
    ref = fn(*ref_in)
    p = R(*ref.shape, seed=99)
    (ref * p).sum().backward()
    e_err = (want.detach().double() - ref.detach()).abs().max().item()
    j_err = (got.detach().double() - ref.detach()).abs().max().item()
    assert j_err <= 2 * e_err + 4e-3, (j_err, e_err)
    close(got.detach().float(), want.detach().float(), 2e-2, 2e-2, f"{cid} bf16 output vs eager")
    for (w, g), r in zip(grads, [t for t in ref_in if t.is_floating_point()]):
        assert g.dtype == torch.bfloat16
        scale = r.grad.abs().max().item()
        e_err = (w.double() - r.grad).abs().max().item()
        j_err = (g.double() - r.grad).abs().max().item()
        assert j_err <= 2 * e_err + 4e-3 * scale, (cid, j_err, e_err, scale)


@pytest.mark.parametrize("cid,shape,kw,mk", BF16_CASES, ids=[c[0] for c in BF16_CASES])
def test_autocast_bf16_matches_eager_autocast(cid, shape, kw, mk):
    """Under torch.autocast('cpu', torch.bfloat16) sdpa is a lower-precision op in eager (its CPU
    autocast list) and in thunder_c (TH_TAG_AC_LOWER): float32 q, k, v (and a float mask) are rounded to
    bf16, the result is bf16. Gradients reach the float32 leaves as float32."""
    ins = bf16_inputs(shape, kw, mk, dtype=torch.float32)
    fn = lambda *a: sdpa(*a, **kw)  # noqa: E731
    with torch.autocast("cpu", torch.bfloat16):
        want, got, grads, jf = run_both(fn, ins)
    assert want.dtype == got.dtype == torch.bfloat16
    close(got.detach().float(), want.detach().float(), 2e-2, 2e-2, f"{cid} autocast output")
    # same as eager's sdpa on the bf16-rounded inputs, within bf16 rounding of the result
    rounded = [t.bfloat16() if t.is_floating_point() else t for t in ins]
    close(got.detach(), fn(*rounded), 1.6e-2, 1e-2, f"{cid} autocast vs bf16 inputs")
    for w, g in grads:
        assert g.dtype == torch.float32
        close(g, w, 5e-2, 5e-2, f"{cid} autocast grad")
    text = str(thunder_c.last_traces(jf)[0])
    assert text.count("prims.convert_element_type") >= 3 and "dtypes.bfloat16" in text


# ---- dropout --------------------------------------------------------------------------------------------

def attention_probs(q, k, scale=None, causal=False):
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1)


def test_dropout_is_reproducible_under_manual_seed():
    """thunder_c's random stream is seeded from torch's default generator when a program is compiled
    (as ltorch.dropout and uniform_like are): torch.manual_seed(s) before the first call reproduces the
    output bit for bit; another seed, or the next call of the same program (a fresh stream per run),
    gives another. Eager's bits are not compared: the generators differ."""
    q, k, v = R(2, 2, 8, 4, seed=1), R(2, 2, 8, 4, seed=2), R(2, 2, 8, 4, seed=3)
    fn = lambda q, k, v: sdpa(q, k, v, dropout_p=0.3)  # noqa: E731

    def first_call(seed):
        torch.manual_seed(seed)
        jf = thunder_c.jit(fn)
        return jf, jf(q, k, v)

    jf, a = first_call(5)
    _, b = first_call(5)
    _, c = first_call(6)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(jf(q, k, v), a)
    trace = str(thunder_c.last_traces(jf)[0])
    assert f"{OP}(q, k, v, None, 0.3, False" in trace and "ltorch.dropout" in trace and "prims.uniform" in trace


def test_dropout_p_zero_is_no_dropout_and_p_one_is_zero():
    q, k, v = R(2, 2, 8, 4, seed=1), R(2, 2, 9, 4, seed=2), R(2, 2, 9, 3, seed=3)
    plain = thunder_c.jit(lambda q, k, v: sdpa(q, k, v, is_causal=True))(q, k, v)
    for p in (0.0, 0):
        jf = thunder_c.jit(lambda q, k, v: sdpa(q, k, v, dropout_p=p, is_causal=True))
        assert torch.equal(jf(q, k, v), plain)
        assert "prims.uniform" not in str(thunder_c.last_traces(jf)[0])
    close(plain, sdpa(q, k, v, is_causal=True), 1e-12, 1e-12, "p=0")
    got = thunder_c.jit(lambda q, k, v: sdpa(q, k, v, dropout_p=1.0))(q, k, v)
    assert torch.equal(got, torch.zeros_like(got)) and torch.equal(sdpa(q, k, v, dropout_p=1.0), got)


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"scale": 0.7}], ids=["plain", "causal", "scale"])
def test_dropout_mask_recovered_output_and_gradients_match_eager_recomputation(kw):
    """With value = [I_S | V] the first S output columns are the dropped-out attention probabilities
    themselves, P * keep / (1 - p), so the keep mask thunder_c drew is read off the output (P > 0 there;
    entries where P is 0, above the causal diagonal, do not matter). Compared with eager, in float64:
    the kept fraction (binomial, within 5 sigma of 1 - p), the kept values (P / (1 - p)), the V columns
    against (P * keep / (1 - p)) @ V recomputed eagerly with that mask, and the gradients of q, k and
    the whole value from loss.backward() against autograd through that eager recomputation. Not
    compared: which elements are dropped (eager's generator differs)."""
    p = 0.4
    Bq, Hq, Lq, Sk, Eq, Ev = 2, 3, 16, 24, 8, 5
    q, k = R(Bq, Hq, Lq, Eq, seed=1), R(Bq, Hq, Sk, Eq, seed=2)
    v = torch.cat([torch.eye(Sk, dtype=torch.float64).expand(Bq, Hq, Sk, Sk), R(Bq, Hq, Sk, Ev, seed=3)], -1)
    causal = kw.get("is_causal", False)
    fn = lambda q, k, v: sdpa(q, k, v, dropout_p=p, **kw)  # noqa: E731
    torch.manual_seed(0)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out = thunder_c.jit(fn)(qa, ka, va)
    P = attention_probs(q, k, kw.get("scale"), causal)
    dropped = out.detach()[..., :Sk]
    keep = dropped != 0
    live = P > 0
    n = live.sum().item()
    frac = (keep & live).sum().item() / n
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(frac - (1 - p)) < 5 * sigma, (frac, 1 - p, sigma)
    assert not keep[~live].any()
    close(dropped[keep], (P / (1 - p))[keep], 1e-12, 1e-12, "kept probabilities")
    # eager recomputation with the recovered mask
    qe, ke, ve = (t.clone().requires_grad_() for t in (q, k, v))
    want = (attention_probs(qe, ke, kw.get("scale"), causal) * keep / (1 - p)) @ ve
    close(out.detach(), want.detach(), 1e-12, 1e-12, "output")
    probe = R(*want.shape, seed=9)
    (want * probe).sum().backward()
    (out * probe).sum().backward()
    for n_, a, e in (("q", qa, qe), ("k", ka, ke), ("v", va, ve)):
        close(a.grad, e.grad, 1e-11, 1e-11, f"grad of {n_}")


def test_dropout_expected_value_is_the_undropped_attention():
    """E[dropout(P)] = P, so the mean of N runs of one program (each run draws a fresh stream)
    approaches eager's dropout-free output: each element within 5 standard errors, the exact per-element
    variance being p / (1 - p) * sum_s P[l, s]^2 v[s, e]^2 / N. Also the mean of the gradient of sum()
    w.r.t. value (attn^T @ 1 with dropout) approaches eager's dropout-free one. Float64."""
    p, N = 0.25, 300
    q, k, v = R(1, 2, 6, 4, seed=1), R(1, 2, 10, 4, seed=2), R(1, 2, 10, 3, seed=3)
    torch.manual_seed(3)
    jf = thunder_c.jit(lambda q, k, v: sdpa(q, k, v, dropout_p=p))
    vs = v.clone().requires_grad_()
    acc = torch.zeros(1, 2, 6, 3, dtype=torch.float64)
    gacc = torch.zeros_like(v)
    for _ in range(N):
        vs.grad = None
        y = jf(q, k, vs)
        y.sum().backward()
        acc += y.detach()
        gacc += vs.grad
    mean, gmean = acc / N, gacc / N
    P = attention_probs(q, k)
    ref = P @ v
    close(ref, sdpa(q, k, v), 1e-12, 1e-12, "reference")
    se = torch.sqrt(p / (1 - p) * ((P ** 2) @ (v ** 2)) / N)
    z = ((mean - ref).abs() / se).max().item()
    assert z < 5, z
    gref = P.sum(-2).unsqueeze(-1).expand_as(v)  # d sum(P @ v) / dv = P^T @ 1
    gse = torch.sqrt(p / (1 - p) * (P ** 2).sum(-2) / N).unsqueeze(-1)
    gz = ((gmean - gref).abs() / gse).max().item()
    assert gz < 5, gz


# ---- nanoGPT (a faithful small copy of karpathy/nanoGPT's model.py) ---------------------------------------

class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # regularization
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash or not config.flash:  # (test copy) config.flash=False forces the manual path
            self.flash = False
            # causal mask to ensure that attention is only applied to the left in the input sequence
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        if self.flash:
            # efficient attention using Flash Attention CUDA kernels
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                                                 dropout_p=self.dropout if self.training else 0,
                                                                 is_causal=True)
        else:
            # manual implementation of attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2 vocab_size of 50257, padded up to nearest multiple of 64 for efficiency
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and faster
    flash: bool = True  # (test copy) False: the manual attention path, as on PyTorch < 2.0


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # https://paperswithcode.com/method/weight-tying

        # init all weights
        self.apply(self._init_weights)
        # apply special scaled init to the residual projections, per GPT-2 paper
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)

        # forward the GPT model itself
        tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            # if we are given some desired targets also calculate the loss
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference-time mini-optimization: only forward the lm_head on the very last position
            logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve the dim
            loss = None

        return logits, loss


def small_gpt(flash):
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=32, vocab_size=96, n_layer=2, n_head=4, n_embd=64, dropout=0.0, flash=flash))


def tokens(seed, B_=3, T=32, vocab=96):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (B_, T), generator=g), torch.randint(0, vocab, (B_, T), generator=g)


@pytest.mark.parametrize("flash", [True, False], ids=["flash", "manual"])
def test_nanogpt_logits_loss_and_every_gradient(flash):
    """nanoGPT's GPT (2 layers, 4 heads, n_embd 64, block_size 32, vocab 96, dropout 0.0) in training
    mode with targets: the logits, the loss and every parameter's gradient after loss.backward(), jitted
    vs eager, with the flash path (F.scaled_dot_product_attention(..., is_causal=True), recorded as
    ltorch.scaled_dot_product_attention) and the manual path (masked_fill + softmax) for contrast."""
    m_eager = small_gpt(flash)
    m_jit = small_gpt(flash)
    m_jit.load_state_dict(m_eager.state_dict())
    assert all(blk.attn.flash == flash for blk in m_eager.transformer.h)
    tm = thunder_c.jit(m_jit)
    x, y = tokens(0)
    lw_, lw = m_eager(x, y)
    lg_, lg = tm(x, y)
    close(lg_.detach(), lw_.detach(), 1e-4, 1e-5, "logits")
    close(lg.detach(), lw.detach(), 1e-5, 1e-6, "loss")
    lw.backward()
    lg.backward()
    pe, pj = dict(m_eager.named_parameters()), dict(m_jit.named_parameters())
    assert pe.keys() == pj.keys() and len(pe) == 2 + 2 * 12 + 2
    for name in pe:
        close(pj[name].grad, pe[name].grad, 1e-4, 1e-5, f"grad of {name}")
    text = str(thunder_c.last_traces(tm)[0])
    assert (text.count(f"{OP}(") == 2) == flash, text.count(f"{OP}(")
    assert (", None, 0.0, True, scale=None, enable_gqa=False)" in text) == flash


def test_nanogpt_flash_eval_passes_an_integer_dropout_p():
    """In eval mode nanoGPT passes dropout_p=0 (an int): the same attention, no dropout drawn."""
    m_eager = small_gpt(True).eval()
    m_jit = small_gpt(True).eval()
    m_jit.load_state_dict(m_eager.state_dict())
    tm = thunder_c.jit(m_jit)
    x, y = tokens(1)
    with torch.no_grad():
        lw_, lw = m_eager(x, y)
        lg_, lg = tm(x, y)
    close(lg_, lw_, 1e-4, 1e-5, "logits")
    close(lg, lw, 1e-5, 1e-6, "loss")
    text = str(thunder_c.last_traces(tm)[0])
    assert f"{OP}(" in text and "prims.uniform" not in text
