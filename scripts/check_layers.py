#!/usr/bin/env python3
"""Check the layer rule of docs/design.md: no file includes a higher layer.

Every quoted include ("dir/file.h") of a file under src/ names the layer it
reaches by its first path component.  A layer may include its own files and
those of any layer below it; a layer on the same rank as another (api,
master and conductor) may not include the other.  include/mooncake/ (the public headers)
may include only each other, python/ only the public headers and its own
files.  A layer's meson.build may not compile another layer's file
('../master/alloc.c' into the store).  tools/, bench/ and tests/ sit on top and are not checked.

A directory under src/ that is not in LAYERS is an error too, so a new room
gets its place in the figure before it gets code.

Usage: check_layers.py [ROOT] [--stamp FILE]
ROOT defaults to the repository holding this file; --stamp writes FILE when
the tree passes (the build's default target, so `ninja` fails on a crossing).
Prints each violation as "file:line: includes X (layer L) from layer M" and
exits 1 when there is any, 0 otherwise.
"""
import os
import re
import sys

# rank of each layer under src/; higher ranks may include lower ones
LAYERS = {
    "base": 0,
    "meta": 1,
    "mem": 2,
    "transport": 3,
    "te": 4,
    "store": 5,
    "master": 6,
    "api": 6,
    "conductor": 6,
    "p2p": 5,
}
PUBLIC = "mooncake"  # include/mooncake/: reachable from everywhere

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1)


def sources(directory):
    for dirpath, _, files in os.walk(directory):
        for name in sorted(files):
            if name.endswith((".c", ".h", ".h.in")):
                yield os.path.join(dirpath, name)


def check(root):
    errors = []
    src = os.path.join(root, "src")
    for entry in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, entry)) and entry not in LAYERS:
            errors.append(f"src/{entry}/: not a layer of docs/design.md "
                          f"(add it to LAYERS in scripts/check_layers.py)")
    for layer, rank in LAYERS.items():
        for path in sources(os.path.join(src, layer)):
            rel = os.path.relpath(path, root)
            for lineno, inc in includes(path):
                if "/" not in inc:
                    continue  # a file of its own directory
                target = inc.split("/", 1)[0]
                if target == PUBLIC or target == layer:
                    continue
                if target not in LAYERS:
                    errors.append(f"{rel}:{lineno}: includes {inc}: unknown layer {target}")
                elif LAYERS[target] >= rank:
                    errors.append(f"{rel}:{lineno}: includes {inc} (layer {target}) "
                                  f"from layer {layer}")
        build = os.path.join(src, layer, "meson.build")
        if os.path.exists(build):
            rel = os.path.relpath(build, root)
            for lineno, line in enumerate(open(build, encoding="utf-8"), 1):
                for target in re.findall(r"'\.\./([a-z_]+)/", line):
                    if target not in LAYERS or LAYERS[target] >= rank:
                        errors.append(f"{rel}:{lineno}: compiles a file of layer {target} "
                                      f"into layer {layer}")
    for top in ("include/mooncake", "python"):
        for path in sources(os.path.join(root, top)):
            rel = os.path.relpath(path, root)
            for lineno, inc in includes(path):
                target = inc.split("/", 1)[0] if "/" in inc else None
                if target is None or target == PUBLIC:
                    continue
                errors.append(f"{rel}:{lineno}: includes {inc}: {top}/ may use only "
                              f"the public headers (include/mooncake/)")
    return errors


def main():
    args = sys.argv[1:]
    stamp = None
    if "--stamp" in args:
        i = args.index("--stamp")
        stamp = args[i + 1]
        del args[i:i + 2]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} include(s) cross the layer rule "
              f"(docs/design.md, Layers)")
        return 1
    if stamp:
        with open(stamp, "w") as f:
            f.write("layers ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
