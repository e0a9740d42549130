"""stoker's own datasets from Python: their samples are decoded in C++ (in the DataLoader's
workers, without the GIL), and they look like torchvision's and torch's where those exist.

    stoker.ImageFolder(root, transform)        (image, label), as torchvision.datasets.ImageFolder
    stoker.ImageList([(path or bytes, label)], transform)
    stoker.MNIST / FashionMNIST(root, train)   (image [1, 28, 28] float, label), as torchvision
    stoker.NpyDataset(path or {field: path})   memory-mapped .npy files
    stoker.TokenDataset(shards, context)       (input, target) windows of llm.c / nanoGPT shards
    stoker.WebDataset / TFRecordDataset / MdsDataset(..., fields)   record shards, map-style or
                                               stream=True
    stoker.Subset, ConcatDataset, ChainDataset, MixtureDataset, random_split

Each is an ordinary dataset too (len(), ds[i]); the composition helpers fall back to torch's
for Python datasets.
"""

import os

import torch
import torch.utils.data as tud

from . import _stoker
from .vision import _pipeline


class _Native:
    """A dataset stoker.DataLoader loads in C++: no Python runs per sample."""

    _stoker_native = None

    def __len__(self):
        return len(self._stoker_native)

    def __getitem__(self, index):
        return self._stoker_native[index]

    def __iter__(self):
        if self._stoker_native.iterable:
            raise TypeError("{}: iterate a stream through stoker.DataLoader".format(
                self.__class__.__name__))
        for i in range(len(self)):
            yield self[i]


def _wrap(native, cls=None):
    out = (cls or _Native).__new__(cls or _Native)
    out._stoker_native = native
    return out


def _no_callables(name, **given):
    for key, value in given.items():
        if value is not None:
            raise TypeError("stoker.{}: {} is a Python callable, which stoker's C++ dataset "
                            "cannot run; use torchvision's {} with stoker.DataLoader for "
                            "that".format(name, key, name))


class ImageFolder(_Native):
    """torchvision.datasets.ImageFolder: root/<class>/<image> (.jpg .jpeg .png .webp), classes
    sorted, samples (path, class index); each sample is (image, label). Without a transform the
    image is the decoded picture as a uint8 CHW tensor."""

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None):
        _no_callables("ImageFolder", target_transform=target_transform, loader=loader,
                      is_valid_file=is_valid_file)
        self.root = os.fspath(root)
        self.transform = transform
        native, classes, files = _stoker.image_folder(
            self.root, _pipeline(transform, "stoker.ImageFolder"),
            _stoker.structure_text(("T:image", "I:label")))
        self._stoker_native = native
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = [(path, int(label)) for path, label in files]
        self.imgs = self.samples
        self.targets = [label for _, label in self.samples]


class ImageList(_Native):
    """Images not laid out in folders: a list of (path or encoded bytes, label); each sample
    is (image, label)."""

    def __init__(self, samples, transform=None):
        self.samples = [(s if isinstance(s, (bytes, bytearray)) else os.fspath(s), int(label))
                        for s, label in samples]
        self._stoker_native = _stoker.image_list(
            self.samples, _pipeline(transform, "stoker.ImageList"),
            _stoker.structure_text(("T:image", "I:label")))


class MNIST(_Native):
    """torchvision.datasets.MNIST's samples, (image, label): the image float32 [1, 28, 28] in
    [0, 1] (ToTensor's), or uint8 with transform=PILToTensor(); Compose([ToTensor(),
    Normalize((m,), (s,))]) normalises. `root` holds the IDX files (plain or .gz), or
    torchvision's layout root/<Class>/raw. Debian's dataset-fashion-mnist installs
    /usr/share/datasets/fashion-mnist."""

    def __init__(self, root, train=True, transform=None, target_transform=None,
                 download=False):
        from . import vision
        _no_callables(self.__class__.__name__, target_transform=target_transform)
        if download:
            raise ValueError("stoker.{}: stoker does not download; give the folder that holds "
                             "the files".format(self.__class__.__name__))
        steps = transform.transforms if isinstance(transform, vision.Compose) else (
            [] if transform is None else [transform])
        dtype, mean, std = "float32", None, None
        for step in steps:
            if isinstance(step, vision.PILToTensor):
                dtype = "uint8"
            elif isinstance(step, vision.ToTensor):
                dtype = "float32"
            elif isinstance(step, vision.Normalize) and dtype == "float32":
                mean, std = step.mean[0], step.std[0]
            else:
                raise TypeError("stoker.{}: transform may be ToTensor(), PILToTensor() or "
                                "Compose([ToTensor(), Normalize(mean, std)]), not {!r}".format(
                                    self.__class__.__name__, step))
        folder = os.fspath(root)
        torchvision_layout = os.path.join(folder, self.__class__.__name__, "raw")
        if os.path.isdir(torchvision_layout):
            folder = torchvision_layout
        self.root, self.train = folder, train
        self._stoker_native = _stoker.mnist(folder, bool(train), dtype, mean, std,
                                            _stoker.structure_text(("T:image", "I:label")))


