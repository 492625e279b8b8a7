"""PyTorch's OpInfo conformance of thunder_c: every OpInfo of the installed torch's op database (op_db) whose
op thunder_c maps is run on all its CPU samples for float32, float64, bfloat16, int64 and bool, through
thunder_c.jit and in eager PyTorch, and the results compared (values and dtypes). One test per OpInfo
(name.variant); see opinfo_util.py for what is run and how outcomes are judged.

A sample thunder_c answers with NotImplementedError is "unsupported": counted and reported in the run's
summary (conftest.py's pytest_terminal_summary), not a failure. docs/ops.md is the table of these
results, written by opinfo_report.py."""
import pytest

from conftest import import_thunder_c

import_thunder_c()  # fails with a clear message when the extension is not built

import opinfo_util  # noqa: E402  (after the import check: it imports thunder_c itself)

COVERED, UNCOVERED = opinfo_util.classify()
BY_ID = {oid: (op, qualname) for oid, op, qualname in COVERED}
opinfo_util.SESSION.update(covered=len(COVERED), total=len(COVERED) + len(UNCOVERED))


@pytest.mark.parametrize("opid", sorted(BY_ID))
def test_opinfo(opid):
    op, qualname = BY_ID[opid]
    r = opinfo_util.run_opinfo(op)
    opinfo_util.SESSION["results"][opid] = r
    if r["failures"]:
        n = r["passed"] + r["unsupported"] + len(r["failures"])
        shown = "\n".join("  " + f for f in r["failures"][:25])
        more = f"\n  ... and {len(r['failures']) - 25} more" if len(r["failures"]) > 25 else ""
        pytest.fail(f"{opid} ({qualname}): {len(r['failures'])} of {n} checks failed:\n{shown}{more}", pytrace=False)
