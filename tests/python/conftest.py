"""Shared fixtures for the Python tests: where the build is, and how to run the `thunder` CLI.

The tests run under Debian's /usr/bin/python3 (NumPy, PyTorch 1.13) and find the build through
THUNDER_BUILD_DIR (set by CTest), defaulting to ../../build relative to this file."""
import os
import pathlib
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("THUNDER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD_DIR = pathlib.Path(os.environ.get("THUNDER_BUILD_DIR", SOURCE_DIR / "build"))
CLI = BUILD_DIR / "thunder"


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
