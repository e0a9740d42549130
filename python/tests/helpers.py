"""What the tests share: comparing batches with torch's, small datasets."""

import collections

import numpy as np
import torch


def assert_same(ours, theirs, path="batch"):
    """The same structure (types included), and tensors of the same dtype, shape and values."""
    assert type(ours) is type(theirs), "{}: {} vs torch's {}".format(path, type(ours),
                                                                        type(theirs))
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype, "{}: dtype {} vs {}".format(path, ours.dtype,
                                                                        theirs.dtype)
        assert ours.shape == theirs.shape, "{}: shape {} vs {}".format(path, ours.shape,
                                                                        theirs.shape)
        assert torch.equal(ours, theirs), "{}: values differ".format(path)
    elif isinstance(theirs, collections.abc.Mapping):
        assert list(ours.keys()) == list(theirs.keys()), "{}: keys {} vs {}".format(
            path, list(ours.keys()), list(theirs.keys()))
        for key in theirs:
            assert_same(ours[key], theirs[key], "{}[{!r}]".format(path, key))
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), "{}: length {} vs {}".format(path, len(ours),
                                                                       len(theirs))
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, "{}[{}]".format(path, i))
    else:
        assert ours == theirs, "{}: {!r} vs {!r}".format(path, ours, theirs)


def collect(loader):
    """Every batch of an epoch, cloned: a batch's tensors hold a ring slot until freed."""
    import stoker
    return [stoker.clone(b) for b in loader]


class ListDataset(torch.utils.data.Dataset):
    """Sample i is make(i)."""

    def __init__(self, n, make):
        self.n = n
        self.make = make

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(i)


def vector_dataset(n=100, dim=8):
    data = np.arange(n * dim, dtype=np.float32).reshape(n, dim)
    return ListDataset(n, lambda i: {"x": data[i], "y": int(i % 10)})