class FashionMNIST(MNIST):
    """torchvision.datasets.FashionMNIST (the same files and layout as MNIST)."""


class NpyDataset(_Native):
    """Memory-mapped .npy files: one path gives the rows of its array; a dict {field: path}
    (arrays with equal first dimensions) gives dicts of rows."""

    def __init__(self, files):
        if isinstance(files, dict):
            pairs = [(str(k), os.fspath(v)) for k, v in files.items()]
            template = {k: "T:" + k for k, _ in pairs}
        else:
            pairs = [("data", os.fspath(files))]
            template = "T:data"
        self._stoker_native = _stoker.npy(pairs, _stoker.structure_text(template))


class TokenDataset(_Native):
    """Context windows over llm.c (magic 20240520) or nanoGPT (raw uint16) token shards: sample
    i is (input, target), `context` tokens each, target shifted by one."""

    def __init__(self, shards, context=1024, stride=None, dtype=torch.int64, format="detect"):
        if isinstance(shards, (str, os.PathLike)):
            shards = [shards]
        if dtype not in (torch.int64, torch.int32):
            raise ValueError("stoker.TokenDataset: dtype is torch.int64 or torch.int32")
        self._stoker_native = _stoker.tokens(
            [os.fspath(s) for s in shards], int(context), stride, str(dtype).split(".")[-1],
            format, _stoker.structure_text(("T:input", "T:target")))


_DECODER_KINDS = {"int": "I", "npy": "T", "bytes": "Y", "str": "S", "image": "T", "tensor": "T"}


def _shard_fields(fields, name, by_name):
    """[(record field, output name, decoder)] and the structure template from `fields`: a list
    of record field names, or a dict {record field: output name, or (output name, decoder)}.
    A decoder is a stoker.vision transform or Compose (an image), or 'int', 'npy', 'bytes',
    'str'; without one, a WebDataset field's name decides (`by_name`: stoker's defaults, .cls
    is an int, .npy an array, .jpg / .png / .webp an image, anything else bytes) and a TFRecord
    feature or MDS column is a tensor (its bytes and text need 'bytes' or 'str')."""
    if not fields:
        raise ValueError("stoker.{}: give `fields`, the record fields to load (for example "
                         "{{'jpg': 'image', 'cls': 'label'}})".format(name))
    if not isinstance(fields, dict):
        fields = {f: f.split(";")[0] for f in fields}
    specs, template = [], {}
    for record, out in fields.items():
        decoder = None
        if isinstance(out, tuple):
            out, decoder = out
        if decoder is None:
            kind = _stoker.default_field_kind(record.split(";")[0]) if by_name else "tensor"
        elif isinstance(decoder, str):
            if decoder not in _DECODER_KINDS or decoder in ("image", "tensor"):
                raise ValueError("stoker.{}: the decoder of {!r} is a stoker.vision transform or "
                                 "one of 'int', 'npy', 'bytes', 'str', not {!r}".format(
                                     name, record, decoder))
            kind = decoder
        else:
            decoder = _pipeline(decoder, "stoker." + name)
            kind = "image"
        specs.append((record, out, decoder))
        template[out] = _DECODER_KINDS[kind] + ":" + out
    return specs, _stoker.structure_text(template)


def _stream_options(stream, shuffle, shuffle_buffer, seed, rank, world_size, drop_uneven):
    if not stream:
        return None
    return {"shuffle": shuffle, "shuffle_buffer": shuffle_buffer, "seed": seed, "rank": rank,
            "world_size": world_size, "drop_uneven": drop_uneven}


