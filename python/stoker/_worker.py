"""What runs in a stoker worker process before its first sample, and get_worker_info().

The extension calls _start() once per worker (after the fork hooks have repaired the
interpreter): it records the worker's info, makes torch.utils.data.get_worker_info() answer
too (so datasets written for torch shard themselves the same way), seeds Python's, torch's and
NumPy's generators as torch's workers are seeded, limits torch to one thread as torch's workers
do, then runs worker_init_fn.
"""

import os
import random
import sys

from . import _stoker


class WorkerInfo:
    """What get_worker_info() returns in a worker: id, num_workers, seed, dataset (read-only)."""

    __slots__ = ("id", "num_workers", "seed", "dataset", "_frozen")

    def __init__(self, id, num_workers, seed, dataset):
        self.id = id
        self.num_workers = num_workers
        self.seed = seed
        self.dataset = dataset
        self._frozen = True

    def __setattr__(self, key, value):
        if getattr(self, "_frozen", False):
            raise RuntimeError("Cannot assign attributes to {} objects".format(
                self.__class__.__name__))
        object.__setattr__(self, key, value)

    def __repr__(self):
        return "WorkerInfo(id={}, num_workers={}, seed={}, dataset={!r})".format(
            self.id, self.num_workers, self.seed, self.dataset)


_info = None
_info_pid = None


def get_worker_info():
    """In a worker of a stoker.DataLoader: its WorkerInfo (id, num_workers, seed, dataset);
    None in the main process, as torch.utils.data.get_worker_info()."""
    if _info is not None and _info_pid == os.getpid():
        return _info
    raw = _stoker.worker_info()
    if raw is None:
        return None
    worker_id, num_workers, seed, _pid = raw
    return WorkerInfo(worker_id, num_workers, seed, None)


def _torch_worker_module():
    try:
        from torch.utils.data._utils import worker
        return worker
    except Exception:
        return None


def _seed_torch(torch, seed):
    """torch.manual_seed(seed) as a worker needs it: the CPU generator, and CUDA's where this
    process has initialized CUDA. torch.manual_seed itself queues a CUDA seed for later when
    CUDA is not initialized, recording the call's stack with traceback.format_stack(), which
    reads the source files of the stack (about 2 ms of a new worker's first batch); a forked
    worker cannot use the parent's CUDA context, and one that initializes CUDA itself seeds
    it with torch.cuda.manual_seed_all(get_worker_info().seed)."""
    torch.random.default_generator.manual_seed(seed)
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and cuda.is_initialized():
        cuda.manual_seed_all(seed)


def _start(worker_id, num_workers, seed, dataset, worker_init_fn):
    global _info, _info_pid
    _info = WorkerInfo(worker_id, num_workers, seed, dataset)
    _info_pid = os.getpid()
    random.seed(seed)
    try:
        import torch
        _seed_torch(torch, seed)
        # torch's workers call set_num_threads(1) unconditionally; where the count is already
        # 1 (one physical core) that call still rebuilds torch's thread pool in the new
        # process, about 7 ms of the first batch on the project's 2-core machine.
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)
    except ImportError:
        pass
    try:
        import numpy
        numpy.random.seed(seed % (2 ** 32))
    except ImportError:
        pass
    torch_worker = _torch_worker_module()
    if torch_worker is not None:
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    if worker_init_fn is not None:
        worker_init_fn(worker_id)


def _collate(collate_fn, value):
    """collate_fn(value) in a worker, with torch's worker info hidden: torch's default_collate
    would otherwise put each batch into a new shared-memory file of its own, which stoker
    copies into its ring anyway."""
    torch_worker = _torch_worker_module()
    saved = None if torch_worker is None else torch_worker._worker_info
    if saved is not None:
        torch_worker._worker_info = None
    try:
        return collate_fn(value)
    finally:
        if saved is not None:
            torch_worker._worker_info = saved
