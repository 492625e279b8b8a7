"""Gradients of thunder_c's grad transform against PyTorch's autograd, on PyTorch's OpInfo samples.

For every OpInfo that test_opinfo.py covers (opinfo_util.classify) and that PyTorch differentiates
(supports_autograd) on the CPU in float64, each float64 sample (opinfo_util.samples: all of them;
GRAD_OPINFO_MAX_SAMPLES=N keeps the first N per OpInfo) is traced through thunder_c.jit, its initial
trace split by
thunder_c.transforms.grad into forward and backward, both run on the sample (executors=["eager"]) with
random cotangents, and every floating input's gradient compared with torch.autograd.grad on the same
call, inputs and cotangents (None and zeros are equal; assert_close with rtol = atol = 1e-6). The
forward's output is compared with eager's too. Outcomes per sample, as test_opinfo counts them:
    pass         the same gradients (and outputs)
    unsupported  thunder_c raises NotImplementedError (tracing, the transform or a run), or the
                 extension's TypeError for an argument type it cannot take: counted and listed by reason
                 in the summary at the end of the module, not a failure
    failure      anything else
Bool tensor arguments cross the extension as uint8 views made bool again inside the traced function
(opinfo_util's workaround for PyTorch 1.13's DLPack)."""
import collections
import os

import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()

import opinfo_util  # noqa: E402

MAX_SAMPLES = int(os.environ.get("GRAD_OPINFO_MAX_SAMPLES", "0")) or None  # 0: all
EXECUTORS = ["eager"]
TOL = dict(rtol=1e-6, atol=1e-6)

COVERED, _ = opinfo_util.classify()
OPS = {oid: (op, q) for oid, op, q in COVERED
       if op.supports_autograd and torch.float64 in op.supported_dtypes("cpu")}
NOT_DIFFERENTIABLE = sorted(oid for oid, op, q in COVERED if not op.supports_autograd)
RESULTS = {}


class Unsupported(Exception):
    pass


def _leaves(x, out):
    """Replaces every tensor in x by a placeholder (its index in out), depth first."""
    if isinstance(x, torch.Tensor):
        out.append(x)
        return ("__leaf__", len(out) - 1)
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_leaves(e, out) for e in x)
    if isinstance(x, dict):
        return {k: _leaves(v, out) for k, v in x.items()}
    return x


def _rebuild(x, ts):
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "__leaf__":
        return ts[x[1]]
    if isinstance(x, (list, tuple)):
        return type(x)(_rebuild(e, ts) for e in x)
    if isinstance(x, dict):
        return {k: _rebuild(v, ts) for k, v in x.items()}
    return x


def _flat_tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for e in x:
            _flat_tensors(e, out)
    elif isinstance(x, dict):
        for e in x.values():
            _flat_tensors(e, out)
    return out


def _unsupported(e):
    return isinstance(e, NotImplementedError) or opinfo_util._extension_unsupported(e)


