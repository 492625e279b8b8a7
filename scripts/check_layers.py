#!/usr/bin/env python3
"""Lists the #includes of src/ that point upward across the layers of thunder-c.

Dependencies point one way: frontend -> compile -> transforms -> executors -> ops -> runtime -> core
(a file may include its own layer's headers and those of any layer below it). The public headers in
include/thunder/ are the API every layer implements a part of, so they count as no layer. The frontends
(tools/, python/thunder_c/csrc/) sit on top and are not checked.

    scripts/check_layers.py [--root DIR]

Prints one line per upward include, `file:line: <layer> includes "<header>" (<layer>)`, then a count;
exits 1 when there is one, 0 otherwise.
"""
import argparse
import pathlib
import re
import sys

LAYERS = ["core", "runtime", "ops", "executors", "transforms", "compile"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The layer of a path relative to src/ ("ops/torch/nn.c" -> "ops"), or None."""
    top = pathlib.PurePosixPath(path).parts[0]
    return top if top in LAYERS else None


def upward_includes(root):
    src = root / "src"
    for f in sorted(src.rglob("*")):
        if f.suffix not in (".c", ".h", ".def") or not f.is_file():
            continue
        rel = f.relative_to(src).as_posix()
        mine = layer_of(rel)
        if mine is None:
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header = m.group(1)
            theirs = layer_of(header)
            if theirs is None and not header.startswith("thunder/"):
                # a header next to the file ("eager_internal.h"): its own directory's layer
                theirs = layer_of((pathlib.PurePosixPath(rel).parent / header).as_posix())
            if theirs is not None and LAYERS.index(theirs) > LAYERS.index(mine):
                yield f"src/{rel}:{n}: {mine} includes \"{header}\" ({theirs})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    found = list(upward_includes(args.root))
    for line in found:
        print(line)
    print(f"{len(found)} upward include{'s' if len(found) != 1 else ''} across the layers "
          f"({' <- '.join(reversed(LAYERS))})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
