#!/usr/bin/python3
"""torch.utils.data.DataLoader and stoker.DataLoader side by side on the same Python datasets,
in one run, interleaved; every measurement in a fresh interpreter.

  /usr/bin/python3 bench/python/loaders.py [--workloads small,image,folder] [--workers 0,2,4]
      [--rounds 3] [--build build/release] [--data /tmp/stoker-bench-python] [--json FILE]

Workloads (each the same Dataset class for both loaders):
  small   a dict {"x": float32[64], "y": int}, batch 256 (102,400 samples an epoch)
  image   a uint8[3, 224, 224] array (150 KB), batch 64 (4,096 samples an epoch)
  folder  an ImageFolder recipe, Resize(256), CenterCrop(224), ToTensor(), Normalize(ImageNet):
          torchvision.datasets.ImageFolder + torchvision.transforms against stoker.ImageFolder +
          stoker.vision (decoding in C++), batch 64, over 640 generated JPEGs of 256-500 px
          (bench/compare/gen_data.py); the first batches of both are compared pixel for pixel

Per run: samples/s of the second epoch (after its first batch); the time to the first batch of
a new loader's first iterator and of a later epoch's iterator (fresh workers either way); the
peak sum of PSS of the main process and its workers, read from /proc every 250 ms while batches
arrive. The table gives the median of the rounds and stoker / torch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SIZES = {"small": (256, 102400), "image": (64, 4096), "folder": (64, 640)}


# ---- one run, in its own interpreter --------------------------------------------------------

def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/{}/stat".format(entry)) as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(entry))
    return out


def pss_mb(pid):
    try:
        with open("/proc/{}/smaps_rollup".format(pid)) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_pss_mb():
    me = os.getpid()
    return pss_mb(me) + sum(pss_mb(c) for c in children(me))


def make_dataset(workload, data_dir, loader_name):
    import numpy as np
    import torch

    class Small(torch.utils.data.Dataset):
        def __init__(self, n):
            self.x = np.random.default_rng(0).random((n, 64), dtype=np.float32)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"x": self.x[i], "y": int(i % 10)}

    class Images(torch.utils.data.Dataset):
        def __init__(self, n):
            self.n = n
            self.pool = np.random.default_rng(0).integers(0, 256, (64, 3, 224, 224),
                                                          dtype=np.uint8)

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return self.pool[i % 64]

    batch, n = SIZES[workload]
    if workload == "small":
        return Small(n), batch
    if workload == "image":
        return Images(n), batch
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    root = os.path.join(data_dir, "images")
    if loader_name == "torch":
        import torchvision
        import torchvision.transforms as T
        return torchvision.datasets.ImageFolder(root, transform=T.Compose([
            T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(mean, std)])), batch
    import stoker
    import stoker.vision as V
    return stoker.ImageFolder(root, transform=V.Compose([
        V.Resize(256), V.CenterCrop(224), V.ToTensor(), V.Normalize(mean, std)])), batch


def checksum(batch):
    import torch
    first = (batch["x"] if isinstance(batch, dict) else
             batch[0] if isinstance(batch, list) else batch)
    return float(first.reshape(first.shape[0], -1)[:, :8].double().sum())


def run_one(loader_name, workload, workers, data_dir):
    import torch
    if loader_name == "stoker":
        import stoker
        Loader = stoker.DataLoader
    else:
        Loader = torch.utils.data.DataLoader
    dataset, batch = make_dataset(workload, data_dir, loader_name)
    loader = Loader(dataset, batch_size=batch, num_workers=workers)
    result = {"loader": loader_name, "workload": workload, "workers": workers}
    peak = tree_pss_mb()
    total = 0.0
    for epoch in range(2):
        start = time.perf_counter()
        it = iter(loader)
        b = next(it)
        first = time.perf_counter() - start
        result["first_batch_ms" if epoch == 0 else "fresh_iterator_ms"] = first * 1000
        total += checksum(b)
        del b
        samples = 0
        last = time.perf_counter()
        steady = last
        for b in it:
            samples += len(b[0]) if isinstance(b, list) else len(b["x"]) if isinstance(
                b, dict) else len(b)
            total += checksum(b)
            del b
            now = time.perf_counter()
            if now - last >= 0.25:
                peak = max(peak, tree_pss_mb())
                last = now
        if epoch == 1:
            result["samples_per_s"] = samples / (time.perf_counter() - steady)
        del it
    result["peak_pss_mb"] = peak
    result["checksum"] = round(total, 3)
    print(json.dumps(result))


def pixels_identical(data_dir, build):
    """The first batch of torchvision's ImageFolder recipe and stoker's, compared."""
    sys.path.insert(0, os.path.join(ROOT, build, "python"))
    import torch
    theirs, batch = make_dataset("folder", data_dir, "torch")
    ours, _ = make_dataset("folder", data_dir, "stoker")
    a = next(iter(torch.utils.data.DataLoader(theirs, batch_size=batch)))
    import stoker
    b = next(iter(stoker.DataLoader(ours, batch_size=batch)))
    same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    return same, float((a[0] - b[0]).abs().max())


# ---- the driver ------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="small,image,folder")
    parser.add_argument("--workers", default="0,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--data", default="/tmp/stoker-bench-python")
    parser.add_argument("--json")
    parser.add_argument("--one", nargs=3, metavar=("LOADER", "WORKLOAD", "WORKERS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, os.path.join(ROOT, args.build, "python"))
        run_one(args.one[0], args.one[1], int(args.one[2]), args.data)
        return

    workloads = args.workloads.split(",")
    workers = [int(w) for w in args.workers.split(",")]
    if "folder" in workloads:
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compare", "gen_data.py"),
                        args.data, "--images", str(SIZES["folder"][1]), "--tokens", "0"],
                       check=True)
    runs = []
    started = time.time()
    for r in range(args.rounds):
        for workload in workloads:
            for w in workers:
                order = ["torch", "stoker"] if r % 2 == 0 else ["stoker", "torch"]
                for name in order:
                    out = subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--one", name, workload,
                         str(w), "--build", args.build, "--data", args.data],
                        capture_output=True, text=True, cwd=ROOT)
                    if out.returncode != 0:
                        sys.exit("run failed: {} {} {}\n{}".format(name, workload, w,
                                                                   out.stderr))
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    result["round"] = r
                    runs.append(result)
                    print("round {} {:6} {:6} workers={} {:>9.0f} samples/s  first {:6.1f} ms"
                          "  fresh {:6.1f} ms  peak {:6.0f} MB".format(
                              r, workload, name, w, result["samples_per_s"],
                              result["first_batch_ms"], result["fresh_iterator_ms"],
                              result["peak_pss_mb"]), file=sys.stderr, flush=True)

    def median(workload, w, name, key):
        return statistics.median(x[key] for x in runs if x["workload"] == workload and
                                 x["workers"] == w and x["loader"] == name)

    print("\n{} rounds, {:.0f} s, on {} CPUs; command: {}".format(
        args.rounds, time.time() - started, os.cpu_count(), " ".join(sys.argv)))
    header = ("| workload | workers | torch samples/s | stoker samples/s | ratio | first batch "
              "torch / stoker (ms) | ratio | fresh iterator torch / stoker (ms) | ratio | peak "
              "PSS torch / stoker (MB) | ratio |")
    print(header)
    print("| --- " * 11 + "|")
    for workload in workloads:
        for w in workers:
            row = [median(workload, w, n, k) for k in ("samples_per_s", "first_batch_ms",
                                                       "fresh_iterator_ms", "peak_pss_mb")
                   for n in ("torch", "stoker")]
            print("| {} | {} | {:.0f} | {:.0f} | {:.2f}x | {:.1f} / {:.1f} | {:.2f}x | "
                  "{:.1f} / {:.1f} | {:.2f}x | {:.0f} / {:.0f} | {:.2f}x |".format(
                      workload, w, row[0], row[1], row[1] / row[0], row[2], row[3],
                      row[3] / row[2], row[4], row[5], row[5] / row[4], row[6], row[7],
                      row[7] / row[6]))
    sums = {}
    for x in runs:
        sums.setdefault((x["workload"], x["workers"]), set()).add(x["checksum"])
    same = all(len(v) == 1 for v in sums.values())
    print("\nthe same data through both loaders (checksums): {}".format("yes" if same else
                                                                        "NO: " + str(sums)))
    if "folder" in workloads:
        identical, diff = pixels_identical(args.data, args.build)
        print("folder: first batch pixel-identical to torchvision's: {} (max |diff| {:g})".format(
            "yes" if identical else "NO", diff))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
