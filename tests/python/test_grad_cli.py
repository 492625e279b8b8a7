"""`thunder check PROGRAM --grad` and `thunder run PROGRAM --grad` against PyTorch's autograd.

A small MLP block (layer_norm, linear, tanh-gelu, softmax, a sum) written in Thunder's trace format at
print depth 1 (no decompositions printed, as examples/*.py are) is differentiated by the CLI: check
prints the forward and backward traces (each parses back through `thunder check`); run, with given
inputs and a cotangent file, writes outputs and gradients, which are compared with torch.autograd.grad
of the same computation written in PyTorch, in float64. The GPT-2 block example runs end to end with
--grad (cotangents of ones) and its gradients are compared with PyTorch's on the same weights."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import safetensors_ref as st
from conftest import SOURCE_DIR, BUILD_DIR

PROG = """def computation(x, g, b, w1, b1, w2):
  # x: "cpu f64[3, 4, 8]"
  # g: "cpu f64[8]"
  # b: "cpu f64[8]"
  # w1: "cpu f64[16, 8]"
  # b1: "cpu f64[16]"
  # w2: "cpu f64[5, 16]"
  h = ltorch.layer_norm(x, (8,), g, b, 1e-05)  # h: "cpu f64[3, 4, 8]"
  u = ltorch.linear(h, w1, b1)  # u: "cpu f64[3, 4, 16]"
  a = ltorch.gelu(u, approximate='tanh')  # a: "cpu f64[3, 4, 16]"
  v = ltorch.linear(a, w2, None)  # v: "cpu f64[3, 4, 5]"
  p = ltorch.softmax(v, -1, dtype=None)  # p: "cpu f64[3, 4, 5]"
  s = ltorch.sum(p, 1, False, dtype=None)  # s: "cpu f64[3, 5]"
  return (s, v)