class WebDataset(_Native):
    """WebDataset tar shards (a list, or a brace pattern "train-{0000..0099}.tar"): map-style
    over their index, or stream=True (also for .tar.gz / .tar.zst) for an iterable dataset
    that each worker reads its part of. Samples are dicts of the chosen `fields`."""

    def __init__(self, shards, fields, *, stream=False, shuffle=True, shuffle_buffer=1000, seed=0,
                 rank=0, world_size=1, drop_uneven=False):
        specs, structure = _shard_fields(fields, "WebDataset", True)
        self._stoker_native = _stoker.webdataset(
            _shard_list(shards), specs, structure,
            _stream_options(stream, shuffle, shuffle_buffer, seed, rank, world_size, drop_uneven))


class TFRecordDataset(_Native):
    """TFRecord files of tf.train.Example: fields by feature name ("image/encoded");
    `scalar_features` are read as scalars. Map-style, or stream=True."""

    def __init__(self, files, fields, *, scalar_features=(), stream=False, shuffle=True,
                 shuffle_buffer=1000, seed=0, rank=0, world_size=1, drop_uneven=False):
        specs, structure = _shard_fields(fields, "TFRecordDataset", False)
        self._stoker_native = _stoker.tfrecord(
            _shard_list(files), specs, structure, list(scalar_features),
            _stream_options(stream, shuffle, shuffle_buffer, seed, rank, world_size, drop_uneven))


class MdsDataset(_Native):
    """A MosaicML MDS directory (index.json and its shards): fields by column name. Map-style,
    or stream=True."""

    def __init__(self, directory, fields, *, stream=False, shuffle=True, shuffle_buffer=1000,
                 seed=0, rank=0, world_size=1, drop_uneven=False):
        specs, structure = _shard_fields(fields, "MdsDataset", False)
        self._stoker_native = _stoker.mds(
            os.fspath(directory), specs, structure,
            _stream_options(stream, shuffle, shuffle_buffer, seed, rank, world_size, drop_uneven))


def _shard_list(shards):
    if isinstance(shards, (str, os.PathLike)):
        return _stoker.expand_shards(os.fspath(shards))
    out = []
    for s in shards:
        out.extend(_stoker.expand_shards(os.fspath(s)))
    return out


def expand_shards(pattern):
    """WebDataset's brace notation: "a-{000..002}.tar" -> ["a-000.tar", "a-001.tar",
    "a-002.tar"]; "{train,val}" lists names."""
    return _stoker.expand_shards(pattern)


def _all_native(datasets):
    return all(getattr(d, "_stoker_native", None) is not None for d in datasets)


def Subset(dataset, indices):
    """torch.utils.data.Subset; over one of stoker's datasets, a C++ one."""
    if _all_native([dataset]):
        return _wrap(_stoker.subset(dataset._stoker_native, [int(i) for i in indices]))
    return tud.Subset(dataset, indices)


def ConcatDataset(datasets):
    """torch.utils.data.ConcatDataset; over stoker's datasets (with the same fields), a C++
    one."""
    datasets = list(datasets)
    if datasets and _all_native(datasets):
        return _wrap(_stoker.concat([d._stoker_native for d in datasets]))
    return tud.ConcatDataset(datasets)


def ChainDataset(datasets):
    """torch.utils.data.ChainDataset; over stoker's streams, a C++ one."""
    datasets = list(datasets)
    if datasets and _all_native(datasets):
        return _wrap(_stoker.chain([d._stoker_native for d in datasets]))
    return tud.ChainDataset(datasets)


def MixtureDataset(datasets, weights, samples_per_epoch, seed=0):
    """An exact weighted blend of stoker's map-style datasets: each epoch takes
    samples_per_epoch samples, from dataset k in proportion to weights[k]; resumable."""
    datasets = list(datasets)
    if not _all_native(datasets):
        raise TypeError("stoker.MixtureDataset blends stoker's datasets (ImageFolder, shards, "
                        "...)")
    return _wrap(_stoker.mixture([(d._stoker_native, float(w)) for d, w in
                                  zip(datasets, weights)], int(samples_per_epoch), int(seed)))


def random_split(dataset, lengths, generator=None, seed=None):
    """torch.utils.data.random_split; over one of stoker's datasets, C++ Subsets whose split
    depends on `seed` alone (default: drawn from `generator` or torch's generator)."""
    if not _all_native([dataset]):
        if generator is None:
            generator = torch.default_generator
        return tud.random_split(dataset, lengths, generator=generator)
    lengths = list(lengths)
    if not all(isinstance(x, float) for x in lengths):
        lengths = [int(x) for x in lengths]
    if seed is None:
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
    return [_wrap(p) for p in _stoker.random_split(dataset._stoker_native, lengths,
                                                   seed & 0xFFFFFFFFFFFFFFFF)]
