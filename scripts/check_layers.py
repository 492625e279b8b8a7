#!/usr/bin/env python3
"""Lists the dependencies of src/ that point upward across the layers of thunder-c.

The layer rule (docs/design.md, "The layer rule"): dependencies point one way,

    frontend -> compile -> transforms -> executors -> ops -> runtime -> core

a file may include and call its own layer and any layer below it, never one above. The layers are the
folders src/core, src/runtime, src/ops, src/executors, src/transforms and src/compile (a file's layer is
the first folder of its path under src/). The public headers in include/thunder/ are the API every layer
implements a part of, so they count as no layer. The frontends, tools/ (the CLI) and python/ (the
thunder_c extension, python/thunder_c/csrc/), sit on top: they may include and call anything, and are
not checked; nothing in src/ may include or call them.

Run it from anywhere (CI runs it in scripts/test.sh right after the release build):

    python3 scripts/check_layers.py [--root DIR] [--objects BUILD_DIR]

Includes (always): one line per upward #include of a file under src/,
`file:line: <layer> includes "<header>" (<layer>)`; a header is placed by its path (relative to src/,
to include/, or to the including file's folder), and one that resolves into python/ or tools/, or that
exists only there, is the frontend's.
Calls (--objects BUILD_DIR, a configured and built CMake tree): runs `nm` on the library's object files
(BUILD_DIR/CMakeFiles/thunder_obj.dir/src/...) and on the frontends' (BUILD_DIR/CMakeFiles/*.dir/tools/,
BUILD_DIR/python/CMakeFiles/*.dir/...), and prints one line per symbol a library object leaves undefined
that only objects of higher layers (frontends included) define, `file: <layer> uses <symbol> (<layer>:
file, ...)`; a symbol that some object of the same or a lower layer defines too is not an upward use.
Then a count of each; exits 1 when anything was found, 0 otherwise (2 on bad usage, or when --objects
finds no object files).
"""
import argparse
import pathlib
import re
import subprocess
import sys

LAYERS = ["core", "runtime", "ops", "executors", "transforms", "compile"]
FRONTEND = "frontend"
FRONTEND_DIRS = ("python", "tools")  # top-level folders of the repository
ORDER = LAYERS + [FRONTEND]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".c", ".h", ".def")


def layer_of(path):
    """The layer of a path relative to src/ ("ops/torch/nn.c" -> "ops"), or None."""
    parts = pathlib.PurePosixPath(path).parts
    return parts[0] if parts and parts[0] in LAYERS else None


def rank(layer):
    return ORDER.index(layer)


def frontend_headers(root):
    """The names (basenames) of the headers the frontends hold."""
    names = set()
    for d in FRONTEND_DIRS:
        if (root / d).is_dir():
            names.update(f.name for f in (root / d).rglob("*") if f.suffix in (".h", ".def") and f.is_file())
    return names


def header_layer(root, rel, header, front_names):
    """The layer of `header` included by src/<rel>: a layer of src/, FRONTEND, or None (a public
    header, a system header, something outside the repository)."""
    src = root / "src"
    here = (src / rel).parent
    candidates = [here / header, src / header, root / "include" / header]
    for c in candidates:
        try:
            c = c.resolve()
        except OSError:
            continue
        if not c.is_file():
            continue
        try:
            top = c.relative_to(root.resolve()).parts
        except ValueError:
            return None
        if top and top[0] in FRONTEND_DIRS:
            return FRONTEND
        if top and top[0] == "src":
            return layer_of(pathlib.PurePosixPath(*top[1:]).as_posix())
        return None
    # not found next to the file, under src/ or include/: by its spelling
    parts = pathlib.PurePosixPath(header).parts
    if parts and parts[0] in FRONTEND_DIRS or "csrc" in parts:
        return FRONTEND
    if layer_of(header):
        return layer_of(header)
    if pathlib.PurePosixPath(header).name in front_names:
        return FRONTEND
    return None


