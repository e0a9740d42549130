"""Default collation in C++ against torch.utils.data.default_collate: every dtype and
container a sample may hold, with and without workers; and a collate_fn, in the worker."""

import collections

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader

import stoker
from helpers import ListDataset, assert_same, collect

Point = collections.namedtuple("Point", ["x", "y"])


class Record(dict):
    """A dict subclass: default_collate rebuilds it with its type."""


class Pair(list):
    """A list subclass."""


NUMPY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64, np.float16,
                np.float32, np.float64]
TORCH_DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                torch.float16, torch.bfloat16, torch.float32, torch.float64]


def numpy_sample(dtype):
    def make(i):
        return np.arange(i, i + 6).reshape(2, 3).astype(dtype)
    return make


def torch_sample(dtype):
    def make(i):
        return (torch.arange(i, i + 6).reshape(2, 3) % 5).to(dtype)
    return make


CASES = {
    "numpy " + np.dtype(d).name: numpy_sample(d) for d in NUMPY_DTYPES
}
CASES.update({"torch " + str(d): torch_sample(d) for d in TORCH_DTYPES})
CASES.update({
    "int": lambda i: i * 1000003,
    "negative int": lambda i: -i,
    "float": lambda i: i / 3,
    "bool": lambda i: i % 2 == 0,
    "numpy scalars": lambda i: (np.float32(i), np.int16(i), np.bool_(i % 2), np.float64(i)),
    "0-d array": lambda i: np.array(i, dtype=np.int32),
    "str": lambda i: "sample-{}".format("x" * i),
    "unicode str": lambda i: "é" * i + "🚀",
    "bytes": lambda i: bytes(range(i % 7)),
    "dict": lambda i: {"image": np.full((3, 4, 4), i, np.uint8), "label": i},
    "int keys": lambda i: {0: i, 7: float(i)},
    "tuple": lambda i: (np.full(2, i, np.float32), i),
    "list": lambda i: [i, i + 1, float(i)],
    "namedtuple": lambda i: Point(np.float32(i), i),
    "OrderedDict": lambda i: collections.OrderedDict([("b", i), ("a", np.int64(i))]),
    "dict subclass": lambda i: Record(v=i),
    "list subclass": lambda i: Pair([i, i * 2]),
    "nested": lambda i: {"a": [{"b": (i, np.ones(2) * i)}, "t{}".format(i)],
                         "p": Point(x={"q": i}, y=[b"z" * i])},
    "empty containers": lambda i: {"d": {}, "l": [], "t": (), "v": i},
    "dict with a tensor and text": lambda i: {"t": torch.full((2,), i), "s": str(i)},
    "non-contiguous": lambda i: np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2] + i,
    "transposed tensor": lambda i: torch.arange(6.0).reshape(2, 3).t() + i,
    "requires_grad": lambda i: torch.ones(3, requires_grad=True) * 1.0,
    "numpy str_": lambda i: np.str_("n{}".format(i)),
})


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_collate_matches_torch(case, num_workers):
    dataset = ListDataset(10, CASES[case])
    theirs = list(TorchLoader(dataset, batch_size=4))
    ours = collect(stoker.DataLoader(dataset, batch_size=4, num_workers=num_workers))
    if case == "requires_grad":
        # torch keeps the graph through torch.stack; a batch in shared memory has none.
        theirs = [t.detach() for t in theirs]
    if case == "numpy str_":
        # default_collate passes numpy's str_ objects through; stoker's text becomes str.
        theirs = [[str(s) for s in batch] for batch in theirs]
    assert_same(ours, theirs)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_no_auto_batching_matches_default_convert(num_workers):
    dataset = ListDataset(5, lambda i: {"a": np.full(2, i), "n": i, "s": "x" * i,
                                        "t": (torch.ones(1) * i, 2.5), "p": Point(i, [i])})
    theirs = list(TorchLoader(dataset, batch_size=None))
    ours = collect(stoker.DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert_same(ours, theirs)


def pad_collate(samples):
    """A collate that combines samples (so it cannot be the default stack)."""
    longest = max(len(s["seq"]) for s in samples)
    seqs = torch.zeros(len(samples), longest, dtype=torch.int64)
    for row, s in enumerate(samples):
        seqs[row, :len(s["seq"])] = torch.as_tensor(s["seq"])
    return {"seq": seqs, "lengths": torch.tensor([len(s["seq"]) for s in samples]),
            "names": [s["name"] for s in samples], "n": len(samples)}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_collate_fn_runs_in_the_worker(num_workers):
    def make(i):
        info = stoker.get_worker_info()
        return {"seq": list(range(i % 5 + 1)), "name": "s{}".format(i),
                "pid": -1 if info is None else info.id}
    dataset = ListDataset(12, make)

    def collate(samples):
        out = pad_collate(samples)
        info = stoker.get_worker_info()
        out["worker"] = -1 if info is None else info.id
        return out
    theirs = list(TorchLoader(dataset, batch_size=4, collate_fn=pad_collate))
    ours = collect(stoker.DataLoader(dataset, batch_size=4, num_workers=num_workers,
                                  collate_fn=collate))
    workers = [b.pop("worker") for b in ours]
    assert_same(ours, theirs)
    if num_workers == 0:
        assert workers == [-1, -1, -1]
    else:
        assert workers == [0, 1, 0]  # batch k is loaded, and collated, by worker k mod 2


def test_default_collate_refuses_what_torch_refuses():
    for sample, text in [
        (None, "found <class 'NoneType'>"),
        (np.array(["a", "b"]), "found <U1"),
        (np.array([object()]), "found object"),
        (object(), "found <class 'object'>"),
    ]:
        dataset = ListDataset(4, lambda i, s=sample: s)
        with pytest.raises(TypeError) as theirs:
            list(TorchLoader(dataset, batch_size=2))
        with pytest.raises(TypeError) as ours:
            list(stoker.DataLoader(dataset, batch_size=2))
        assert text in str(theirs.value)
        assert text in str(ours.value)


def test_unsigned_numpy_arrays_fail_as_in_torch():
    dataset = ListDataset(4, lambda i: np.zeros(3, np.uint16))
    with pytest.raises(TypeError, match="numpy.uint16"):
        list(TorchLoader(dataset, batch_size=2))
    with pytest.raises(TypeError, match="numpy.uint16"):
        list(stoker.DataLoader(dataset, batch_size=2))


def test_samples_of_different_structures_are_refused():
    dataset = ListDataset(4, lambda i: {"a": i} if i < 2 else {"b": i})
    with pytest.raises(stoker.CollateError):
        list(stoker.DataLoader(dataset, batch_size=4))


def test_text_first_seen_after_a_batch_is_an_error():
    dataset = ListDataset(8, lambda i: i if i < 4 else "x")
    loader = stoker.DataLoader(dataset, batch_size=4)
    it = iter(loader)
    assert next(it).tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="one structure"):
        next(it)


def test_shapes_that_differ_are_a_collate_error_naming_the_field():
    dataset = ListDataset(4, lambda i: {"img": np.zeros((i + 1, 2), np.float32)})
    with pytest.raises(stoker.CollateError, match="img"):
        list(stoker.DataLoader(dataset, batch_size=2, num_workers=1))
