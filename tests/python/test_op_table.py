"""Every unary elementwise op of the op table against PyTorch, found by walking the table.

The table is what `thunder_c._C.ops()` lists: (qualname, aliases, schema, in_place) per op. A unary
elementwise op is a torch-level op `ltorch.X(Tensor input) -> Tensor` (optionally with keyword-only
parameters after it) named by a PyTorch callable among its aliases, whose prim `prims.X(TensorOrScalar
a, /) -> Tensor` exists, or a composite of the same form (isnan, sigmoid, frac, ...). Each runs through
thunder_c.jit on float32 and float64 tensors of a few values (domain edges, 0, negative and positive,
half-integers) and is compared with the same call in PyTorch eager: values within
torch.testing.assert_close's tolerances (NaN where PyTorch has NaN) and the same dtype; where PyTorch
refuses a dtype, thunder_c must raise too (a composite whose result changes the shape, a layout op
like `t`, is skipped). Its in-place variant `X_`, when the table has one, runs on a
copy and must modify it as PyTorch's does. A new op gets these checks by being a row of the table.

`thunder_c._C.op_rows()` lists the rows of src/ops/unary.def and binary.def (name, arity, kind, prim,
torch, inplace, fold, decomp, fuse); the tests at the end check that it agrees with `_C.ops()`."""
import re

import pytest
import torch

from conftest import SOURCE_DIR, import_thunder_c
from op_rows import torch_callable

thunder_c = import_thunder_c()

OPS = thunder_c._C.ops()
BY_NAME = {q: (al, sch, ip) for q, al, sch, ip in OPS}
UNARY_LTORCH = re.compile(r"^(\w+)\(Tensor input(, \*, [^)]*)?\) -> Tensor$")
UNARY_PRIM = "{}(TensorOrScalar a, /) -> Tensor"
VALUES = [-2.5, -1.0, -0.5, -0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.5, 10.0]


def unary_ops():
    found = []
    for q, (al, sch, ip) in BY_NAME.items():
        if not q.startswith("ltorch.") or ip:
            continue
        m = UNARY_LTORCH.match(sch)
        if not m:
            continue
        name = m.group(1)
        prim = BY_NAME.get("prims." + name)
        if prim is not None and prim[1] != UNARY_PRIM.format(name):
            continue  # a prim of another form (a reduction, a layout op): not elementwise unary
        if prim is None and (m.group(2) or not (al.startswith("torch." + name) or al.startswith("Tensor." + name))):
            continue  # a composite: exactly (Tensor input), named after its PyTorch function
        spelling, fn = torch_callable(al)
        if fn is None:
            continue
        found.append(pytest.param(name, spelling, fn, id=name))
    return found


UNARY = unary_ops()


def test_the_walk_finds_the_unary_ops():
    names = {p.values[0] for p in UNARY}
    # the table's unary prims and a few composites, the two worked examples of docs/adding-an-op.md among them
    for n in ("abs", "exp", "isfinite", "bitwise_not", "sigmoid", "isnan", "sinc", "frac"):
        assert n in names, n
    prims = {q.split(".", 1)[1] for q, (_, sch, _) in BY_NAME.items()
             if q.startswith("prims.") and sch == UNARY_PRIM.format(q.split(".", 1)[1])}
    assert prims <= names, sorted(prims - names)


def _inputs():
    return [torch.tensor(VALUES, dtype=dt).reshape(3, 4) for dt in (torch.float32, torch.float64)]


@pytest.mark.parametrize("name,spelling,fn", UNARY)
def test_unary_against_torch(name, spelling, fn):
    xs = _inputs()
    want = []
    for x in xs:
        try:
            want.append(fn(x.clone()))
        except (RuntimeError, TypeError, NotImplementedError):
            want.append(None)
    if all(w is None for w in want):  # PyTorch refuses both: so must thunder_c
        for x in xs:
            with pytest.raises(Exception):
                thunder_c.jit(lambda a: fn(a))(x.clone())
        return
    if any(w is not None and w.shape != x.shape for x, w in zip(xs, want)):
        pytest.skip(f"{spelling}: not elementwise (a layout op of the same form)")
    if all(w is not None for w in want):  # one compilation for both dtypes
        got = thunder_c.jit(lambda a, b: (fn(a), fn(b)))(*[x.clone() for x in xs])
        for x, g, w in zip(xs, got, want):
            assert g.dtype == w.dtype, (spelling, x.dtype, g.dtype, w.dtype)
            torch.testing.assert_close(g, w, equal_nan=True, msg=lambda m: f"{spelling} on {x.dtype}: {m}")
        return
    for x, w in zip(xs, want):
        jf = thunder_c.jit(lambda a: fn(a))
        if w is None:
            with pytest.raises(Exception):
                jf(x.clone())
            continue
        got = jf(x.clone())
        assert got.dtype == w.dtype, (spelling, x.dtype, got.dtype, w.dtype)
        torch.testing.assert_close(got, w, equal_nan=True, msg=lambda m: f"{spelling} on {x.dtype}: {m}")


