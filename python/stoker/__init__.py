"""stoker: torch.utils.data.DataLoader's API on a C++ engine of fork()ed workers that write
whole batches into shared memory.

    import stoker
    loader = stoker.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)

is the one-line change from torch.utils.data.DataLoader: the same arguments, the same batches
(dicts, lists, namedtuples of torch tensors, as default_collate builds them), without pickling
and without a copy. docs/python.md says what differs.
"""

import torch  # noqa: F401  (before the extension: it hands batches to torch through DLPack)

from . import _stoker
from . import vision
from ._worker import WorkerInfo, get_worker_info
from .dataloader import DataLoader, clone
from .datasets import (ChainDataset, ConcatDataset, FashionMNIST, ImageFolder, ImageList, MNIST,
                       MdsDataset, MixtureDataset, NpyDataset, Subset, TFRecordDataset,
                       TokenDataset, WebDataset, expand_shards, random_split)
from .errors import (CollateError, DecodeError, Error, FormatError, HeldBatchesTimeout,
                     LoaderTimeout, MemoryBudgetError, PinnedMemoryError, WorkerCrashed,
                     WorkerException)

LoaderStats = _stoker.LoaderStats
Diagnosis = _stoker.Diagnosis
diagnose = _stoker.diagnose
sample_seed = _stoker.sample_seed

__all__ = [
    "DataLoader", "clone", "get_worker_info", "WorkerInfo", "vision", "sample_seed", "diagnose",
    "LoaderStats", "Diagnosis",
    "ImageFolder", "ImageList", "MNIST", "FashionMNIST", "NpyDataset", "TokenDataset",
    "WebDataset", "TFRecordDataset", "MdsDataset", "Subset", "ConcatDataset", "ChainDataset",
    "MixtureDataset", "random_split", "expand_shards",
    "Error", "WorkerCrashed", "WorkerException", "CollateError", "LoaderTimeout",
    "HeldBatchesTimeout", "MemoryBudgetError", "PinnedMemoryError", "DecodeError",
    "FormatError",
]
