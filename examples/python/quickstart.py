#!/usr/bin/python3
"""stoker.DataLoader in place of torch.utils.data.DataLoader: the same Dataset class, the same
arguments, a few epochs of a training-style loop with each loader, then what stoker adds
(stats(), diagnose(), state_dict() for a mid-epoch resume, stoker.clone for kept batches).

  PYTHONPATH=build/release/python /usr/bin/python3 examples/python/quickstart.py \\
      [--workers 2] [--epochs 2] [--samples 20000] [--batch 256]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.utils.data

try:
    import stoker
except ImportError:  # run from a checkout: the build tree's package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "build", "release", "python"))
    import stoker


class Points(torch.utils.data.Dataset):
    """Sample i: a dict of a 64-float feature vector and an int label (a Python dataset, run
    in the workers by either loader)."""

    def __init__(self, n):
        self.features = np.random.default_rng(0).random((n, 64), dtype=np.float32)

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return {"x": self.features[i], "y": int(i % 10)}


def run(name, loader, epochs):
    """A training-style loop: a little work per batch, samples/s per epoch."""
    weights = torch.zeros(64)
    for epoch in range(epochs):
        start = time.perf_counter()
        samples = 0
        for batch in loader:
            x, y = batch["x"], batch["y"]  # float32 [B, 64], int64 [B]
            weights += (x * (y[:, None] + 1)).mean(0)
            samples += len(y)
        took = time.perf_counter() - start
        print("{:6} epoch {}: {} samples, {:.0f} samples/s".format(name, epoch, samples,
                                                                 samples / took))
    return weights


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    dataset = Points(args.samples)

    # The one-line change: the same arguments to either class.
    theirs = torch.utils.data.DataLoader(dataset, batch_size=args.batch,
                                         num_workers=args.workers)
    ours = stoker.DataLoader(dataset, batch_size=args.batch, num_workers=args.workers)
    a = run("torch", theirs, args.epochs)
    b = run("stoker", ours, args.epochs)
    print("the same result from both loaders:", torch.allclose(a, b))

    # What the engine saw in the last epoch, and what limits it.
    stats = ours.stats()
    print("stoker: {} samples in {:.2f} s, the loop waited {:.2f} s for batches".format(
        stats.samples, stats.epoch_seconds, stats.wait_seconds))
    print(ours.diagnose())

    # A checkpoint mid-epoch, resumed by a new loader (with other workers): the next batch.
    shuffled = stoker.DataLoader(dataset, batch_size=args.batch, shuffle=True, seed=7,
                                 num_workers=args.workers)
    it = iter(shuffled)
    for _ in range(3):
        next(it)
    state = shuffled.state_dict()
    expected = stoker.clone(next(it))  # a copy: the batch itself is a view of the ring
    it.close()
    resumed = stoker.DataLoader(dataset, batch_size=args.batch, shuffle=True, seed=7,
                                num_workers=max(0, args.workers - 1))
    resumed.load_state_dict(state)
    print("resumed with the next batch:", torch.equal(next(iter(resumed))["x"], expected["x"]))


if __name__ == "__main__":
    main()
