"""One compile pipeline for every frontend: the traces thunder_c.last_traces lists for a jitted function are
the stage traces `thunder run --print-traces` prints for the same initial trace (verify, DCE, CSE, the
execution pass, the fuser, Delete Last Used), text for text; under autograd the CLI's `--grad` stages are
last_traces' and last_backward_traces' (DCE and CSE before the grad split, then each half from the
execution pass on)."""
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()

STAGES = ["dce", "cse", "execution", "fuser", "del_last_used"]
STAGE_LINE = re.compile(r"^# stage: (.*)$", re.M)
TOOK = re.compile(r"\(took \d+ milliseconds\)")
SOURCE_COMMENT = re.compile(r"^\s*# \S+:\d+: ")  # the Python source line a bsym came from: not parsed back


def R(*shape, seed=0, rg=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).requires_grad_(rg)


def chain(x, y):
    dead = torch.sin(x) * 3.0  # noqa: F841  (dead: DCE removes it)
    a = torch.exp(x + y)
    b = torch.exp(x + y)  # the same expression again: CSE merges it into a
    return a * b - y


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)


def autocast_mm(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.relu(x @ w) + 1.0


PROGRAMS = {
    "chain": (chain, lambda rg: (R(4, 8, rg=rg), R(4, 8, seed=1, rg=rg))),
    "mlp": (mlp, lambda rg: (R(4, 16, rg=rg), R(32, 16, seed=1, rg=rg), R(32, seed=2, rg=rg),
                             R(8, 32, seed=3, rg=rg), R(8, seed=4, rg=rg))),
    "autocast": (autocast_mm, lambda rg: (R(4, 16, rg=rg), R(16, 8, seed=1, rg=rg))),
}


def normalized(text):
    """A printed trace without its pass timings and source-line comments."""
    lines = [ln for ln in text.splitlines() if not SOURCE_COMMENT.match(ln)]
    return TOOK.sub("(took N milliseconds)", "\n".join(lines)).rstrip("\n")


def cli_stages(cli, tmp_path, initial, *extra):
    """The (stage name, trace text) pairs `thunder run --print-traces` prints for the initial trace."""
    prog = tmp_path / "initial.py"
    prog.write_text(initial)
    p = cli("run", prog, "--random-inputs", "0", "--quiet", "--print-traces", *extra)
    assert p.returncode == 0, p.stderr
    parts = STAGE_LINE.split(p.stdout)
    assert parts[0].strip() == "", parts[0]
    return [(parts[i], normalized(parts[i + 1].removeprefix("\n"))) for i in range(1, len(parts), 2)]


def top_level(text):
    """The symbols of the top-level bsyms of a printed trace, one per line `  out = sym(...)`."""
    names = []
    for line in text.splitlines():
        m = re.match(r"^  (?!#)(?:[^=(]+ = )?([\w.]+)\(", line)
        if m:
            names.append(m.group(1))
    return names


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cli_prints_the_stages_python_lists(cli, tmp_path, name):
    fn, make = PROGRAMS[name]
    jf = thunder_c.jit(fn)
    args = make(False)
    torch.testing.assert_close(jf(*args), fn(*args), rtol=2e-2, atol=2e-2)
    traces = [normalized(str(t)) for t in thunder_c.last_traces(jf)]
    stages = cli_stages(cli, tmp_path, str(thunder_c.last_traces(jf)[0]))
    assert [s for s, _ in stages] == STAGES
    assert len(traces) == 1 + len(stages), [t.splitlines()[0] for t in traces]
    for (stage, text), want in zip(stages, traces[1:]):
        assert text == want, f"stage {stage}:\n--- CLI\n{text}\n--- Python\n{want}"


def test_dce_and_cse_run_in_the_pipeline(cli, tmp_path):
    jf = thunder_c.jit(chain)
    jf(*PROGRAMS["chain"][1](False))
    initial, dce, cse = (str(t) for t in thunder_c.last_traces(jf)[:3])
    assert top_level(initial).count("ltorch.sin") == 1 and top_level(initial).count("ltorch.exp") == 2
    assert "ltorch.sin" not in top_level(dce) and top_level(dce).count("ltorch.exp") == 2
    assert top_level(cse).count("ltorch.exp") == 1 and top_level(cse).count("ltorch.add") == 1
    stages = dict(cli_stages(cli, tmp_path, initial, "--executors", "eager"))
    assert list(stages) == ["dce", "cse", "execution", "del_last_used"]  # no fuser listed: no fuser stage
    assert top_level(stages["execution"]).count("prims.exp") == 1
    assert "prims.sin" not in top_level(stages["del_last_used"])


def test_grad_stages_match(cli, tmp_path):
    fn, make = PROGRAMS["mlp"]
    jf = thunder_c.jit(fn)
    jf(*make(True)).sum().backward()
    fwd = [normalized(str(t)) for t in thunder_c.last_traces(jf)]
    bwd = [normalized(str(t)) for t in thunder_c.last_backward_traces(jf)]
    stages = cli_stages(cli, tmp_path, str(thunder_c.last_traces(jf)[0]), "--grad")
    names = [s for s, _ in stages]
    assert names == ["dce", "cse", "grad_forward"] + [f"forward {s}" for s in STAGES[2:]] + \
        ["grad_backward"] + [f"backward {s}" for s in STAGES[2:]]
    texts = [t for _, t in stages]
    n = len(fwd) - 1
    assert texts[:n] == fwd[1:]
    assert texts[n:] == bwd
