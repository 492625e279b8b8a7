"""Bad input to the `thunder` CLI: every case exits 1 (user error) or 2 (bad usage) with one clear line on
stderr naming the file/line/op/argument, never crashes (no signal), and never leaves an output file."""
import struct

import numpy as np
import pytest

import safetensors_ref as st

HEADER = "def computation(a, b):\n  # a: \"cpu f32[2, 3]\"\n  # b: \"cpu f32[4, 5]\"\n"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def assert_user_error(p, *fragments, code=1):
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert lines, "no message on stderr"
    for f in fragments:
        assert f in p.stderr, (f, p.stderr)


def test_syntax_error_names_line_and_column(cli, tmp_path):
    prog = write(tmp_path, "bad.py", HEADER + "  t0 = prims.add(a, b  # oops\n  return t0\n")
    p = cli("run", prog, "--random-inputs", "0")
    assert_user_error(p, "bad.py:4:")
    assert "^" in p.stderr


def test_unknown_symbol(cli, tmp_path):
    prog = write(tmp_path, "u.py", HEADER + "  t0 = prims.frobnicate(a, b)  # t0: \"cpu f32[2, 3]\"\n  return t0\n")
    assert_user_error(cli("run", prog, "--random-inputs", "0"), "frobnicate", "u.py:4")


def test_wrong_number_of_arguments(cli, tmp_path):
    prog = write(tmp_path, "n.py", HEADER + "  t0 = prims.neg(a, b)  # t0: \"cpu f32[2, 3]\"\n  return t0\n")
    assert_user_error(cli("run", prog, "--random-inputs", "0"), "prims.neg", "argument")


def test_matmul_shape_mismatch(cli, tmp_path):
    prog = write(tmp_path, "m.py", HEADER + "  t0 = prims.matmul(a, b)  # t0: \"cpu f32[2, 5]\"\n  return t0\n")
    assert_user_error(cli("run", prog, "--random-inputs", "0"), "prims.matmul", "[2, 3]", "[4, 5]")


def test_dtype_mismatch_in_prim(cli, tmp_path):
    prog = write(tmp_path, "d.py", "def computation(a, b):\n  # a: \"cpu f32[2, 2]\"\n  # b: \"cpu bf16[2, 2]\"\n"
                 "  t0 = prims.matmul(a, b)  # t0: \"cpu f32[2, 2]\"\n  return t0\n")
    assert_user_error(cli("run", prog, "--random-inputs", "0"),
                      "Expected a.dtype=float32 and b.dtype=bfloat16 to be the same")


