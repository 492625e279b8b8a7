"""The torch the package runs on: thunder_c imports only on a supported torch release, and says why not
otherwise (a half-working import on an unsupported torch would fail later, deep inside tracing)."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import PYTHON_DIR, import_thunder_c

thunder_c = import_thunder_c()


def import_with_torch_version(version):
    """Imports thunder_c in a fresh interpreter whose torch reports `version`; (returncode, stderr)."""
    code = ("import sys, torch\n"
            f"torch.__version__ = {version!r}\n"
            "try:\n"
            "    import thunder_c\n"
            "except ImportError as e:\n"
            "    print(e, file=sys.stderr); sys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stderr


@pytest.mark.parametrize("version", ["1.13.1", "2.3.1+cpu", "2.15.0", "3.0.0", "nightly"])
def test_unsupported_torch_raises_import_error(version):
    rc, err = import_with_torch_version(version)
    assert rc == 3, err
    assert f"torch {version} is installed" in err and ">= 2.4" in err and "< 2.15" in err, err


@pytest.mark.parametrize("version", ["2.4.0", "2.14.1+cu130", "2.10.0a0+git1234"])
def test_supported_torch_imports(version):
    rc, err = import_with_torch_version(version)
    assert rc == 0, err


def test_running_torch_is_supported():
    lo, hi = thunder_c.TORCH_SUPPORTED
    release = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    assert lo <= release < hi