def check_sample(fn, sample):
    """Raises AssertionError (failure) or Unsupported; returns normally on a pass."""
    leaves = []
    structure = _leaves(((sample.input, *sample.args), dict(sample.kwargs)), leaves)
    leaves = [t.detach().clone() for t in leaves]
    was_bool = [t.dtype == torch.bool for t in leaves]
    passed = [t.view(torch.uint8) if b else t for t, b in zip(leaves, was_bool)]

    def inner(*ts):
        ts = [t.bool() if b else t for t, b in zip(ts, was_bool)]
        args, kwargs = _rebuild(structure, ts)
        return fn(*args, **kwargs)

    # eager first: a sample PyTorch rejects is not a grad check
    ref_in = [t.clone().requires_grad_(t.is_floating_point()) for t in leaves]
    try:
        args, kwargs = _rebuild(structure, ref_in)
        want = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001
        return "eager-error"
    want_flat = _flat_tensors(want, [])
    try:
        jf = thunder_c.jit(inner, executors=EXECUTORS)
        jf(*passed)
        tr = thunder_c.last_traces(jf)[0]
        forward, backward = thunder_c.transforms.grad(tr)
        out, saved = thunder_c.jit(forward, executors=EXECUTORS)(*passed)
        flat = out["flat_output"]
        assert len(flat) == len(want_flat), f"{len(flat)} output tensors, eager {len(want_flat)}"
        torch.manual_seed(1)
        cots = [torch.randn_like(w.detach(), dtype=torch.float64) if w.is_floating_point() else torch.zeros_like(w)
                for w in want_flat]
        cots = [c.to(w.dtype) for c, w in zip(cots, want_flat)]
        grads = thunder_c.jit(backward, executors=EXECUTORS)(saved, tuple(cots))
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        if _unsupported(e):
            raise Unsupported(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        raise AssertionError(f"thunder_c raised {type(e).__name__}: {e}") from e
    for i, (g, w) in enumerate(zip(flat, want_flat)):
        torch.testing.assert_close(g, w.detach(), equal_nan=True, **TOL, msg=lambda m: f"output {i}: {m}")
    assert len(grads) == len(leaves)
    # PyTorch's gradients for the same cotangents
    outs = [(w, c) for w, c in zip(want_flat, cots) if w.requires_grad]
    diff_in = [t for t in ref_in if t.requires_grad]
    if outs and diff_in:
        try:
            ref = torch.autograd.grad([w for w, _ in outs], diff_in, [c for _, c in outs], allow_unused=True)
        except RuntimeError as e:  # PyTorch has no derivative here (scatter's reduce=): no reference
            if "derivative for" in str(e) and "is not implemented" in str(e):
                return "eager-error"
            raise
    else:
        ref = [None] * len(diff_in)
    ref = iter(ref)
    for i, (t, g) in enumerate(zip(ref_in, grads)):
        if not t.requires_grad:
            assert g is None, f"input {i} ({t.dtype}): a gradient for a non-floating input"
            continue
        r = next(ref)
        r = torch.zeros_like(t) if r is None else r
        if r.layout != torch.strided:  # sparse=True (embedding_bag): thunder_c's gradients are dense
            r = r.to_dense()
        g = torch.zeros_like(t) if g is None else g
        assert g.dtype == r.dtype, f"input {i}: gradient dtype {g.dtype}, PyTorch {r.dtype}"
        assert g.shape == r.shape, f"input {i}: gradient shape {tuple(g.shape)}, PyTorch {tuple(r.shape)}"
        torch.testing.assert_close(g, r, equal_nan=True, **TOL, msg=lambda m: f"input {i} gradient: {m}")
    return "pass"


def run_op(op):
    res = dict(passed=0, unsupported=0, eager_errors=0, failures=[], reasons=collections.Counter())
    samples = opinfo_util.samples(op, torch.float64)[:MAX_SAMPLES]
    fn = opinfo_util._callable(op.op)
    for si, sample in enumerate(samples):
        try:
            r = check_sample(fn, sample)
        except Unsupported as e:
            res["unsupported"] += 1
            res["reasons"][str(e)[:160]] += 1
            continue
        except AssertionError as e:
            res["failures"].append(f"sample {si} {opinfo_util.describe(sample)}: {str(e)[:600]}")
            continue
        if r == "eager-error":
            res["eager_errors"] += 1
        else:
            res["passed"] += 1
    return res


class _Summary:
    """Prints the counts at the end of the run (pytest's terminal summary), as conftest.py does for
    test_opinfo.py."""

    def pytest_terminal_summary(self, terminalreporter):
        if not RESULTS:
            return
        rep = terminalreporter
        passed = sum(r["passed"] for r in RESULTS.values())
        unsupported = sum(r["unsupported"] for r in RESULTS.values())
        failed = sum(len(r["failures"]) for r in RESULTS.values())
        rep.write_sep("=", "grad OpInfo checks (test_grad_opinfo.py)")
        rep.write_line(f"OpInfos: {len(RESULTS)} differentiable run (float64, {MAX_SAMPLES or 'all'} samples each); "
                       f"{len(NOT_DIFFERENTIABLE)} covered ones PyTorch does not differentiate")
        rep.write_line(f"samples checked (outputs and every input's gradient): {passed} passed, "
                       f"{unsupported} unsupported, {failed} failed")
        reasons = collections.Counter()
        for oid, r in sorted(RESULTS.items()):
            if r["unsupported"]:
                rep.write_line(f"  unsupported: {oid}: {r['unsupported']} samples")
            reasons.update(r["reasons"])
        for reason, n in reasons.most_common():
            rep.write_line(f"    {n:4d} x {reason}")


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    pm = request.config.pluginmanager
    if not pm.has_plugin("grad-opinfo-summary"):
        pm.register(_Summary(), "grad-opinfo-summary")
    yield


@pytest.mark.parametrize("opid", sorted(OPS))
def test_grad_opinfo(opid):
    op, qualname = OPS[opid]
    r = run_op(op)
    RESULTS[opid] = r
    if r["failures"]:
        shown = "\n".join("  " + f for f in r["failures"][:10])
        pytest.fail(f"{opid} ({qualname}): {len(r['failures'])} gradient checks failed:\n{shown}", pytrace=False)


# ---- the Python API: thunder_c.transforms.grad / value_and_grad -----------------------------------------

def _mlp(x, w1, b1, w2, idx):
    h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
    return torch.nn.functional.cross_entropy(h @ w2, idx), h


def _mlp_inputs():
    torch.manual_seed(3)
    return (torch.randn(5, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64),
            torch.randn(6, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64), torch.tensor([0, 2, 1, 1, 0]))


def test_value_and_grad_matches_autograd():
    args = _mlp_inputs()
    jf = thunder_c.jit(_mlp, executors=EXECUTORS)
    jf(*args)
    tr = thunder_c.last_traces(jf)[0]
    (loss, h), grads = thunder_c.transforms.value_and_grad(tr, *args, executors=EXECUTORS)
    ref_in = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    rloss, rh = _mlp(*ref_in)
    torch.testing.assert_close(loss, rloss.detach())
    want = torch.autograd.grad([rloss, rh], ref_in[:4], [torch.ones_like(rloss), torch.ones_like(rh)])
    assert grads[4] is None  # the integer targets
    for g, w in zip(grads[:4], want):
        torch.testing.assert_close(g, w)
    # explicit cotangents, and only w2 requested
    cot = (torch.tensor(2.0, dtype=torch.float64), torch.zeros_like(rh))
    _, grads = thunder_c.transforms.value_and_grad(tr, *args, cotangents=cot, requires_grad=[False, False, False, True, False])
    assert [g is None for g in grads] == [True, True, True, False, True]
    rloss, _ = _mlp(*ref_in)
    torch.testing.assert_close(grads[3], 2 * torch.autograd.grad(rloss, ref_in[3])[0])


def test_grad_api_errors():
    jf = thunder_c.jit(_mlp, executors=EXECUTORS)
    jf(*_mlp_inputs())
    tr = thunder_c.last_traces(jf)[0]
    forward, backward = thunder_c.transforms.grad(tr)
    assert "def backward_fn(saved_for_backward, cotangents):" in str(backward)
    assert forward.provenance.startswith("Grad transform pass")
    assert backward.input_names == ["saved_for_backward", "cotangents"]
    with pytest.raises(TypeError):
        thunder_c.transforms.grad(_mlp)
    with pytest.raises(ValueError, match="only Tensors of floating point dtype can require gradients"):
        thunder_c.transforms.grad(tr, requires_grad=[True] * 5)
    with pytest.raises(ValueError, match="requires_grad has 2 entries"):
        thunder_c.transforms.grad(tr, requires_grad=[True, True])