def test_input_file_missing(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    assert_user_error(cli("run", prog, "--input", f"a={tmp_path / 'nope.npy'}", "--random-inputs", "0"), "nope.npy")


def test_input_wrong_dtype_and_shape(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    np.save(tmp_path / "f64.npy", np.zeros((2, 3)))
    assert_user_error(cli("run", prog, "--input", f"a={tmp_path / 'f64.npy'}", "--random-inputs", "0"),
                      "input 'a'", "f32[2, 3]", "f64[2, 3]")
    np.save(tmp_path / "shape.npy", np.zeros((3, 2), dtype=np.float32))
    assert_user_error(cli("run", prog, "--input", f"a={tmp_path / 'shape.npy'}", "--random-inputs", "0"),
                      "input 'a'", "f32[3, 2]")


def test_truncated_npy(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    np.save(tmp_path / "t.npy", np.zeros((2, 3), dtype=np.float32))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-5])
    assert_user_error(cli("run", prog, "--input", f"a={tmp_path / 't.npy'}", "--random-inputs", "0"), "t.npy")


def test_safetensors_header_lies(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    st.write(tmp_path / "w.safetensors", {"a": np.zeros((2, 3), dtype=np.float32)})
    raw = bytearray((tmp_path / "w.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    header = raw[8:8 + n].decode().replace("[0, 24]", "[0, 2400]")
    header = header.encode() + b" " * (n - len(header))
    (tmp_path / "lie.safetensors").write_bytes(bytes(raw[:8]) + header + bytes(raw[8 + n:]))
    assert_user_error(cli("run", prog, "--input", f"a={tmp_path / 'lie.safetensors'}", "--random-inputs", "0"),
                      "lie.safetensors")


def test_output_in_missing_directory_leaves_nothing(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  t0 = prims.neg(a)  # t0: \"cpu f32[2, 3]\"\n  return t0\n")
    target = tmp_path / "no" / "such" / "out.npy"
    assert_user_error(cli("run", prog, "--random-inputs", "0", "--output", target), "out.npy")
    assert not target.exists() and not (tmp_path / "no").exists()


def test_failed_run_leaves_no_output_file(cli, tmp_path):
    prog = write(tmp_path, "m.py", HEADER + "  t0 = prims.matmul(a, b)  # t0: \"cpu f32[2, 5]\"\n  return t0\n")
    out = tmp_path / "out.npy"
    assert cli("run", prog, "--random-inputs", "0", "--output", out).returncode == 1
    assert list(tmp_path.iterdir()) == [prog]


@pytest.mark.parametrize("args", [[], ["run"], ["bogus"], ["run", "x.py", "--device", "tpu"],
                                  ["run", "x.py", "--output", "out.txt"], ["run", "x.py", "--random-inputs", "-1x"],
                                  ["check"], ["run", "x.py", "--frobnicate"]])
def test_bad_usage_exits_2(cli, args):
    p = cli(*args)
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    assert p.stderr.strip()


def test_help(cli):
    p = cli("--help")
    assert p.returncode == 0 and "thunder run PROGRAM" in p.stdout


def test_check_prints_and_verifies(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  t0 = prims.neg(a)  # t0: \"cpu f32[2, 3]\"\n  return t0\n")
    p = cli("check", prog)
    assert p.returncode == 0, p.stderr
    assert "t0 = prims.neg(a)  # t0: \"cpu f32[2, 3]\"" in p.stdout
    bad = write(tmp_path, "v.py", HEADER + "  t0 = prims.neg(a)  # t0: \"cpu bf16[2, 3]\"\n  return t0\n")
    assert_user_error(cli("check", bad), "t0")


def test_cuda_trace_with_device_put_runs_with_device_cpu(cli, tmp_path):
    prog = write(tmp_path, "dp.py", "def computation(x):\n  # x: \"cuda:0 f32[2, 2]\"\n"
                 "  t0 = prims.device_put(x, devices.Device(\"cuda:0\"))  # t0: \"cuda:0 f32[2, 2]\"\n"
                 "  t1 = prims.neg(t0)  # t1: \"cuda:0 f32[2, 2]\"\n  return t1\n")
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32).reshape(2, 2))
    out = tmp_path / "out.npy"
    assert_user_error(cli("run", prog, "--input", f"x={tmp_path / 'x.npy'}"), "cuda:0", "--device cpu")
    p = cli("run", prog, "--input", f"x={tmp_path / 'x.npy'}", "--device", "cpu", "--output", out, "--quiet")
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(np.load(out), -np.arange(4, dtype=np.float32).reshape(2, 2))


@pytest.mark.parametrize("damage", ["truncate", "missing", "empty"])
def test_corrupt_weights_file_is_an_error_not_random_weights(cli, tmp_path, damage):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    st.write(tmp_path / "w.safetensors", {"a": np.zeros((2, 3), dtype=np.float32)})
    data = (tmp_path / "w.safetensors").read_bytes()
    bad = tmp_path / "bad.safetensors"
    if damage == "truncate":
        bad.write_bytes(data[:40])
    elif damage == "empty":
        bad.write_bytes(b"")
    p = cli("run", prog, "--input", bad, "--random-inputs", "0", "--output", tmp_path / "o.npy")
    assert_user_error(p, "bad.safetensors")
    assert not (tmp_path / "o.npy").exists()


def test_weights_file_matching_no_input_is_an_error(cli, tmp_path):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    st.write(tmp_path / "w.safetensors", {"zzz": np.zeros((2, 3), dtype=np.float32)})
    assert_user_error(cli("run", prog, "--input", tmp_path / "w.safetensors", "--random-inputs", "0"),
                      "w.safetensors", "no tensor")


@pytest.mark.parametrize("ret", ["None", "(a, None)", "{'x': a, 'y': None}"])
def test_non_tensor_outputs_print_and_save(cli, tmp_path, ret):
    prog = write(tmp_path, "n.py", HEADER + f"  return {ret}\n")
    p = cli("run", prog, "--random-inputs", "0")
    assert p.returncode == 0, p.stderr
    assert "None" in p.stdout
    out = tmp_path / "o.safetensors"
    p = cli("run", prog, "--random-inputs", "0", "--output", out, "--quiet")
    if ret == "None":
        assert_user_error(p, "returns no tensor")
        assert not out.exists()
    else:
        assert p.returncode == 0, p.stderr
        assert list(st.read(out)) == ["output0"]


def test_program_that_is_not_a_regular_text_file(cli, tmp_path):
    assert_user_error(cli("check", tmp_path), "not a regular file")
    assert_user_error(cli("check", "/dev/zero"), "not a regular file")
    nul = tmp_path / "nul.py"
    nul.write_bytes((HEADER + "  return a\n").encode() + b"\0garbage")
    assert_user_error(cli("check", nul), "NUL")


@pytest.mark.parametrize("args", [["--input", "x="], ["--input", "=f.npy"], ["--random-inputs", "-1"],
                                  ["--random-inputs", ""], ["--executors", ","], ["--executors", "--quiet"],
                                  ["--output", "a.npy", "--output", "b.npy"], ["--input", "a=1.npy", "--input", "a=2.npy"]])
def test_more_bad_usage_exits_2(cli, tmp_path, args):
    prog = write(tmp_path, "ok.py", HEADER + "  return a\n")
    p = cli("run", prog, *args)
    assert p.returncode == 2, (args, p.returncode, p.stderr)


def test_unclaimed_prim_names_the_users_statement(cli):
    from conftest import SOURCE_DIR, BUILD_DIR
    p = cli("run", SOURCE_DIR / "examples" / "llama_block.py", "--input", BUILD_DIR / "examples" / "llama_block.safetensors",
            "--random-inputs", "0", "--executors", "blas")
    assert_user_error(p, "line 26", "ltorch.rms_norm", "Failed to find an executor", "blas")
