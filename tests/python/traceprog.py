"""Runs a small program written in Thunder's trace format through the `thunder` CLI on torch tensors made
by a test, and reads the output back with the test's own .safetensors reader (safetensors_ref.py)."""
import numpy as np
import torch

import safetensors_ref as st

SHORT = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
         torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
         torch.bool: "b8"}


def run(cli, tmp_path, statements, inputs, *extra_args):
    """statements: the body lines (without indentation); the program returns `out`. Returns
    (output0 as a numpy array, bf16 decoded to float32; the first bytes of the output file, whose
    header tells the stored dtype)."""
    names = list(inputs)
    lines = ["def computation(%s):" % ", ".join(names)]
    for n in names:
        t = inputs[n]
        lines.append('  # %s: "cpu %s[%s]"' % (n, SHORT[t.dtype], ", ".join(map(str, t.shape))))
    lines += ["  " + s for s in statements] + ["  return out", ""]
    prog = tmp_path / "prog.py"
    prog.write_text("\n".join(lines))
    out = tmp_path / "out.safetensors"
    args = ["run", prog, "--quiet", "--output", out, *extra_args]
    if inputs:
        files = {}
        for n, t in inputs.items():
            if t.dtype == torch.bfloat16:
                files[n] = ("BF16", t.view(torch.int16).numpy().view(np.uint16))
            else:
                files[n] = t.numpy()
        st.write(tmp_path / "in.safetensors", files)
        args += ["--input", tmp_path / "in.safetensors"]
    p = cli(*args)
    assert p.returncode == 0, f"{statements}: {p.stderr}"
    return st.read(out)["output0"], open(out, "rb").read(4096)
