#!/usr/bin/env python3
"""fuser_fuzz_minimize.py — shrink a failing fuser-fuzz trace to a minimal one, with the `thunder` CLI.

test_fuser_fuzz writes a failing case as fuser_fuzz_<seed>_<case>.py plus its inputs
(..._inputs.safetensors). This tool deletes top-level lines of the trace one at a time (greedy, repeated
until nothing more can go) and keeps a deletion when the smaller trace still fails the same way:

  --error TEXT   the fused run (executors fuser,blas,eager) fails with a message containing TEXT;
  (default)      both runs succeed and some output differs bit for bit between the fused run and the
                 eager run (NaNs of float outputs compare equal; --tol R allows |f - e| <= R * (1 + |e|)
                 for float32/float64 outputs).

The return keeps the originally returned values that are still defined. Inputs stay in the signature,
so the same .safetensors file binds them. Only the standard library is used (the .safetensors outputs are
read directly); the result is printed and written to OUT (default: <trace>.min.py).

  python3 tests/fuzz/fuser_fuzz_minimize.py build/thunder fuser_fuzz_1_246.py \\
      fuser_fuzz_1_246_inputs.safetensors [--error "did not produce"] [--tol 1e-5] [--out min.py]
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

ASSIGN = re.compile(r"^  (?:\(([^)]*)\)|\[([^\]]*)\]|([A-Za-z_][A-Za-z0-9_]*)) = ")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = (meta["dtype"], data[base + a:base + b])
    return out


def floats(dtype, raw):
    if dtype == "F32":
        return struct.unpack("<%df" % (len(raw) // 4), raw)
    if dtype == "F64":
        return struct.unpack("<%dd" % (len(raw) // 8), raw)
    return None


def differs(fused, eager, tol):
    if fused.keys() != eager.keys():
        return True
    for name in fused:
        (df, rf), (de, re_) = fused[name], eager[name]
        if df != de or len(rf) != len(re_):
            return True
        if rf == re_:
            continue
        xf, xe = floats(df, rf), floats(de, re_)
        if xf is None:
            return True
        for a, b in zip(xf, xe):
            if math.isnan(a) and math.isnan(b):
                continue
            if a != b and not (tol > 0 and abs(a - b) <= tol * (1 + abs(b))):
                return True
    return False


def run(thunder, trace, inputs, executors, out):
    p = subprocess.run([thunder, "run", trace, "--input", inputs, "--executors", executors, "--quiet",
                        "--output", out], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def fails(args, lines, workdir):
    path = os.path.join(workdir, "candidate.py")
    with open(path, "w") as f:
        f.write(render(lines))
    fo, eo = os.path.join(workdir, "fused.safetensors"), os.path.join(workdir, "eager.safetensors")
    for p in (fo, eo):
        if os.path.exists(p):
            os.remove(p)
    rc, msg = run(args.thunder, path, args.inputs, "fuser,blas,eager", fo)
    if args.error is not None:
        return rc != 0 and args.error in msg
    if rc != 0:
        return False
    rc, _ = run(args.thunder, path, args.inputs, "eager", eo)
    if rc != 0:
        return False
    return differs(read_safetensors(fo), read_safetensors(eo), args.tol)


def defined(line):
    m = ASSIGN.match(line)
    if not m:
        return []
    return NAME.findall(next(g for g in m.groups() if g is not None))


def render(lines):
    """The trace with its return narrowed to the originally returned values still defined."""
    body, ret = lines
    have = set()
    for line in body:
        have.update(defined(line))
    keep = [v for v in ret if v in have]
    text = [line for line in body]
    if not keep:
        text.append("  return None")
    else:
        text.append("  return (" + ", ".join(keep) + ("," if len(keep) == 1 else "") + ")")
    return "\n".join(text) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("thunder", help="the thunder CLI (build/thunder)")
    ap.add_argument("trace")
    ap.add_argument("inputs", help="the case's _inputs.safetensors")
    ap.add_argument("--error", help="keep failing with a message containing this text")
    ap.add_argument("--tol", type=float, default=0.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    src = open(args.trace).read().splitlines()
    ret_at = max(i for i, l in enumerate(src) if l.strip().startswith("return"))
    ret = NAME.findall(src[ret_at].strip()[len("return"):])
    body = src[:ret_at]
    first = next(i for i, l in enumerate(body) if ASSIGN.match(l))
    with tempfile.TemporaryDirectory() as wd:
        os.environ.setdefault("XDG_CACHE_HOME", wd)
        if not fails(args, (body, ret), wd):
            sys.exit("the trace does not fail as asked; nothing to minimize")
        changed = True
        while changed:
            changed = False
            i = len(body) - 1
            while i >= first:
                if ASSIGN.match(body[i]) or body[i].startswith("    #"):
                    cand = body[:i] + body[i + 1:]
                    if fails(args, (cand, ret), wd):
                        body, changed = cand, True
                i -= 1
            for v in list(ret):
                cand = [x for x in ret if x != v]
                if cand and fails(args, (body, cand), wd):
                    ret, changed = cand, True
    text = render((body, ret))
    out = args.out or re.sub(r"\.py$", "", args.trace) + ".min.py"
    with open(out, "w") as f:
        f.write(text)
    print(text, end="")
    print("# written to", out)


if __name__ == "__main__":
    main()