@pytest.mark.parametrize("name,spelling,fn", UNARY)
def test_unary_inplace_against_torch(name, spelling, fn):
    entry = BY_NAME.get(f"ltorch.{name}_")
    if entry is None:
        pytest.skip(f"no ltorch.{name}_")
    meth = f"{name}_"
    if not hasattr(torch.Tensor, meth):
        pytest.skip(f"no Tensor.{meth}")

    def f(a):
        getattr(a, meth)()
        return a

    x = torch.tensor(VALUES, dtype=torch.float64)
    try:
        want = f(x.clone())
    except (RuntimeError, TypeError):
        pytest.skip(f"Tensor.{meth} refuses float64")
    got_in = x.clone()
    thunder_c.jit(f)(got_in)
    torch.testing.assert_close(got_in, want, equal_nan=True)


# ---- the rows of the elementwise tables (thunder_c._C.op_rows()) against the op table ----------------

ROWS = thunder_c._C.op_rows()
ROW_KINDS = {1: {"MATH", "FLOAT", "EXACT", "PRED"}, 2: {"MATH", "FLOAT", "ALL", "EXACT", "CMP"}}
BINARY_PRIM = "{}(TensorOrScalar a, TensorOrScalar b, /) -> Tensor"


def test_ops_listing_is_sorted_by_qualname():
    """`_C.ops()` shows no op-id order (ids are internal and follow the .def rows)."""
    names = [q for q, *_ in OPS]
    assert names == sorted(names)
    assert len(set(names)) == len(names)


def test_op_rows_agree_with_the_op_table():
    """Each row of unary.def / binary.def is the ops the table has: its torch-level op, its prim exactly
    when it has a kind, its in-place op exactly when the row says INPLACE; each elementwise unary or
    binary prim of the table is a row of that arity."""
    names = [r["name"] for r in ROWS]
    assert names == sorted(names) and len(set(names)) == len(names)
    for r in ROWS:
        n = r["name"]
        assert r["torch"] == f"ltorch.{n}" and r["torch"] in BY_NAME, n
        assert not BY_NAME[r["torch"]][2], n
        if r["kind"] is None:  # a composite
            assert r["prim"] is None and f"prims.{n}" not in BY_NAME and r["decomp"] == "OWN", n
        else:
            assert r["kind"] in ROW_KINDS[r["arity"]], (n, r["kind"])
            assert r["prim"] == f"prims.{n}", n
            want = (UNARY_PRIM if r["arity"] == 1 else BINARY_PRIM).format(n)
            assert BY_NAME[r["prim"]][1] == want, (n, BY_NAME[r["prim"]][1])
            assert isinstance(r["fuse"], bool) and r["fold"], n
        ip = BY_NAME.get(f"ltorch.{n}_")
        if r["inplace"]:
            assert r["inplace"] == f"ltorch.{n}_" and ip is not None and ip[2], n
        else:
            assert ip is None, f"ltorch.{n}_ exists but the row of {n} says NO_INPLACE"
    by_arity = {(r["arity"], r["name"]) for r in ROWS if r["kind"]}
    for q, (_, sch, _) in BY_NAME.items():
        mod, _, n = q.partition(".")
        if mod != "prims":
            continue
        for arity, form in ((1, UNARY_PRIM), (2, BINARY_PRIM)):
            if sch == form.format(n):
                assert (arity, n) in by_arity, f"{q}: an elementwise prim without a row in op_rows()"


def test_unary_def_rows_are_in_alphabetical_order():
    """The rows of src/ops/unary.def stay sorted by name, as its header says (op_rows() sorts what it
    lists, so this reads the file itself)."""
    text = (SOURCE_DIR / "src" / "ops" / "unary.def").read_text()
    names = re.findall(r"^TH_UNARY(?:_TORCH)?\((\w+),", text, re.M)
    assert set(names) == {r["name"] for r in ROWS if r["arity"] == 1}, "the rows read from unary.def"
    bad = [f"{a} before {b}" for a, b in zip(names, names[1:]) if a > b]
    assert not bad, f"rows of src/ops/unary.def out of alphabetical order: {bad}"


def test_the_walk_finds_every_unary_row():
    names = {p.values[0] for p in UNARY}
    missing = sorted(r["name"] for r in ROWS if r["arity"] == 1 and r["name"] not in names)
    assert not missing, f"unary rows of op_rows() the schema walk misses: {missing}"


def test_no_alias_names_two_ops():
    """Lookups by alias (th_symbol_lookup, the Python dispatch) take the first op in id order; with each
    alias naming one op, that order cannot show."""
    seen = {}
    for q, al, _sch, _ip in OPS:
        for a in filter(None, al.split("|")):
            assert a not in seen, f"alias {a} names both {seen[a]} and {q}"
            seen[a] = q
