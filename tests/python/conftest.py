"""Shared fixtures for the Python tests: where the build is, and how to run the `thunder` CLI.

The tests run under the project's .venv/bin/python (NumPy, torch 2.14.1; scripts/install-deps.sh) and find the build through
THUNDER_BUILD_DIR (set by CTest), defaulting to ../../build relative to this file."""
import os
import pathlib
import subprocess
import sys

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("THUNDER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD_DIR = pathlib.Path(os.environ.get("THUNDER_BUILD_DIR", SOURCE_DIR / "build"))
CLI = BUILD_DIR / "thunder"
PYTHON_DIR = BUILD_DIR / "python"  # the built package: PYTHON_DIR/thunder_c/{__init__.py, _C*.so}

# The built thunder_c package comes first on sys.path, so that `import thunder_c` in a test module finds
# this build's extension (not an installed copy).
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))


def import_thunder_c():
    """Imports the built thunder_c package; fails (never skips) with a clear message when the
    extension was not built or cannot be loaded. Call it at the top of a test module."""
    try:
        import thunder_c
    except ImportError as e:
        pytest.fail(f"cannot import thunder_c from {PYTHON_DIR} (is the Python extension built? "
                    f"`ninja -C {BUILD_DIR}`): {e}", pytrace=False)
    return thunder_c


def run_cli(*args, check=False):
    """Runs `thunder ARGS...`; returns the CompletedProcess (text mode)."""
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"thunder {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture
def cli():
    if not CLI.exists():
        pytest.fail(f"thunder CLI not built at {CLI}")
    return run_cli


def pytest_terminal_summary(terminalreporter):
    """After a run that included test_opinfo.py: how many op_db OpInfos thunder_c covers and what their
    samples gave (docs/ops.md has the per-op table; tests/python/opinfo_report.py regenerates it)."""
    mod = sys.modules.get("opinfo_util")
    results = getattr(mod, "SESSION", {}).get("results") if mod else None
    if not results:
        return
    s = mod.SESSION
    passed = sum(r["passed"] for r in results.values())
    by_ref = sum(r["passed_reference"] for r in results.values())
    unsupported = sum(r["unsupported"] for r in results.values())
    failed = sum(len(r["failures"]) for r in results.values())
    with_unsupported = sum(1 for r in results.values() if r["unsupported"])
    tr = terminalreporter
    tr.write_sep("=", "OpInfo conformance (test_opinfo.py)")
    tr.write_line(f"op_db OpInfos covered by thunder_c: {s['covered']} of {s['total']} ({len(results)} run here)")
    tr.write_line("sample checks (one sample through one spelling: the function, its method, an alias):")
    tr.write_line(f"  passed: {passed} (of them {by_ref} bf16 results accepted as at least as accurate as eager's "
                  f"against float64)")
    tr.write_line(f"  unsupported (NotImplementedError): {unsupported}, in {with_unsupported} OpInfos")
    tr.write_line(f"  failed: {failed}")
