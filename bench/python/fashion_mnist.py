#!/usr/bin/python3
"""A short real training loop on Fashion-MNIST (Debian's dataset-fashion-mnist) with
torch.utils.data.DataLoader and with stoker.DataLoader: the same Python dataset, model, seed
and schedule; each trains from the same initial weights and is tested on the 10,000 test
images. Prints each loader's test accuracy, time per epoch and the samples/s of its training
epochs, then whether the accuracies agree within one point.

  /usr/bin/python3 bench/python/fashion_mnist.py [--epochs 3] [--workers 2] [--batch 128]
      [--build build/release] [--data /usr/share/datasets/fashion-mnist] [--native]

--native adds a third run with stoker.FashionMNIST (the IDX files read in C++, no Python per
sample). The two runs use different shuffle orders (torch's RandomSampler, stoker's seeded
shuffle), so their accuracies differ by training noise only.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


class FashionMNIST(torch.utils.data.Dataset):
    """The IDX files in memory; a sample is (float32 [1, 28, 28] in [0, 1], int label)."""

    def __init__(self, root, train):
        prefix = "train" if train else "t10k"
        self.images = read_idx(os.path.join(root, prefix + "-images-idx3-ubyte.gz"))
        self.labels = read_idx(os.path.join(root, prefix + "-labels-idx1-ubyte.gz"))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return (self.images[i][None].astype(np.float32) / 255, int(self.labels[i]))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def train(name, make_loader, train_set, test_set, epochs, initial):
    torch.manual_seed(0)
    model = Net()
    model.load_state_dict(initial)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = make_loader(train_set, True)
    times = []
    samples = 0
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            samples += len(y)
        times.append(time.perf_counter() - start)
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in make_loader(test_set, False):
            correct += int((model(x).argmax(1) == y).sum())
    accuracy = 100.0 * correct / len(test_set)
    print("{:32} test accuracy {:5.2f}%   {:5.1f} s/epoch   {:7.0f} samples/s".format(
        name, accuracy, sum(times) / len(times), samples / sum(times)), flush=True)
    return accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--native", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(ROOT, args.build, "python"))
    import stoker

    torch.manual_seed(0)
    initial = Net().state_dict()
    train_set, test_set = FashionMNIST(args.data, True), FashionMNIST(args.data, False)
    print("Fashion-MNIST: {} training and {} test images, batch {}, {} workers, {} epochs, "
          "Adam 1e-3; command: {}".format(len(train_set), len(test_set), args.batch,
                                         args.workers, args.epochs, " ".join(sys.argv)))

    def torch_loader(ds, shuffle):
        return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=shuffle,
                                           num_workers=args.workers,
                                           generator=torch.Generator().manual_seed(1))

    def stoker_loader(ds, shuffle):
        return stoker.DataLoader(ds, batch_size=args.batch, shuffle=shuffle,
                                 num_workers=args.workers, seed=1)

    results = {
        "torch.utils.data.DataLoader": train("torch.utils.data.DataLoader", torch_loader,
                                             train_set, test_set, args.epochs, initial),
        "stoker.DataLoader": train("stoker.DataLoader", stoker_loader, train_set, test_set,
                                   args.epochs, initial),
    }
    if args.native:
        results["stoker.FashionMNIST (C++)"] = train(
            "stoker.DataLoader + stoker.FashionMNIST", stoker_loader,
            stoker.FashionMNIST(args.data, True), stoker.FashionMNIST(args.data, False),
            args.epochs, initial)
    spread = max(results.values()) - min(results.values())
    print("accuracies within 1 point: {} (spread {:.2f})".format("yes" if spread <= 1.0 else "NO",
                                                                 spread))


if __name__ == "__main__":
    main()