def upward_includes(root):
    src = root / "src"
    front_names = frontend_headers(root)
    for f in sorted(src.rglob("*")):
        if f.suffix not in SOURCE_SUFFIXES or not f.is_file():
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
            if header.startswith("thunder/"):
                continue  # the public API: no layer
            theirs = header_layer(root, rel, header, front_names)
            if theirs is not None and rank(theirs) > rank(mine):
                yield f"src/{rel}:{n}: {mine} includes \"{header}\" ({theirs})"


def library_objects(build):
    """(source path relative to src/, object path) of every object file of the library under
    BUILD/CMakeFiles/<target>.dir/src/: thunder_obj's, else the first target that has any."""
    targets = sorted((build / "CMakeFiles").glob("*.dir"), key=lambda t: (t.name != "thunder_obj.dir", t.name))
    for target in targets:
        objs = sorted(p for p in (target / "src").rglob("*.o") if p.is_file())
        if objs:
            return [(o.relative_to(target / "src").as_posix()[: -len(".o")], o) for o in objs]
    return []


def frontend_objects(build):
    """(source path relative to the repository, object path) of the frontends' object files: the CLI's
    (BUILD/CMakeFiles/<target>.dir/tools/...) and the Python extension's (BUILD/python/CMakeFiles/...)."""
    out = []
    for target in sorted((build / "CMakeFiles").glob("*.dir")):
        for o in sorted((target / "tools").rglob("*.o")):
            out.append(("tools/" + o.relative_to(target / "tools").as_posix()[: -len(".o")], o))
    for target in sorted((build / "python" / "CMakeFiles").glob("*.dir")):
        for o in sorted(target.rglob("*.o")):
            out.append(("python/" + o.relative_to(target).as_posix()[: -len(".o")], o))
    return out


def nm_symbols(obj):
    """(defined, undefined): the global symbols obj defines and those it leaves undefined."""
    out = subprocess.run(["nm", "-P", str(obj)], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in ("U", "w", "v"):
            undefined.add(name)
        elif kind.isupper():  # lower case: local (static) symbols
            defined.add(name)
    return defined, undefined


def upward_calls(build):
    objs = library_objects(build)
    if not objs:
        print(f"check_layers.py: no object files under {build}/CMakeFiles/*.dir/src/ (build first)", file=sys.stderr)
        raise SystemExit(2)
    info = []
    definers = {}  # symbol -> [(layer, file)]
    for src, obj in objs:
        layer = layer_of(src)
        if layer is None:
            continue
        defined, undefined = nm_symbols(obj)
        info.append((src, layer, undefined))
        for s in defined:
            definers.setdefault(s, []).append((layer, f"src/{src}"))
    for path, obj in frontend_objects(build):
        defined, _ = nm_symbols(obj)
        for s in defined:
            definers.setdefault(s, []).append((FRONTEND, path))
    for src, layer, undefined in info:
        mine = rank(layer)
        for s in sorted(undefined):
            where = definers.get(s)
            if not where or any(rank(l) <= mine for l, _ in where):
                continue
            names = ", ".join(f for _, f in sorted(where))
            yield f"src/{src}: {layer} uses {s} ({'/'.join(sorted({l for l, _ in where}))}: {names})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1],
                    help="the repository (default: the one this script is in)")
    ap.add_argument("--objects", type=pathlib.Path, metavar="BUILD_DIR",
                    help="also check the calls between the object files of the build tree there (nm)")
    args = ap.parse_args()
    root = args.root.resolve()
    order = " <- ".join(reversed(ORDER))
    includes = list(upward_includes(root))
    for line in includes:
        print(line)
    print(f"{len(includes)} upward include{'s' if len(includes) != 1 else ''} across the layers ({order})")
    calls = []
    if args.objects is not None:
        build = args.objects if args.objects.is_absolute() else pathlib.Path.cwd() / args.objects
        calls = list(upward_calls(build))
        for line in calls:
            print(line)
        print(f"{len(calls)} upward use{'s' if len(calls) != 1 else ''} of symbols across the layers ({order})")
    return 1 if includes or calls else 0


if __name__ == "__main__":
    sys.exit(main())
