"""Integer constants of a fusion region are kernel arguments: programs that differ only in them (a size
a trace baked in, as nanoGPT's `x[:, [-1], :]` normalizing its index by `+ T`) run one kernel source,
compiled once, each with its own values."""
import pathlib
import sys

import pytest
import torch

import thunder_c

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]


def kernels(d):
    """The dumped kernel sources of a directory, without their comment lines (which name shapes)."""
    out = {}
    for p in sorted(pathlib.Path(d).iterdir()):
        out[p.name] = "\n".join(l for l in p.read_text().splitlines() if not l.lstrip().startswith("*"))
    return out


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_int_constants_run_as_arguments(tmp_path, dtype):
    def f(i, n):
        return torch.where(i < 0, i + n, i) * 3 - n

    srcs = []
    for n in (64, 65, -7, 2**40 if dtype == torch.int64 else 1000):
        d = tmp_path / f"{n}"
        d.mkdir()
        jf = thunder_c.jit(lambda i: f(i, n), dump_fusions=str(d))
        i = torch.randint(-100, 100, (5, 37), dtype=dtype)
        torch.testing.assert_close(jf(i), f(i, n), rtol=0, atol=0)
        srcs.append(kernels(d))
    assert all(s == srcs[0] for s in srcs[1:]) and srcs[0]


def test_nanogpt_sequence_lengths_share_their_kernels(tmp_path):
    sys.path.insert(0, str(SOURCE_DIR / "tests" / "models"))
    import nanogpt
    torch.manual_seed(0)
    m = nanogpt.GPT(nanogpt.GPTConfig(block_size=64, vocab_size=96, n_layer=1, n_head=2, n_embd=32, dropout=0.0,
                                      bias=True)).eval()
    srcs = []
    with torch.no_grad():
        for t in (16, 17):
            d = tmp_path / f"t{t}"
            d.mkdir()
            jm = thunder_c.jit(m, dump_fusions=str(d))
            ids = torch.randint(0, 96, (2, t))
            torch.testing.assert_close(jm(ids)[0], m(ids)[0])
            srcs.append(kernels(d))
    assert srcs[0] == srcs[1] and srcs[0]
