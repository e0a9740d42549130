#!/usr/bin/env python3
"""The layer rule of src/ (docs/architecture.md, "The layout: folders are layers"), checked.

Layers, lowest first: data < os < ipc < {datasets, vision} < loader, with vision below datasets
(datasets decode image fields through it). A file may include headers of its own layer and of
the layers below it, never above. A public header (include/stoker/...) belongs to the layer of
the .cpp that implements it (src/<layer>/.../<name>.cpp); header-only public headers are listed
in HEADER_ONLY below. Public headers are checked by the same rule, so a lower layer cannot
reach a higher one through them either.

Usage: check_layers.py <source dir> (or --self-test). Prints every include against the order and exits 1 if
there is any; exits 2 when a file's layer cannot be told (a new public header must be named
after its .cpp or listed in HEADER_ONLY).
"""

import os
import re
import sys

ORDER = {"data": 0, "os": 1, "ipc": 2, "vision": 3, "datasets": 4, "loader": 5}

# Public headers with no .cpp of the same name: the layer each belongs to, and why.
HEADER_ONLY = {
    "stoker/detail/batch_sink.hpp": "data",  # the builder a produce function writes through
    "stoker/dataset.hpp": "data",          # the dataset concepts
    "stoker/fmt.hpp": "loader",            # fmt formatters of every public type, opted into
    "stoker/stats.hpp": "data",            # plain structs of figures
    "stoker/shards.hpp": "datasets",       # the shard dataset templates
    "stoker/vision.hpp": "vision",         # the umbrella of stoker/vision/
    "stoker/vision/image.hpp": "vision",
    "stoker/data_loader.hpp": "loader",    # DataLoader<D>, over detail/loader_core.hpp
    "stoker/detail/erased_dataset.hpp": "datasets",  # a type-erased dataset (composition)
    "stoker/stoker.hpp": "loader",         # the umbrella header
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def implementing_layers(src):
    """Public header name (stoker/x.hpp) -> layer, from the .cpp files named after headers."""
    found = {}
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        layer = rel.split(os.sep)[0]
        if layer not in ORDER:
            continue
        for name in files:
            if name.endswith(".cpp"):
                found.setdefault(name[:-4], set()).add(layer)
    return found


def layer_of_public(header, by_stem):
    if header in HEADER_ONLY:
        return HEADER_ONLY[header]
    stem = os.path.basename(header)[:-4]
    layers = by_stem.get(stem, set())
    return next(iter(layers)) if len(layers) == 1 else None


def main(argv):
    top = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    src = os.path.join(top, "src")
    include = os.path.join(top, "include")
    by_stem = implementing_layers(src)
    files = []  # (path shown, layer)
    unknown = []
    for root, _dirs, names in os.walk(src):
        layer = os.path.relpath(root, src).split(os.sep)[0]
        if layer not in ORDER:
            continue
        for name in names:
            if name.endswith((".cpp", ".hpp")):
                files.append((os.path.join(root, name), layer))
    for root, _dirs, names in os.walk(include):
        for name in names:
            if not name.endswith(".hpp"):
                continue
            path = os.path.join(root, name)
            header = os.path.relpath(path, include)
            layer = layer_of_public(header, by_stem)
            if layer is None:
                unknown.append(header)
            else:
                files.append((path, layer))
    if unknown:
        for header in sorted(unknown):
            print(f"check_layers: {header} has no .cpp of its name in one layer and is not in "
                  "HEADER_ONLY; name it after its .cpp or list its layer there")
        return 2
    bad = []
    for path, layer in sorted(files):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                first = target.split("/")[0]
                if first in ORDER:
                    to = first
                elif first == "stoker":
                    to = layer_of_public(target, by_stem)
                    if to is None:
                        bad.append(f"{os.path.relpath(path, top)}:{number}: includes {target}, "
                                   "whose layer is unknown")
                        continue
                else:
                    continue  # a header of the same folder, or a third-party one
                if ORDER[to] > ORDER[layer]:
                    bad.append(f"{os.path.relpath(path, top)}:{number}: {layer} includes "
                               f"{target} ({to})")
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the order "
              "data < os < ipc < vision < datasets < loader")
        return 1
    print(f"check_layers: {len(files)} files keep the order data < os < ipc < vision < datasets "
          "< loader")
    return 0


def self_test():
    """The checker fails a tree with an include against the order, and passes one without."""
    import tempfile

    def tree(files):
        top = tempfile.mkdtemp(prefix="stoker-layers-")
        for rel, text in files.items():
            path = os.path.join(top, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return top

    good = {"src/data/tensor.cpp": '#include "stoker/tensor.hpp"\n',
            "include/stoker/tensor.hpp": "",
            "src/loader/options.cpp": '#include "data/x.hpp"\n#include "stoker/options.hpp"\n',
            "include/stoker/options.hpp": '#include "stoker/tensor.hpp"\n'}
    bad_src = dict(good, **{"src/data/x.hpp": '#include "ipc/ring.hpp"\n'})
    bad_public = dict(good, **{"include/stoker/tensor.hpp": '#include "stoker/options.hpp"\n'})
    unknown = dict(good, **{"include/stoker/orphan.hpp": ""})
    results = [main(["", tree(good)]), main(["", tree(bad_src)]), main(["", tree(bad_public)]),
               main(["", tree(unknown)])]
    if results != [0, 1, 1, 2]:
        print(f"check_layers: self-test failed: exit codes {results}, expected [0, 1, 1, 2]")
        return 1
    print("check_layers: self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main(sys.argv))
