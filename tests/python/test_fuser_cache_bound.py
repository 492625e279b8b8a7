"""The kernel cache's bound (src/executors/fuser/compile.c): THUNDER_CACHE_MAX_MB through the CLI and
through thunder_c.jit in fresh processes with their own XDG_CACHE_HOME under /tmp: refused spellings
name the variable, 1 MiB trims an old kernel at the next build (a symlink and its target are left), 0
and the default keep it. The C side: tests/unit/test_fuser_cache_bound.c."""
import os
import subprocess
import sys
import time

import pytest

from conftest import CLI, PYTHON_DIR

PROG = ("def computation(a):\n  # a: \"cpu f32[9]\"\n  t0 = prims.add(a, {k})\n  t1 = prims.mul(t0, t0)\n"
        "  return t1\n")


def make_cache(root):
    d = root / "thunder-c"
    d.mkdir(parents=True)
    return d


def old_file(path, size, age_s):
    path.write_bytes(bytes((i * 131) % 251 + 1 for i in range(size)))
    t = time.time() - age_s
    os.utime(path, (t, t))


@pytest.mark.parametrize("value,ok", [("", True), ("+1", True), ("01", True), ("0", True), ("1073741824", True),
                                      (" 1", False), ("1 ", False), ("-0", False), ("0x10", False),
                                      ("1073741825", False), ("99999999999999999999", False), ("1MB", False)])
def test_cli_bound_spellings(tmp_path, value, ok):
    root = tmp_path / "xdg"
    d = make_cache(root)
    prog = tmp_path / "p.py"
    prog.write_text(PROG.format(k=0.375))
    env = dict(os.environ, XDG_CACHE_HOME=str(root), THUNDER_CACHE_MAX_MB=value)
    for _ in range(2):  # a build, then a hit: a refused value is refused both times
        p = subprocess.run([str(CLI), "run", str(prog), "--random-inputs", "1", "--quiet"], env=env,
                           capture_output=True, text=True, timeout=300)
        if ok:
            assert p.returncode == 0, p.stderr
        else:
            assert p.returncode == 1, p.stderr
            assert f"THUNDER_CACHE_MAX_MB: expected the kernel cache's bound in MiB, an integer from 0 (no bound) " \
                   f"to 1073741824, got '{value}'" in p.stderr, p.stderr
            assert not list(d.glob("fusion-*.so"))


@pytest.mark.parametrize("value,trims", [("1", True), ("+1", True), ("0", False), (None, False)])
def test_cli_bound_trims(tmp_path, value, trims):
    root = tmp_path / "xdg"
    d = make_cache(root)
    old_file(d / "fusion-old.so", 2 << 20, 3 * 86400)
    old_file(d / "fusion-link-target", 2 << 20, 3 * 86400)
    (d / "fusion-link.so").symlink_to(d / "fusion-link-target")
    prog = tmp_path / "p.py"
    prog.write_text(PROG.format(k=0.625))
    env = dict(os.environ, XDG_CACHE_HOME=str(root))
    env.pop("THUNDER_CACHE_MAX_MB", None)
    if value is not None:
        env["THUNDER_CACHE_MAX_MB"] = value
    p = subprocess.run([str(CLI), "run", str(prog), "--random-inputs", "1", "--quiet"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (d / "fusion-old.so").exists() == (not trims)
    assert (d / "fusion-link.so").is_symlink() and (d / "fusion-link-target").exists()
    assert len(list(d.glob("fusion-[0-9a-f]*.so"))) == 1


def test_jit_bound_in_fresh_process(tmp_path):
    """thunder_c.jit with THUNDER_CACHE_MAX_MB set: a refused value is a ValueError naming it; 1 trims an old
    kernel at the first build; the jitted var_mean of an overflowing float64 row is still PyTorch's."""
    root = tmp_path / "xdg"
    d = make_cache(root)
    old_file(d / "fusion-old.so", 2 << 20, 3 * 86400)
    code = (
        "import os, torch, thunder_c\n"
        "x = torch.full((3, 50), 1e306, dtype=torch.float64)\n"
        "x[1, 7] = float('inf')\n"
        "f = lambda t: torch.var_mean(t * 1.0, -1)\n"
        "os.environ['THUNDER_CACHE_MAX_MB'] = '1 '\n"
        "try:\n"
        "    thunder_c.jit(f)(x)\n"
        "    print('no error')\n"
        "except ValueError as e:\n"
        "    print('ValueError', e)\n"
        "os.environ['THUNDER_CACHE_MAX_MB'] = '1'\n"
        "g, w = thunder_c.jit(f)(x), torch.var_mean(x * 1.0, -1)\n"
        "ok = all(torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a[~torch.isnan(b)], b[~torch.isnan(b)])\n"
        "         for a, b in zip(g, w))\n"
        "print('match', ok)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(root), PYTHONPATH=str(PYTHON_DIR))
    env.pop("THUNDER_CACHE_MAX_MB", None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("ValueError fuser: THUNDER_CACHE_MAX_MB:") and "got '1 '" in lines[0], p.stdout
    assert lines[1] == "match True", p.stdout
    assert not (d / "fusion-old.so").exists()
    assert len(list(d.glob("fusion-[0-9a-f]*.so"))) == 1
