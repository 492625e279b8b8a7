"""Keeps docs/adding-an-op.md honest.

The document adds two ops (the prim `sinc`, the composite `frac`) and shows every edit as a code block
whose info string names the file (```c src/ops/unary.def). Checked here: each block appears verbatim in
that file; each example's stated count ("**N edits in M files**") is the number of its blocks and of
the distinct files they name; and both ops run through thunder_c.jit against PyTorch eager: forward on
float32, float64 and bfloat16 (and integer inputs where PyTorch accepts them), every spelling the rows
map (function, method, alias, in-place), and the gradient in float64 and float32."""
import pathlib
import re

import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()

SOURCE = pathlib.Path(__file__).resolve().parents[2]
DOC = SOURCE / "docs" / "adding-an-op.md"
FENCE = re.compile(r"^```c (\S+)\n(.*?)^```$", re.S | re.M)
COUNT = re.compile(r"\*\*(\d+) edits? in (\d+) files?\*\*")


def sections():
    """(title, body) of each `## ` section of the document."""
    text = DOC.read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts), 2)]


def blocks(body):
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(body)]


EXAMPLES = [(t, b) for t, b in sections() if blocks(b)]


def test_the_document_has_both_examples():
    titles = [t for t, _ in EXAMPLES]
    assert any("sinc" in t for t in titles) and any("frac" in t for t in titles), titles


@pytest.mark.parametrize("title,body", EXAMPLES, ids=[t for t, _ in EXAMPLES])
def test_blocks_are_in_the_sources(title, body):
    for path, code in blocks(body):
        f = SOURCE / path
        assert f.is_file(), f"{title}: {path} does not exist"
        assert code in f.read_text(), f"{title}: this block is not in {path} verbatim:\n{code}"


@pytest.mark.parametrize("title,body", EXAMPLES, ids=[t for t, _ in EXAMPLES])
def test_edit_counts(title, body):
    counts = COUNT.findall(body)
    assert len(counts) == 1, f"{title}: expected one '**N edits in M files**', found {counts}"
    n, m = map(int, counts[0])
    bl = blocks(body)
    assert n == len(bl), f"{title}: says {n} edits, shows {len(bl)}"
    assert m == len({p for p, _ in bl}), f"{title}: says {m} files, shows {len({p for p, _ in bl})}"


# ---- the two ops against PyTorch ----------------------------------------------------------------------

def _x(dtype, seed=0, n=37):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g, dtype=torch.float64) * 8 - 4
    x[:6] = torch.tensor([0.0, -0.0, 1.0, -2.0, 0.5, 2.5], dtype=torch.float64)
    return x.to(dtype)


SPELLINGS = {
    "sinc": [torch.sinc, torch.special.sinc, lambda x: x.sinc()],
    "frac": [torch.frac, lambda x: x.frac()],
}
TOL = {torch.float32: {}, torch.float64: {}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-5}}


@pytest.mark.parametrize("op", sorted(SPELLINGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_forward(op, dtype):
    x = _x(dtype)
    for fn in SPELLINGS[op]:
        got = thunder_c.jit(lambda a: fn(a))(x)
        want = fn(x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True, **TOL[dtype])


def test_sinc_of_integers_is_float():
    x = torch.arange(-3, 4)
    got = thunder_c.jit(lambda a: torch.sinc(a))(x)
    torch.testing.assert_close(got, torch.sinc(x))


def test_frac_refuses_integers_as_pytorch():
    x = torch.arange(-3, 4)
    with pytest.raises(RuntimeError):
        torch.frac(x)
    with pytest.raises(Exception, match="frac_cpu"):
        thunder_c.jit(lambda a: torch.frac(a))(x)


@pytest.mark.parametrize("op", sorted(SPELLINGS))
def test_inplace(op):
    x = _x(torch.float32)
    want = x.clone()
    getattr(want, op + "_")()

    def f(a):
        getattr(a, op + "_")()
        return a

    got = x.clone()
    thunder_c.jit(f)(got)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", sorted(SPELLINGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_grad(op, dtype):
    fn = SPELLINGS[op][0]
    x = _x(dtype, seed=1)
    g = _x(dtype, seed=2)
    xa = x.clone().requires_grad_()
    fn(xa).backward(g)
    xb = x.clone().requires_grad_()
    thunder_c.jit(lambda a: fn(a))(xb).backward(g)
    torch.testing.assert_close(xb.grad, xa.grad)


def test_sinc_in_a_fused_region():
    """sinc between other elementwise ops: the fuser's template, forward and backward."""
    def f(a):
        return torch.sinc(a * 2 + 1).exp()

    for dtype in (torch.float32, torch.float64):
        x = _x(dtype, seed=3)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = f(xa), thunder_c.jit(f)(xb)
        torch.testing.assert_close(yb, ya)
        ya.sum().backward()
        yb.sum().backward()
        torch.testing.assert_close(xb.grad, xa.grad)
