"""The main job end to end: the bundled example programs run through the `thunder` CLI on real input
files, compared with independent float64 NumPy references of the same blocks; the seed traces run on
the CPU with --device cpu."""
import math

import numpy as np
import pytest

import safetensors_ref as st
from conftest import BUILD_DIR, SOURCE_DIR

EX = SOURCE_DIR / "examples"
WEIGHTS = BUILD_DIR / "examples"


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def causal_attention(q, k, v):
    T, hs = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(hs)
    mask = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(mask, s, -np.inf)
    return softmax(s) @ v


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_reference(x, p):
    B, T, C = x.shape
    H = 4
    h = layer_norm(x, p["ln_1_weight"], p["ln_1_bias"])
    qkv = h @ p["attn_c_attn_weight"].T + p["attn_c_attn_bias"]
    q, k, v = np.split(qkv, 3, axis=-1)
    heads = lambda t: t.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)
    y = causal_attention(heads(q), heads(k), heads(v)).transpose(0, 2, 1, 3).reshape(B, T, C)
    x1 = x + y @ p["attn_c_proj_weight"].T + p["attn_c_proj_bias"]
    h2 = layer_norm(x1, p["ln_2_weight"], p["ln_2_bias"])
    m = gelu_tanh(h2 @ p["mlp_c_fc_weight"].T + p["mlp_c_fc_bias"])
    return x1 + m @ p["mlp_c_proj_weight"].T + p["mlp_c_proj_bias"]


def llama_reference(x, p):
    B, T, C = x.shape
    H, hs = 4, 32
    h = rms_norm(x, p["attention_norm_weight"], 1e-6)
    heads = lambda t: t.reshape(B, T, H, hs).transpose(0, 2, 1, 3)
    q, k, v = heads(h @ p["wq"].T), heads(h @ p["wk"].T), heads(h @ p["wv"].T)

    def rope(t):
        rot = np.concatenate([-t[..., 16:], t[..., :16]], axis=-1)
        return t * p["rope_cos"] + rot * p["rope_sin"]

    y = causal_attention(rope(q), rope(k), v).transpose(0, 2, 1, 3).reshape(B, T, C)
    x1 = x + y @ p["wo"].T
    h2 = rms_norm(x1, p["ffn_norm_weight"], 1e-6)
    a = h2 @ p["w1"].T
    silu = a / (1 + np.exp(-a))
    return x1 + (silu * (h2 @ p["w3"].T)) @ p["w2"].T


@pytest.mark.parametrize("name,reference", [("gpt2_block", gpt2_reference), ("llama_block", llama_reference)])
def test_example_matches_float64_numpy(cli, tmp_path, name, reference):
    weights_file = WEIGHTS / f"{name}.safetensors"
    params = {k: v.astype(np.float64) for k, v in st.read(weights_file).items()}
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 64, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npy"
    cli("run", EX / f"{name}.py", "--input", weights_file, "--input", f"x={tmp_path / 'x.npy'}",
        "--output", out, "--quiet", check=True)
    got = np.load(out)
    want = reference(x.astype(np.float64), params)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the check is meaningful: the block changes its input substantially
    assert np.abs(want - x).max() > 0.1


def test_main_job_prints_trace_and_statistics(cli):
    p = cli("run", EX / "gpt2_block.py", "--input", WEIGHTS / "gpt2_block.safetensors", "--random-inputs", "0",
            check=True)
    assert "def computation(x, ln_1_weight" in p.stdout
    assert "ltorch.scaled_dot_product_attention" in p.stdout
    assert "output0: f32[2, 64, 128]" in p.stdout and "mean" in p.stdout


def test_seed000_runs_on_cpu(cli, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    prog = EX / "seeds" / "seed000_autocast_linear.py"
    p = cli("run", prog, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"w={tmp_path / 'w.npy'}")
    assert p.returncode == 1 and "cuda:0" in p.stderr and "--device cpu" in p.stderr
    out = tmp_path / "out.safetensors"
    cli("run", prog, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"w={tmp_path / 'w.npy'}",
        "--device", "cpu", "--output", out, "--quiet", check=True)
    got = st.read(out)["output0"]
    want = st.to_bf16(st.to_bf16(x).astype(np.float64) @ st.to_bf16(w).astype(np.float64).T)
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-2)


def test_seed001_first_trace_runs_on_cpu(cli, tmp_path):
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((2, 2)).astype(np.float32) for _ in range(3))
    for n, v in zip(("t_0", "t_1", "t_2"), (a, b, c)):
        np.save(tmp_path / f"{n}.npy", v)
    out = tmp_path / "out.npy"
    cli("run", EX / "seeds" / "seed001_autocast_matmul.py", *sum((["--input", f"{n}={tmp_path / (n + '.npy')}"]
        for n in ("t_0", "t_1", "t_2")), []), "--device", "cpu", "--output", out, "--quiet", check=True)
    got = np.load(out)
    mm = st.to_bf16(st.to_bf16(a).astype(np.float64) @ st.to_bf16(b).astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, mm + c, rtol=1e-2, atol=1e-2)


def test_seed_random_inputs(cli):
    for prog in ("seed000_autocast_linear.py", "seed001_autocast_matmul.py"):
        p = cli("run", EX / "seeds" / prog, "--random-inputs", "0", "--device", "cpu")
        assert p.returncode == 0, p.stderr
        assert "output0" in p.stdout


def test_c_api_example_matches_float64_numpy():
    """examples/c_api_mlp.c builds y = linear(gelu_tanh(linear(x, w1, b1)), w2, b2) through the C API;
    its inputs are filled with scale * ((i * 7 % 13) - 6) over the flat index."""
    import subprocess
    p = subprocess.run([str(BUILD_DIR / "examples" / "c_api_mlp")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "def mlp(x, w1, b1, w2, b2):" in p.stdout and "ltorch.gelu" in p.stdout

    def filled(shape, scale):
        n = int(np.prod(shape))
        return (scale * ((np.arange(n) * 7 % 13) - 6)).reshape(shape).astype(np.float32).astype(np.float64)

    x, w1, b1 = filled((4, 8), 0.1), filled((16, 8), 0.05), filled((16,), 0.01)
    w2, b2 = filled((8, 16), 0.05), filled((8,), 0.01)
    y = gelu_tanh(x @ w1.T + b1) @ w2.T + b2
    line = [l for l in p.stdout.splitlines() if l.startswith("y[0, :] =")][0]
    got = np.array([float(v) for v in line.split("=")[1].split()])
    np.testing.assert_allclose(got, y[0], rtol=1e-4, atol=1e-5)
