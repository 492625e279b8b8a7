"""The unary rows of the op table for the table-walking tests (test_op_table.py, test_ops_vs_torch.py,
test_eager_vs_torch.py, test_inplace_vs_torch.py).

`thunder_c._C.op_rows()` lists the rows of src/ops/unary.def and binary.def (name, arity, kind, prim,
torch, inplace, ...); `thunder_c._C.ops()` the op table with each op's aliases. A row's PyTorch function
is found through its aliases (torch.special.ndtr, not torch.ndtr), never as `torch.<name>`.

The walking tests give each unary row an input domain and a comparison from a default per kind of row
(MATH, FLOAT, EXACT, PRED, and COMPOSITE for a TH_UNARY_TORCH row, whose kind is None) and hold only the
exceptions in their own tables keyed by op name: a new row with ordinary behaviour needs no test entry.
`lookup` resolves a row against such a (defaults, exceptions) pair; `stale_entries` names the
exceptions that are no row (a typo)."""
import torch

COMPOSITE = "COMPOSITE"  # the kind a TH_UNARY_TORCH row (kind None in op_rows()) is looked up under


def _resolve(path):
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def torch_callable(aliases):
    """The first alias that names a torch function (torch.X, torch.special.X, ...), else a Tensor method
    (Tensor.X): (spelling, callable), or (None, None)."""
    names = aliases.split("|") if aliases else []
    for n in names:
        if n.startswith("torch.") and not n.startswith("torch.Tensor."):
            obj = _resolve(n)
            if obj is not None:
                return n, obj
    for n in names:
        if n.startswith("Tensor."):
            meth = n.split(".", 1)[1]
            if hasattr(torch.Tensor, meth):
                return n, (lambda m: lambda x: getattr(x, m)())(meth)
    return None, None


def tensor_method(aliases):
    """The name of the first Tensor method among the aliases (Tensor.X -> "X") that torch.Tensor has,
    else None: the spelling of an in-place op that returns the tensor it modified."""
    for n in (aliases.split("|") if aliases else []):
        if n.startswith("Tensor.") and hasattr(torch.Tensor, n.split(".", 1)[1]):
            return n.split(".", 1)[1]
    return None


def unary_rows(thunder_c):
    """The unary rows of the op table, sorted by name: each op_rows() dict plus "kind_key" (its kind,
    COMPOSITE for a composite), "aliases" (the torch-level op's), "ip_aliases" (the in-place op's, ""
    without one), "spelling" and "fn" (its PyTorch callable through the aliases; None if none resolves)."""
    aliases = {q: al for q, al, _sch, _ip in thunder_c._C.ops()}
    rows = []
    for r in thunder_c._C.op_rows():
        if r["arity"] != 1:
            continue
        r = dict(r)
        r["kind_key"] = r["kind"] or COMPOSITE
        r["aliases"] = aliases.get(r["torch"], "")
        r["ip_aliases"] = aliases.get(r["inplace"], "") if r["inplace"] else ""
        r["spelling"], r["fn"] = torch_callable(r["aliases"])
        rows.append(r)
    return sorted(rows, key=lambda r: r["name"])


def lookup(row, defaults, exceptions):
    """The entry of `row` in a test's tables: its exception if it has one, else its kind's default;
    None for a kind without a default (the test's completeness check names such a row)."""
    if row["name"] in exceptions:
        return exceptions[row["name"]]
    return defaults.get(row["kind_key"])


def stale_entries(exceptions, rows):
    """The names of the exception entries that are no row among `rows` (typos, removed ops)."""
    return sorted(set(exceptions) - {r["name"] for r in rows})
