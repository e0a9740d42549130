"""stoker.ImageFolder / ImageList with stoker.vision against torchvision: the same classes,
samples and, for the same transforms, the same pixels; random transforms the same for any
num_workers; a Compose called on bytes, PIL images and arrays."""

import io
import os

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image

import stoker
import stoker.vision as V
from helpers import assert_same

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def picture(w, h, seed):
    """A smooth colour field with noise: compresses like a photograph."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (5, 5, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), dtype=np.int16)
    return np.clip(field + rng.integers(-10, 11, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    sizes = [(300, 240), (257, 400), (500, 333), (224, 224), (180, 150), (640, 480)]
    for k, cls in enumerate(["cat", "dog", "emu"]):
        os.makedirs(root / cls)
        for j in range(4):
            w, h = sizes[(k * 4 + j) % len(sizes)]
            img = Image.fromarray(picture(w, h, k * 10 + j))
            if j == 3:
                img.save(root / cls / "img{}.png".format(j))
            else:
                img.save(root / cls / "img{}.jpg".format(j), quality=90)
    return str(root)


RECIPES = {
    "val": (lambda M: M.Compose([M.Resize(256), M.CenterCrop(224), M.ToTensor(),
                                 M.Normalize(MEAN, STD)])),
    "uint8": (lambda M: M.Compose([M.Resize(160), M.CenterCrop(128), M.PILToTensor()])),
    "exact size bicubic": (lambda M: M.Compose([
        M.Resize((120, 90), interpolation=M.InterpolationMode.BICUBIC), M.ToTensor()])),
    "nearest, non-square crop": (lambda M: M.Compose([
        M.Resize(100, interpolation=M.InterpolationMode.NEAREST), M.CenterCrop((64, 96)),
        M.PILToTensor()])),
    "flip always": (lambda M: M.Compose([M.Resize(64), M.CenterCrop(64),
                                         M.RandomHorizontalFlip(p=1.0), M.ToTensor()])),
    "crop larger than the image": (lambda M: M.Compose([M.Resize(100), M.CenterCrop(130),
                                                        M.PILToTensor()])),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_image_folder_is_torchvisions(folder, recipe):
    theirs = torchvision.datasets.ImageFolder(folder, transform=RECIPES[recipe](T))
    ours = stoker.ImageFolder(folder, transform=RECIPES[recipe](V))
    assert ours.classes == theirs.classes and ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples and ours.targets == theirs.targets
    img, label = ours[5]
    ref_img, ref_label = theirs[5]
    assert label == ref_label and type(label) is int
    assert torch.equal(img, ref_img)
    batches_theirs = [b for b in torch.utils.data.DataLoader(theirs, batch_size=4)]
    batches_ours = [stoker.clone(b) for b in stoker.DataLoader(ours, batch_size=4,
                                                               num_workers=2)]
    assert_same(batches_ours, batches_theirs)


def test_random_transforms_do_not_depend_on_num_workers(folder):
    train = V.Compose([V.RandomResizedCrop(96), V.RandomHorizontalFlip(),
                       V.ColorJitter(0.4, 0.4, 0.4, 0.1), V.ToTensor(), V.Normalize(MEAN, STD)])
    ds = stoker.ImageFolder(folder, transform=train)

    def epochs(workers):
        loader = stoker.DataLoader(ds, batch_size=3, shuffle=True, seed=5, num_workers=workers)
        return [[stoker.clone(b) for b in loader] for _ in range(2)]

    a, b = epochs(0), epochs(2)
    assert_same(a, b)
    assert not torch.equal(a[0][0][0], a[1][0][0])  # each epoch draws anew
    assert a[0][0][0].shape == (3, 3, 96, 96) and a[0][0][0].dtype == torch.float32


def test_image_list_takes_paths_and_bytes(folder):
    paths = [(os.path.join(folder, "cat", "img0.jpg"), 0), (os.path.join(folder, "dog",
                                                                        "img3.png"), 1)]
    encoded = [(open(p, "rb").read(), label) for p, label in paths]
    recipe = V.Compose([V.Resize(50), V.CenterCrop(48), V.PILToTensor()])
    by_path = stoker.ImageList(paths, transform=recipe)
    by_bytes = stoker.ImageList(encoded, transform=recipe)
    for i in range(2):
        assert torch.equal(by_path[i][0], by_bytes[i][0])
        ref = T.Compose([T.Resize(50), T.CenterCrop(48), T.PILToTensor()])(
            Image.open(paths[i][0]).convert("RGB"))
        assert torch.equal(by_path[i][0], ref)
    batch = next(iter(stoker.DataLoader(by_bytes, batch_size=2)))
    assert batch[0].shape == (2, 3, 48, 48) and batch[1].tolist() == [0, 1]


def test_compose_runs_on_bytes_pil_and_arrays(folder):
    path = os.path.join(folder, "emu", "img1.jpg")
    pil = Image.open(path).convert("RGB")
    ours = V.Compose([V.Resize(72), V.CenterCrop(64), V.ToTensor(), V.Normalize(MEAN, STD)])
    ref = T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)])(pil)
    assert torch.equal(ours(open(path, "rb").read()), ref)
    assert torch.equal(ours(pil), ref)
    assert torch.equal(ours(np.asarray(pil)), ref)
    assert torch.equal(V.PILToTensor()(pil), T.PILToTensor()(pil))
    assert torch.equal(V.ToTensor()(pil), T.ToTensor()(pil))


def test_random_transforms_inside_a_python_dataset_use_the_sample_generator(folder):
    path = os.path.join(folder, "dog", "img0.jpg")
    data = open(path, "rb").read()
    flip = V.Compose([V.Resize(32), V.RandomResizedCrop(24), V.PILToTensor()])

    class Crops(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return flip(data)

    def run(workers):
        loader = stoker.DataLoader(Crops(), batch_size=4, num_workers=workers, seed=1)
        return [stoker.clone(b) for b in loader]
    a, b = run(0), run(2)
    assert_same(a, b)
    assert not torch.equal(a[0][0], a[0][1])  # a generator per sample


def test_compose_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="comes after ToTensor"):
        V.Compose([V.ToTensor(), V.Resize(10)])
    with pytest.raises(ValueError, match="Normalize needs ToTensor"):
        V.Compose([V.Resize(10), V.Normalize(MEAN, STD)])
    with pytest.raises(TypeError, match="not a stoker.vision transform"):
        V.Compose([T.Resize(10)])
    with pytest.raises(TypeError, match="torchvision's ImageFolder"):
        stoker.ImageFolder("/nonexistent", target_transform=lambda y: y)
    with pytest.raises(ValueError, match="If brightness is a single number, it must be non "
                                         "negative."):
        V.ColorJitter(brightness=-1)


def test_undecodable_image_is_a_decode_error(tmp_path):
    os.makedirs(tmp_path / "a")
    (tmp_path / "a" / "bad.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    ds = stoker.ImageFolder(str(tmp_path), transform=V.Compose([V.Resize(8), V.PILToTensor()]))
    with pytest.raises(stoker.DecodeError, match="bad.jpg"):
        ds[0]
    with pytest.raises(stoker.DecodeError, match="bad.jpg"):
        next(iter(stoker.DataLoader(ds, num_workers=1)))