"""

SHAPES = {"x": (3, 4, 8), "g": (8,), "b": (8,), "w1": (16, 8), "b1": (16,), "w2": (5, 16)}


def reference(t):
    h = F.layer_norm(t["x"], (8,), t["g"], t["b"], 1e-5)
    v = F.linear(F.gelu(F.linear(h, t["w1"], t["b1"]), approximate="tanh"), t["w2"])
    return torch.softmax(v, -1).sum(1), v


def test_check_grad_prints_both_traces(cli, tmp_path):
    prog = tmp_path / "mlp.py"
    prog.write_text(PROG)
    r = cli("check", prog, "--grad", check=True)
    out = r.stdout
    assert "def computation(x, g, b, w1, b1, w2):" in out
    assert "return ({'output': (s, v), 'flat_args': [x, g, b, w1, b1, w2], 'flat_output': (s, v)}, ((" in out
    assert "def backward_fn(saved_for_backward, cotangents):" in out
    assert "  C0, C1, = saved_for_backward\n  # C0: \"Collection\"\n" in out
    assert out.count("# Constructed by Grad transform pass") == 2
    # each printed trace parses back, verifies and prints the same
    body = out[:out.rindex("# " + str(prog))]
    second = body.index("# Constructed by", 1)
    for k, text in enumerate((body[:second], body[second:])):
        f = tmp_path / f"part{k}.py"
        f.write_text(text)
        again = cli("check", f, check=True).stdout
        assert again.startswith(text.rstrip("\n") + "\n"), again


def test_run_grad_matches_autograd(cli, tmp_path):
    prog = tmp_path / "mlp.py"
    prog.write_text(PROG)
    rng = np.random.default_rng(0)
    ins = {n: rng.standard_normal(s) for n, s in SHAPES.items()}
    cot = {"cotangent0": rng.standard_normal((3, 5)), "cotangent1": rng.standard_normal((3, 4, 5))}
    st.write(tmp_path / "in.safetensors", ins)
    st.write(tmp_path / "cot.safetensors", cot)
    out = tmp_path / "out.safetensors"
    cli("run", prog, "--input", tmp_path / "in.safetensors", "--grad", "--cotangents", tmp_path / "cot.safetensors",
        "--output", out, "--quiet", check=True)
    got = st.read(out)
    t = {n: torch.tensor(a, requires_grad=True) for n, a in ins.items()}
    s, v = reference(t)
    np.testing.assert_allclose(got["output0"], s.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["output1"], v.detach().numpy(), rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad([s, v], list(t.values()), [torch.tensor(cot["cotangent0"]), torch.tensor(cot["cotangent1"])])
    for n, gr in zip(t, grads):
        np.testing.assert_allclose(got["grad_" + n], gr.numpy(), rtol=1e-10, atol=1e-12, err_msg=n)


def test_run_grad_usage_errors(cli, tmp_path):
    prog = tmp_path / "mlp.py"
    prog.write_text(PROG)
    assert cli("run", prog, "--cotangents", tmp_path / "c.safetensors").returncode == 2
    assert cli("run", prog, "--grad", "--output", tmp_path / "o.npy").returncode == 2
    r = cli("run", prog, "--grad", "--random-inputs", "0", "--cotangents", tmp_path / "missing.safetensors")
    assert r.returncode == 1 and "missing.safetensors" in r.stderr
    st.write(tmp_path / "bad.safetensors", {"cotangent0": np.zeros((3, 5)), "cotangent1": np.zeros((3, 5))})
    r = cli("run", prog, "--grad", "--random-inputs", "0", "--cotangents", tmp_path / "bad.safetensors")
    assert r.returncode == 1 and "expected f64[3, 4, 5], got f64[3, 5]" in r.stderr
    assert "--cotangents: cotangent1 (for output 1)" in r.stderr  # named by the file's key, not a trace name
    st.write(tmp_path / "extra.safetensors",
             {"cotangent0": np.zeros((3, 5)), "cotangent1": np.zeros((3, 4, 5)), "cotangent2": np.zeros(2)})
    r = cli("run", prog, "--grad", "--random-inputs", "0", "--cotangents", tmp_path / "extra.safetensors")
    assert r.returncode == 1 and "unexpected tensor 'cotangent2'" in r.stderr


def test_gpt2_block_grad(cli, tmp_path):
    """The GPT-2 block example (float32) with --grad: gradients of the sum of its output (cotangents of
    ones) against PyTorch's autograd of the same block on the same weights and input."""
    weights = BUILD_DIR / "examples" / "gpt2_block.safetensors"
    if not weights.exists():
        pytest.fail(f"{weights} not built (the examples target makes it)")
    w = st.read(weights)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 64, 128)).astype(np.float32)
    st.write(tmp_path / "x.safetensors", {"x": x})
    out = tmp_path / "out.safetensors"
    cli("run", SOURCE_DIR / "examples" / "gpt2_block.py", "--input", weights, "--input", tmp_path / "x.safetensors",
        "--grad", "--output", out, "--quiet", check=True)
    got = st.read(out)
    t = {n: torch.tensor(np.array(a), requires_grad=True) for n, a in w.items()}
    xt = torch.tensor(x, requires_grad=True)

    def block(x):
        h = F.layer_norm(x, (128,), t["ln_1_weight"], t["ln_1_bias"], 1e-5)
        q, k, v = F.linear(h, t["attn_c_attn_weight"], t["attn_c_attn_bias"]).split(128, 2)
        q, k, v = (z.reshape(2, 64, 4, 32).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else torch.softmax((q @ k.transpose(-2, -1)) / 32 ** 0.5 + torch.full((64, 64), float("-inf")).triu(1), -1) @ v
        y = F.linear(y.transpose(1, 2).reshape(2, 64, 128), t["attn_c_proj_weight"], t["attn_c_proj_bias"])
        x = x + y
        h = F.layer_norm(x, (128,), t["ln_2_weight"], t["ln_2_bias"], 1e-5)
        m = F.linear(F.gelu(F.linear(h, t["mlp_c_fc_weight"], t["mlp_c_fc_bias"]), approximate="tanh"),
                     t["mlp_c_proj_weight"], t["mlp_c_proj_bias"])
        return x + m

    want = block(xt)
    np.testing.assert_allclose(got["output0"], want.detach().numpy(), rtol=1e-4, atol=1e-4)
    names = ["x"] + list(t)
    grads = torch.autograd.grad(want.sum(), [xt] + list(t.values()))
    for n, gr in zip(names, grads):
        ref = gr.numpy()
        scale = np.abs(ref).max() + 1e-6
        err = np.abs(got["grad_" + n] - ref).max() / scale
        assert err < 1e-4, f"grad_{n}: max error {err:.2e} of its scale {scale:.3g}"
