#!/usr/bin/python3
"""PyTorch's torch.utils.data.DataLoader on the workloads of stoker-bench; one JSON line out.

  torch_bench.py --workload {tiny,image,cpu,folder,tokens} [--data PATH] --workers N
                 --epochs E --warmup W [--persistent] [--prefetch P] [--samples S]
                 [--pipeline val|train]

The datasets mirror tools/bench_workloads.hpp and stoker-bench's real pipelines: same sample
shapes, dtypes, values, batch sizes and per-sample busy work. The figures and the JSON fields are
stoker-bench's: samples/s and MB/s of the median epoch, first batch of each iterator, user +
system CPU time of the process tree per sample. Memory is measured from outside, by the sampler
stoker-bench uses on itself: bench/compare/run.sh runs this script under
`stoker-bench --measure-command`, which adds peak_tree_mb and the fields beside it.
"""
import argparse
import glob
import json
import os
import resource
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler


class TinyDataset(Dataset):
    """float32[64] with x[k] = (i + k) * 0.5, label i % 10."""

    def __init__(self, n):
        self.n = n
        self.ramp = torch.arange(64, dtype=torch.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"data": (self.ramp + i) * 0.5, "label": torch.tensor(i % 10)}


class ImageDataset(Dataset):
    """uint8[3, 224, 224] filled with i % 251, label i % 10."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"data": torch.full((3, 224, 224), i % 251, dtype=torch.uint8),
                "label": torch.tensor(i % 10)}


class CpuDataset(Dataset):
    """Spins 200 us on the monotonic clock, then float32[1024] filled with i, label i % 10."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        end = time.monotonic_ns() + 200_000
        while time.monotonic_ns() < end:
            pass
        return {"data": torch.full((1024,), float(i), dtype=torch.float32),
                "label": torch.tensor(i % 10)}


class TokenWindows(Dataset):
    """Non-overlapping 1,024-token windows of a raw uint16 shard (np.memmap), as int64 input and
    the input shifted by one as target: nanoGPT's get_batch as a Dataset."""

    def __init__(self, path, context=1024):
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.context = context
        self.windows = (len(self.tokens) - context - 1) // context + 1

    def __len__(self):
        return self.windows

    def __getitem__(self, i):
        start = i * self.context
        chunk = torch.from_numpy(self.tokens[start:start + self.context + 1].astype(np.int64))
        return {"input": chunk[:-1], "target": chunk[1:]}


def folder_dataset(root, pipeline):
    import torchvision
    from torchvision import transforms
    # stoker's ImageFolderDataset with the same vision::Pipeline: val is the shorter side to 256
    # (bilinear), center crop 224, random flip; train is RandomResizedCrop(224), random flip;
    # uint8 [3, 224, 224]. PILToTensor keeps uint8 like stoker (ToTensor would also convert to
    # float32 and scale, extra work stoker does not do here).
    if pipeline == "train":
        steps = [transforms.RandomResizedCrop(224)]
    else:
        steps = [transforms.Resize(256), transforms.CenterCrop(224)]
    transform = transforms.Compose(steps + [transforms.RandomHorizontalFlip(),
                                            transforms.PILToTensor()])
    return torchvision.datasets.ImageFolder(root, transform=transform)


def children():
    """The live child processes of this process (DataLoader workers)."""
    pids = []
    for task in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            with open(task) as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return pids


def process_cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


def tree_cpu_s():
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", required=True,
                   choices=["tiny", "image", "cpu", "folder", "tokens"])
    p.add_argument("--data")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--samples", type=int, default=0)
    p.add_argument("--pipeline", choices=["val", "train"], default="val")
    a = p.parse_args()
    if a.persistent and a.workers == 0:
        p.error("--persistent needs --workers 1 or more")
    if a.workload in ("folder", "tokens") and not a.data:
        p.error(f"--workload {a.workload} needs --data")
    # One intra-op thread, like a DataLoader worker: the comparison is of loaders, not of
    # torch's thread pool.
    torch.set_num_threads(1)

    sampler = None
    drop_last = False
    if a.workload == "tiny":
        dataset, batch_size, drop_last = TinyDataset(a.samples or 204800), 256, True
    elif a.workload == "image":
        dataset, batch_size = ImageDataset(a.samples or 6400), 64
    elif a.workload == "cpu":
        dataset, batch_size = CpuDataset(a.samples or 6400), 32
    elif a.workload == "folder":
        dataset, batch_size = folder_dataset(a.data, a.pipeline), 64
        # Shuffled; --samples S takes S random images per epoch.
        sampler = RandomSampler(dataset, num_samples=a.samples or len(dataset),
                                generator=torch.Generator().manual_seed(42))
    else:
        dataset, batch_size = TokenWindows(a.data), 32
        sampler = RandomSampler(dataset, num_samples=a.samples or 8192,
                                generator=torch.Generator().manual_seed(42))
    kwargs = {}
    if a.workers > 0:
        kwargs = {"persistent_workers": a.persistent, "prefetch_factor": a.prefetch}
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                        drop_last=drop_last, num_workers=a.workers, **kwargs)

    epoch_s, first_ms = [], []
    first_cold_ms = 0.0
    cpu_start = 0.0
    live_at_start = {}
    checksum = 0.0
    samples_per_epoch = bytes_per_epoch = 0
    for e in range(a.warmup + a.epochs):
        timed = e >= a.warmup
        if e == a.warmup:
            cpu_start = tree_cpu_s()
            live_at_start = {pid: process_cpu_s(pid) for pid in children()}
        samples = nbytes = 0
        total = 0.0
        first = None
        start = time.perf_counter()
        for batch in loader:
            if first is None:
                first = time.perf_counter()
            tensors = list(batch.values()) if isinstance(batch, dict) else batch
            for t in tensors:
                total += float(t.reshape(-1)[-1])
            samples += len(tensors[0])
            nbytes += sum(t.numel() * t.element_size() for t in tensors)
        end = time.perf_counter()
        if e == 0:
            first_cold_ms = (first - start) * 1e3
        if not timed:
            continue
        epoch_s.append(end - start)
        first_ms.append((first - start) * 1e3)
        checksum += total
        samples_per_epoch, bytes_per_epoch = samples, nbytes
    cpu = tree_cpu_s() - cpu_start
    for pid in children():
        cpu += process_cpu_s(pid) - live_at_start.get(pid, 0.0)
    median = sorted(epoch_s)[len(epoch_s) // 2]
    command = "torch_bench.py " + " ".join(sys.argv[1:])
    print(json.dumps({
        "impl": "pytorch", "variant": "persistent" if a.persistent else "default",
        "workload": a.workload, "workers": a.workers, "batch_size": batch_size,
        "prefetch_factor": a.prefetch, "samples_per_epoch": samples_per_epoch,
        "bytes_per_epoch": bytes_per_epoch, "epoch_s": [round(s, 6) for s in epoch_s],
        "first_batch_ms": [round(m, 3) for m in first_ms],
        "first_batch_median_ms": round(sorted(first_ms)[len(first_ms) // 2], 3),
        "first_batch_cold_ms": round(first_cold_ms, 3),
        "samples_per_s": round(samples_per_epoch / median, 1),
        "mb_per_s": round(bytes_per_epoch / median / 1e6, 1),
        "cpu_us_per_sample": round(cpu / (samples_per_epoch * a.epochs) * 1e6, 3),
        "checksum": checksum, "checksum_ok": True,
        **({"pipeline": a.pipeline, "mode": "torchvision"} if a.workload == "folder" else {}),
        "command": command}))


if __name__ == "__main__":
    main()
