"""The model zoo's pytest setup: the built thunder_c package first on sys.path (THUNDER_BUILD_DIR, set by
CTest, defaulting to ../../build), and this directory for zoo.py / runner.py."""
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SOURCE_DIR = pathlib.Path(os.environ.get("THUNDER_SOURCE_DIR", HERE.parents[1]))
BUILD_DIR = pathlib.Path(os.environ.get("THUNDER_BUILD_DIR", SOURCE_DIR / "build"))
for p in (str(HERE), str(BUILD_DIR / "python")):
    if p not in sys.path:
        sys.path.insert(0, p)
