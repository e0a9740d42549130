"""stoker's C++ datasets from Python: MNIST / Fashion-MNIST, .npy, token shards, WebDataset,
TFRecord and MDS shards, and the composition helpers; each checked against the data it was
made from (NumPy, tarfile, the test support's record writer)."""

import gzip
import io
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from PIL import Image

import stoker
import stoker.vision as V
from helpers import ListDataset, assert_same

FASHION = "/usr/share/datasets/fashion-mnist"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRITE_RECORDS = os.path.join(ROOT, "tests", "support", "write_records.py")


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_is_torchvisions_layout():
    images = idx(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"))
    labels = idx(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz"))
    test = stoker.FashionMNIST(FASHION, train=False)
    assert len(test) == 10000
    img, label = test[17]
    assert img.shape == (1, 28, 28) and img.dtype == torch.float32 and type(label) is int
    assert label == labels[17]
    assert torch.equal(img, torch.from_numpy(images[17].astype(np.float32) / 255)[None])
    batch = next(iter(stoker.DataLoader(test, batch_size=32, num_workers=2)))
    assert batch[0].shape == (32, 1, 28, 28) and batch[1].dtype == torch.int64
    assert batch[1].tolist() == labels[:32].tolist()
    raw = stoker.FashionMNIST(FASHION, train=False, transform=V.PILToTensor())
    assert torch.equal(raw[3][0][0], torch.from_numpy(images[3].copy()))
    norm = stoker.FashionMNIST(FASHION, train=False, transform=V.Compose(
        [V.ToTensor(), V.Normalize((0.5,), (0.25,))]))
    assert torch.allclose(norm[3][0], (test[3][0] - 0.5) / 0.25)


def test_npy_datasets(tmp_path):
    x = np.arange(60, dtype=np.float32).reshape(10, 2, 3)
    y = np.arange(10, dtype=np.int64) * 7
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    single = stoker.NpyDataset(tmp_path / "x.npy")
    assert len(single) == 10 and torch.equal(single[4], torch.from_numpy(x[4]))
    both = stoker.NpyDataset({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"})
    ours = [stoker.clone(b) for b in stoker.DataLoader(both, batch_size=4, num_workers=2)]
    theirs = list(tud.DataLoader(ListDataset(10, lambda i: {"x": x[i], "y": y[i]}),
                                 batch_size=4))
    assert_same(ours, theirs)


def test_token_windows(tmp_path):
    tokens = (np.arange(1000) * 37 % 50257).astype(np.uint16)
    tokens.tofile(tmp_path / "tokens.bin")
    ds = stoker.TokenDataset(tmp_path / "tokens.bin", context=16, format="raw")
    assert len(ds) == (1000 - 1) // 16
    x, y = ds[3]
    assert x.dtype == torch.int64 and x.tolist() == tokens[48:64].tolist()
    assert y.tolist() == tokens[49:65].tolist()
    x, y = next(iter(stoker.DataLoader(ds, batch_size=5, num_workers=2)))
    assert x.shape == (5, 16) and torch.equal(x[:, 1:], y[:, :-1])


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A WebDataset tar: key{k}.jpg (an image), .cls (k % 3), .txt (text of k's length)."""
    path = str(tmp_path_factory.mktemp("wds") / "shard-000000.tar")
    images = []
    with tarfile.open(path, "w") as tar:
        for k in range(12):
            pixels = np.full((20 + k, 30, 3), k * 20, np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, format="PNG")
            images.append(pixels)
            for ext, data in (("png", buf.getvalue()), ("cls", str(k % 3).encode()),
                              ("txt", ("t" * k).encode())):
                info = tarfile.TarInfo("key{:03d}.{}".format(k, ext))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path, images


def test_webdataset_map_style(shard):
    path, images = shard
    ds = stoker.WebDataset(path, fields={"png": ("image", V.Compose([V.Resize((16, 16)),
                                                                       V.PILToTensor()])),
                                         "cls": "label", "txt": ("text", "str")})
    assert len(ds) == 12
    sample = ds[5]
    assert sample["label"] == 2 and sample["text"] == "ttttt"
    assert sample["image"].shape == (3, 16, 16)
    batches = [stoker.clone(b) for b in stoker.DataLoader(ds, batch_size=5, num_workers=2)]
    assert [b["label"].tolist() for b in batches] == [[0, 1, 2, 0, 1], [2, 0, 1, 2, 0], [1, 2]]
    assert batches[1]["text"] == ["t" * k for k in range(5, 10)]
    assert batches[0]["image"].shape == (5, 3, 16, 16)
    raw = stoker.WebDataset(path, fields=["cls", "txt"])  # default decoders: int, bytes
    assert raw[7] == {"cls": 1, "txt": b"ttttttt"}


def test_webdataset_stream_each_record_once(shard):
    path, _ = shard
    ds = stoker.WebDataset(path, fields={"cls": "label", "txt": ("text", "str")}, stream=True,
                           shuffle=False)
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        stoker.DataLoader(ds, shuffle=True)
    texts = sorted(t for b in stoker.DataLoader(ds, batch_size=4, num_workers=2)
                   for t in b["text"])
    assert texts == sorted("t" * k for k in range(12))


def test_tfrecord_and_mds(tmp_path):
    subprocess.run([sys.executable, WRITE_RECORDS, "tfrecord", str(tmp_path / "a.tfrecord"), "0",
                    "20"], check=True)
    subprocess.run([sys.executable, WRITE_RECORDS, "mds", str(tmp_path / "mds"), "20", "8"],
                   check=True)
    tf = stoker.TFRecordDataset(tmp_path / "a.tfrecord", fields={
        "id": "id", "value": "value", "text": ("text", "bytes")}, scalar_features=["id"])
    b = next(iter(stoker.DataLoader(tf, batch_size=4, num_workers=1)))
    assert b["id"].tolist() == [0, 1, 2, 3]
    assert b["value"].tolist() == [[k * 0.5, -float(k)] for k in range(4)]
    assert b["text"] == [b"sample-%d" % k + b"x" * (k % 7) for k in range(4)]
    mds = stoker.MdsDataset(tmp_path / "mds", fields={"id": "id", "label": "label",
                                                      "text": ("text", "str")})
    assert len(mds) == 20
    b = next(iter(stoker.DataLoader(mds, batch_size=5, shuffle=True, seed=3, num_workers=2)))
    assert sorted(b["text"]) == sorted("text %d" % k for k in b["id"].tolist())
    assert b["label"].tolist() == [k % 10 for k in b["id"].tolist()]


def test_composition_of_native_datasets(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.int64))
    np.save(tmp_path / "b.npy", np.arange(100, 105, dtype=np.int64))
    a, b = stoker.NpyDataset(tmp_path / "a.npy"), stoker.NpyDataset(tmp_path / "b.npy")
    both = stoker.ConcatDataset([a, b])
    assert len(both) == 15 and int(both[12]) == 102
    sub = stoker.Subset(both, [14, 0, 9])
    assert [int(v) for v in next(iter(stoker.DataLoader(sub, batch_size=3)))] == [104, 0, 9]
    parts = stoker.random_split(both, [10, 5], seed=4)
    values = sorted(int(parts[k][i]) for k in range(2) for i in range(len(parts[k])))
    assert values == sorted(list(range(10)) + list(range(100, 105)))
    again = stoker.random_split(both, [10, 5], seed=4)
    assert [int(again[1][i]) for i in range(5)] == [int(parts[1][i]) for i in range(5)]
    halves = stoker.random_split(a, [0.5, 0.5], seed=1)
    assert [len(h) for h in halves] == [5, 5]
    mix = stoker.MixtureDataset([a, b], weights=[3, 1], samples_per_epoch=40, seed=2)
    drawn = [int(v) for batch in stoker.DataLoader(mix, batch_size=8, num_workers=2)
             for v in batch]
    assert sum(v >= 100 for v in drawn) == 10  # exactly a quarter, from b
    # Python datasets fall back to torch's helpers.
    py = ListDataset(4, lambda i: i)
    assert isinstance(stoker.ConcatDataset([py, py]), tud.ConcatDataset)
    assert isinstance(stoker.Subset(py, [1]), tud.Subset)
