#!/usr/bin/python3
"""Parity of stoker::vision with torchvision 0.14 (Pillow 9.4) on generated images.

  parity.py DUMP [--workdir DIR] [--keep] [--only SUBSTRING]

Writes small JPEG (baseline and progressive; 4:4:4, 4:2:2 and 4:2:0; grey; CMYK), PNG (RGB, RGBA,
grey, grey + alpha, palette with and without transparency, 1/2/4-bit grey, 16-bit grey, RGB and
grey + alpha), WebP (lossy, lossless, with alpha) and tiny (1 x 1 to 6 x 1 pixels) files, runs
each pipeline case through DUMP (vision_dump) and through torchvision on the same file with the
random parameters DUMP drew (crop boxes, flips, jitter factors and order, blur sigmas,
rotation angles, the augment ops and their magnitudes, erased boxes, replayed with
torchvision's functional API), and compares: uint8 outputs must be within 1 level with at
least 99% of values identical; float outputs within 1/255 before normalisation, likewise;
groups marked exact must be identical.
Then runs each deterministic operation with given parameters (rotate, affine, blur, grayscale,
vflip, every TrivialAugmentWide / RandAugment op at given magnitudes, sharpness, posterize,
solarize, autocontrast, equalize) through DUMP's functional API and torchvision's, which must
be identical; compares GaussianBlur's kernels and the augment ops' magnitude bins value by
value; and compares the distributions of the random draws with torchvision's (two-sample
Kolmogorov-Smirnov for RandomResizedCrop and RandomErasing boxes, rotation angles and blur
sigmas; chi-square against uniform for the augment ops and bins). Prints one line per case
group; exits 1 on any failure.
"""
import argparse
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    import torch
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
    import torchvision.transforms.functional_tensor as Ft
    from torchvision.transforms.autoaugment import _apply_op
    from PIL import Image
except ImportError as e:  # ctest reads 77 as "skipped"
    print(f"parity.py: skipped: {e} (Debian: apt-get install python3-torchvision python3-pil)")
    sys.exit(77)

INTERP = {"bilinear": T.InterpolationMode.BILINEAR, "bicubic": T.InterpolationMode.BICUBIC,
          "nearest": T.InterpolationMode.NEAREST}
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def photo_like(rng, w, h):
    """A smooth random colour field with noise: compresses like a photograph."""
    coarse = rng.integers(0, 256, size=(5, 5, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), dtype=np.int16)
    noise = rng.integers(-20, 21, size=(h, w, 3), dtype=np.int16)
    return np.clip(field + noise, 0, 255).astype(np.uint8)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(path, rows, width, height, depth, color_type):
    """A PNG from raw scanlines (bytes per row, filter 0): depths Pillow cannot write."""
    raw = b"".join(b"\x00" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def make_images(d):
    rng = np.random.default_rng(1234)
    files = {}
    sizes = [(37, 29), (64, 48), (120, 97), (200, 150), (150, 260), (333, 257)]
    for w, h in sizes:
        px = photo_like(rng, w, h)
        im = Image.fromarray(px)
        for sub, tag in ((0, "444"), (1, "422"), (2, "420")):
            p = os.path.join(d, f"j{tag}_{w}x{h}.jpg")
            im.save(p, quality=90, subsampling=sub)
            files.setdefault("jpeg", []).append(p)
        p = os.path.join(d, f"jprog_{w}x{h}.jpg")
        im.save(p, quality=85, progressive=True, subsampling=2)
        files["jpeg"].append(p)
        p = os.path.join(d, f"png_{w}x{h}.png")
        im.save(p)
        files.setdefault("png", []).append(p)
        p = os.path.join(d, f"webp_{w}x{h}.webp")
        im.save(p, quality=80)
        files.setdefault("webp", []).append(p)
    w, h = 96, 72
    px = photo_like(rng, w, h)
    im = Image.fromarray(px)
    odd = []
    im.convert("L").save(os.path.join(d, "grey.jpg"), quality=90)
    odd.append("grey.jpg")
    im.convert("CMYK").save(os.path.join(d, "cmyk.jpg"), quality=90)
    odd.append("cmyk.jpg")
    alpha = rng.integers(0, 256, size=(h, w), dtype=np.uint8)
    Image.fromarray(np.dstack([px, alpha])).save(os.path.join(d, "rgba.png"))
    odd.append("rgba.png")
    im.convert("L").save(os.path.join(d, "grey.png"))
    odd.append("grey.png")
    im.convert("LA").save(os.path.join(d, "grey_alpha.png"))
    odd.append("grey_alpha.png")
    im.quantize(64).save(os.path.join(d, "palette.png"))
    odd.append("palette.png")
    pal = im.quantize(16)
    pal.info["transparency"] = 3
    pal.save(os.path.join(d, "palette_trns.png"), transparency=3)
    odd.append("palette_trns.png")
    im.convert("1").save(os.path.join(d, "bilevel.png"))
    odd.append("bilevel.png")
    grey16 = (rng.integers(0, 65536, size=(h, w))).astype(">u2")
    grey16[:, : w // 2] = rng.integers(0, 300, size=(h, w // 2))  # values Pillow clips at 255
    write_png(os.path.join(d, "grey16.png"), [r.tobytes() for r in grey16], w, h, 16, 0)
    odd.append("grey16.png")
    rgb16 = rng.integers(0, 65536, size=(h, w, 3)).astype(">u2")
    write_png(os.path.join(d, "rgb16.png"), [r.tobytes() for r in rgb16], w, h, 16, 2)
    odd.append("rgb16.png")
    la16 = rng.integers(0, 65536, size=(h, w, 2)).astype(">u2")
    write_png(os.path.join(d, "grey_alpha16.png"), [r.tobytes() for r in la16], w, h, 16, 4)
    odd.append("grey_alpha16.png")
    for depth in (2, 4):
        vals = rng.integers(0, 1 << depth, size=(h, w)).astype(np.uint8)
        per = 8 // depth
        rows = []
        for r in vals:
            packed = bytearray()
            for i in range(0, w, per):
                b = 0
                for k in range(per):
                    b = (b << depth) | (int(r[i + k]) if i + k < w else 0)
                packed.append(b)
            rows.append(bytes(packed))
        write_png(os.path.join(d, f"grey{depth}.png"), rows, w, h, depth, 0)
        odd.append(f"grey{depth}.png")
    im.save(os.path.join(d, "lossless.webp"), lossless=True)
    odd.append("lossless.webp")
    Image.fromarray(np.dstack([px, alpha])).save(os.path.join(d, "alpha.webp"), quality=80)
    odd.append("alpha.webp")
    files["odd"] = [os.path.join(d, f) for f in odd]
    # One larger photo-like JPEG for the region-of-interest decoding paths.
    big = photo_like(rng, 900, 700)
    p = os.path.join(d, "big.jpg")
    Image.fromarray(big).save(p, quality=90, subsampling=2)
    files["big"] = [p]
    # Tiny images: RandomCrop's padding twice (pad_if_needed on a padded image), and a grey PNG.
    small = []
    for w, h in ((17, 13), (5, 4)):
        p = os.path.join(d, f"small_{w}x{h}.png")
        Image.fromarray(photo_like(rng, w, h)).save(p)
        small.append(p)
    files["small"] = small
    p = os.path.join(d, "grey_60x45.png")
    Image.fromarray(photo_like(rng, 60, 45)).convert("L").save(p)
    files["grey"] = [p]
    # Images of a pixel or a line: the edge cases of rotation, the augment ops and erasing.
    files["tiny"] = []
    for w, h in ((1, 1), (1, 7), (6, 1), (2, 2)):
        p = os.path.join(d, f"tiny_{w}x{h}.png")
        Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(p)
        files["tiny"].append(p)
    return files


def cases(files):
    """(group, file, spec, seeds[, exact])."""
    out = []
    every = files["jpeg"] + files["png"] + files["webp"] + files["odd"] + files["big"]
    some = files["jpeg"][::3] + files["png"][::2] + files["webp"][::2] + files["big"]
    for f in every:
        out.append(("decode", f, "-", [0]))
    for f in some:
        out += [
            ("resize bilinear down", f, "Resize:24", [0]),
            ("resize bilinear up", f, "Resize:301", [0]),
            ("resize bicubic", f, "Resize:33x50:bicubic", [0]),
            ("resize bicubic up", f, "Resize:200:bicubic", [0]),
            ("resize nearest", f, "Resize:45:nearest", [0]),
            ("center crop", f, "CenterCrop:20x27", [0]),
            ("center crop padded", f, "CenterCrop:150x401", [0]),
            ("resize + center crop", f, "Resize:40;CenterCrop:32", [0]),
            ("resize + center crop + flip", f, "Resize:40;CenterCrop:32;Flip:0.5", [1, 2, 3, 4]),
            ("random crop padded", f, "RandomCrop:24:4,4,4,4:0:constant:0,0,0", [5, 6]),
            ("random crop fill", f, "RandomCrop:40:3,0,5,2:1:constant:10,200,30", [7]),
            ("random crop reflect", f, "RandomCrop:30:6,6,6,6:1:reflect:0,0,0", [8]),
            ("random crop edge", f, "RandomCrop:30:2,9,2,9:1:edge:0,0,0", [9]),
            ("random crop symmetric", f, "RandomCrop:30:5,5,5,5:1:symmetric:0,0,0", [10]),
            ("color jitter", f, "ColorJitter:0.4:0.4:0.4:0", [11, 12, 13]),
            ("color jitter strong + hue", f, "ColorJitter:0.9:0.9:0.9:0.5", [14, 15, 16]),
            ("hue", f, "ColorJitter:0:0:0:0.3", [17, 18]),
            ("normalize float32", f, "Resize:40;CenterCrop:32;Normalize", [0]),
            ("float32 hwc", f, "Resize:40;Out:float32:hwc", [0]),
            ("normalize bfloat16", f, "Resize:40;CenterCrop:32;Normalize;Out:bfloat16:chw", [0]),
            ("normalize float16", f, "CenterCrop:32;Normalize;Out:float16:hwc", [0]),
            ("random resized crop", f, "RandomResizedCrop:32", [20, 21, 22, 23]),
            ("random resized crop bicubic", f,
             "RandomResizedCrop:24x40:0.2:1.0:0.5:2.0:bicubic", [24, 25]),
            ("train pipeline", f,
             "RandomResizedCrop:32;Flip:0.5;ColorJitter:0.4:0.4:0.4:0.1;Normalize", [26, 27, 28]),
            ("crop + resize + crop", f, "CenterCrop:60;Resize:50;RandomCrop:30;Flip:0.5", [29]),
        ]
    big = files["big"][0]
    out += [
        ("roi: train pipeline on 900x700", big, "RandomResizedCrop:224;Flip:0.5", list(range(40, 52))),
        ("roi: val pipeline on 900x700", big, "Resize:256;CenterCrop:224", [0]),
        ("roi: center crop on 900x700", big, "CenterCrop:100x333", [0]),
    ]
    for f in files["jpeg"][-4:]:
        out.append(("roi: random crop of a JPEG", f, "RandomCrop:50x70", list(range(60, 66))))
    # RandomCrop pads twice: the padding, then pad_if_needed's shortfall on the padded image.
    for f in files["small"]:
        for mode in ("constant", "edge", "reflect", "symmetric"):
            out.append((f"random crop 40, padding 2, pad_if_needed, {mode}", f,
                        f"RandomCrop:40:2,2,2,2:1:{mode}:10,20,30", [70, 71, 72], True))
    # The transforms torchvision's recipes add (exact: stoker's pixels are torchvision's).
    new = files["jpeg"][::4] + files["png"][::3] + files["odd"][:2] + files["grey"]
    recipes = [
        ("vertical flip", "VFlip:0.5", range(80, 84)),
        ("resize + crop + both flips", "Resize:40;CenterCrop:32;Flip:0.5;VFlip:0.5", range(84, 88)),
        ("grayscale 1", "Gray:1", [0]),
        ("grayscale 3 after resize", "Resize:40;Gray:3", [0]),
        ("grayscale 1 + crop + normalize", "Gray:1;CenterCrop:30;Normalize:0.5:0.25", [0]),
        ("random grayscale", "RandomGray:0.5", range(88, 92)),
        ("gaussian blur 5", "Blur:5,5:0.1:2.0", range(92, 96)),
        ("gaussian blur 3x7", "Blur:3,7:0.5:3.0", range(96, 98)),
        ("gaussian blur 17x23 on grey", "Gray:1;Blur:17,23:1.0:5.0", range(98, 100)),
        ("random rotation nearest", "Rotate:-30,30:nearest:0:-:0,0,0", range(100, 106)),
        ("random rotation bilinear fill", "Rotate:-180,180:bilinear:0:-:10,200,30", range(106, 110)),
        ("random rotation bicubic expand", "Rotate:-45,45:bicubic:1:-:0,0,0", range(110, 114)),
        ("random rotation centre", "Rotate:0,360:nearest:0:3,7.5:0,0,0", range(114, 116)),
        ("rotation by quarter turns", "Rotate:90,90:bilinear:1:-:0,0,0;Rotate:180,180", [0]),
        ("rotation then crop", "Rotate:-20,20:bilinear:1:-:0,0,0;CenterCrop:24;Flip:0.5",
         range(116, 120)),
        ("trivial augment wide", "Trivial:31:nearest:0,0,0", range(200, 260)),
        ("trivial augment bilinear fill", "Trivial:31:bilinear:128,128,128", range(260, 290)),
        ("rand augment", "RandAug:2:9:31:nearest:0,0,0", range(300, 340)),
        ("rand augment 3 ops, magnitude 15, bicubic", "RandAug:3:15:31:bicubic:0,0,0",
         range(340, 360)),
        ("random erasing uint8", "Erase:1:0.02,0.33:0.3,3.3:0,0,0", range(400, 406)),
        ("random erasing after normalize, random values",
         "CenterCrop:32;Normalize;Erase:1:0.02,0.33:0.3,3.3:random", range(406, 410)),
        ("random erasing before normalize", "CenterCrop:32;Erase:1:0.1,0.4:0.5,2:0.5,0.2,0.9;"
         "Normalize", range(410, 414)),
        ("random erasing float16 hwc", "Erase:0.7:0.02,0.33:0.3,3.3:0.25,0.5,0.75;"
         "Out:float16:hwc", range(414, 418)),
        ("augment recipe", "CenterCrop:48;Flip:0.5;Trivial:31:bilinear:0,0,0;RandomGray:0.2;"
         "Blur:3,3:0.1:2.0;Normalize;Erase:0.5:0.02,0.33:0.3,3.3:0,0,0", range(420, 440)),
    ]
    for group, spec, seeds in recipes:
        for f in new:
            out.append((group, f, spec, list(seeds), True))
        if "Blur:" not in spec:  # a blur kernel wider than the image: both refuse (fn cases)
            for f in files["tiny"]:
                out.append((group + ", tiny images", f, spec, list(seeds)[:6], True))
    # A training recipe with resampling: within the resize tolerance.
    for f in files["jpeg"][::4] + files["png"][::3]:
        out.append(("train recipe with RandAugment", f,
                    "RandomResizedCrop:32;Flip:0.5;RandAug:2:9:31:nearest:0,0,0;Normalize;"
                    "Erase:0.25:0.02,0.33:0.3,3.3:0,0,0", list(range(440, 446))))
    return out


def fill_for(img, fill):
    """torchvision's fill for a PIL image: one value per band."""
    return fill[0] if len(img.getbands()) == 1 else list(fill)


def parse_fill(text):
    return [int(v) for v in text.split(",")]


def apply_torchvision(path, spec, trace, outdir=None, job_id=None):
    img = Image.open(path).convert("RGB")
    boxes = iter(trace["boxes"])
    flips = iter(trace["flips"])
    jitters = iter(trace["jitters"])
    vflips = iter(trace["vflips"])
    grays = iter(trace["grays"])
    sigmas = iter(trace["sigmas"])
    angles = iter(trace["angles"])
    augments = iter(trace["augments"])
    erasures = iter(enumerate(trace["erasures"]))
    normalize = False
    dtype, layout = None, "chw"
    steps = [] if spec == "-" else spec.split(";")
    float_out = any(st.split(":")[0] == "Normalize" for st in steps) or any(
        st.startswith("Out:") and st.split(":")[1] != "uint8" for st in steps)
    t = None  # the tensor, from the first tensor step on

    def tensor():
        return F.to_tensor(img) if float_out else F.pil_to_tensor(img)

    for step in steps:
        a = step.split(":")
        name = a[0]
        if name == "Resize":
            interp = INTERP[a[2] if len(a) > 2 else "bilinear"]
            size = [int(v) for v in a[1].split("x")] if "x" in a[1] else int(a[1])
            max_size = int(a[3]) if len(a) > 3 and int(a[3]) else None
            img = T.Resize(size, interp, max_size=max_size)(img)
        elif name == "CenterCrop":
            img = T.CenterCrop([int(v) for v in a[1].split("x")] if "x" in a[1] else int(a[1]))(img)
        elif name == "RandomResizedCrop":
            size = [int(v) for v in a[1].split("x")] if "x" in a[1] else [int(a[1])] * 2
            interp = INTERP[a[6] if len(a) > 6 else "bilinear"]
            x, y, w, h = next(boxes)
            img = F.resized_crop(img, y, x, h, w, size, interp)
        elif name == "RandomCrop":
            size = [int(v) for v in a[1].split("x")] if "x" in a[1] else [int(a[1])] * 2
            pad = [int(v) for v in (a[2] if len(a) > 2 else "0,0,0,0").split(",")]
            pad_if_needed = (a[3] if len(a) > 3 else "0") == "1"
            mode = a[4] if len(a) > 4 else "constant"
            fill = tuple(int(v) for v in (a[5] if len(a) > 5 else "0,0,0").split(","))
            if any(pad):
                img = F.pad(img, pad, fill, mode)
            if pad_if_needed and img.width < size[1]:
                img = F.pad(img, [size[1] - img.width, 0], fill, mode)
            if pad_if_needed and img.height < size[0]:
                img = F.pad(img, [0, size[0] - img.height], fill, mode)
            x, y, w, h = next(boxes)
            img = F.crop(img, y, x, h, w)
        elif name == "Flip":
            if next(flips):
                img = F.hflip(img)
        elif name == "VFlip":
            if next(vflips):
                img = F.vflip(img)
        elif name == "ColorJitter":
            order, b, c, s, hue = next(jitters)
            for fn in order:
                if fn == 0 and b is not None:
                    img = F.adjust_brightness(img, b)
                elif fn == 1 and c is not None:
                    img = F.adjust_contrast(img, c)
                elif fn == 2 and s is not None:
                    img = F.adjust_saturation(img, s)
                elif fn == 3 and hue is not None:
                    img = F.adjust_hue(img, hue)
        elif name == "Gray":
            img = F.rgb_to_grayscale(img, int(a[1]))
        elif name == "RandomGray":
            if next(grays):
                img = F.rgb_to_grayscale(img, len(img.getbands()))
        elif name == "Blur":
            kx, ky = (int(v) for v in a[1].split(","))
            sigma = next(sigmas)
            img = F.gaussian_blur(img, [kx, ky], [sigma, sigma])
        elif name == "Rotate":
            interp = INTERP[a[2] if len(a) > 2 else "nearest"]
            expand = (a[3] if len(a) > 3 else "0") == "1"
            center = None if len(a) <= 4 or a[4] == "-" else [float(v) for v in a[4].split(",")]
            fill = parse_fill(a[5] if len(a) > 5 else "0,0,0")
            img = F.rotate(img, next(angles), interp, expand, center, fill_for(img, fill))
        elif name in ("Trivial", "RandAug"):
            if name == "Trivial":
                bins, interp, fill = int(a[1]), INTERP[a[2]], parse_fill(a[3])
                space = T.TrivialAugmentWide()._augmentation_space(bins)
            else:
                bins, interp, fill = int(a[3]), INTERP[a[4]], parse_fill(a[5])
                space = T.RandAugment()._augmentation_space(bins, (img.height, img.width))
            for op, bin_, magnitude in next(augments):
                magnitudes, signed = space[op]
                ref = float(magnitudes[bin_].item()) if magnitudes.ndim > 0 else 0.0
                if abs(magnitude) != ref or (magnitude < 0 and not signed):
                    raise AssertionError(f"{op} bin {bin_}: stoker's magnitude {magnitude!r}, "
                                         f"torchvision's {ref!r}")
                img = _apply_op(img, op, magnitude, interp, fill_for(img, fill))
        elif name == "Normalize":
            if t is None:
                t = tensor()
            mean, std = ([float(a[1])], [float(a[2])]) if len(a) > 2 else (MEAN, STD)
            normalize = std
            t = F.normalize(t, mean, std)
        elif name == "Erase":
            if t is None:
                t = tensor()
            k, (erase, x, y, w, h) = next(erasures)
            if erase and w > 0 and h > 0:
                if a[4] == "random":
                    raw = np.fromfile(os.path.join(outdir, f"{job_id}.erase{k}.bin"),
                                      dtype=np.float32)
                    v = torch.from_numpy(raw.copy()).reshape(t.shape[0], h, w)
                else:
                    v = torch.tensor([float(x) for x in a[4].split(",")][: t.shape[0]])[:, None, None]
                t = F.erase(t, y, x, h, w, v)
        elif name == "Out":
            dtype, layout = a[1], a[2] if len(a) > 2 else "chw"
        elif name == "Mode":
            pass
    if t is None:
        t = tensor()
    t = {"bfloat16": t.to(torch.bfloat16), "float16": t.to(torch.float16)}.get(dtype, t)
    if layout == "hwc":
        t = t.permute(1, 2, 0).contiguous()
    return t, normalize


def parse_trace(text):
    parts = dict(p.split("=", 1) for p in text.split("|"))
    boxes = [tuple(int(v) for v in b.split(",")) for b in parts["boxes"].split("/") if b]
    flips = [v == "1" for v in parts["flips"].split(",") if v]
    jitters = []
    for j in parts["jitters"].split("/"):
        if not j:
            continue
        f = j.split(",")
        order = [int(c) for c in f[0]]
        jitters.append((order, *[None if v == "-" else float.fromhex(v) for v in f[1:5]]))
    augments = []
    for a in parts["augments"].split("/"):
        steps = []
        for st in a.split(";") if a else []:
            op, bin_, magnitude = st.split(",")
            steps.append((op, int(bin_), float.fromhex(magnitude)))
        augments.append(steps)
    return {
        "boxes": boxes, "flips": flips, "jitters": jitters,
        "vflips": [v == "1" for v in parts["vflips"].split(",") if v],
        "grays": [v == "1" for v in parts["grays"].split(",") if v],
        "sigmas": [float.fromhex(v) for v in parts["sigmas"].split(",") if v],
        "angles": [float.fromhex(v) for v in parts["angles"].split(",") if v],
        "augments": augments if parts["augments"] else [],
        "erasures": [tuple(int(v) for v in e.split(",")) for e in parts["erasures"].split("/") if e],
    }


TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}


def compare(ours, ref, normalized):
    """(max difference in 8-bit levels, fraction of values identical). normalized: the std of
    the Normalize, or False."""
    if ours.dtype == torch.uint8:
        diff = (ours.to(torch.int32) - ref.to(torch.int32)).abs().to(torch.float64)
    else:
        diff = (ours.to(torch.float64) - ref.to(torch.float64)).abs() * 255.0
        if normalized:  # back to pixel levels: x = value * std + mean
            std = torch.tensor(normalized, dtype=torch.float64)
            chw = ours.shape[0] in (1, 3) and ours.shape[-1] not in (1, 3)
            shape = [-1, 1, 1] if chw or ours.shape[0] == len(normalized) else [1, 1, -1]
            diff = diff * std.reshape(shape)
    identical = (ours == ref).to(torch.float64).mean().item()
    return diff.max().item(), identical


def report(what, bad):
    """Prints "ok  <what>" or "FAIL <what>" and the first few failures; returns 1 on any."""
    print(f"{'ok  ' if not bad else 'FAIL'} {what}")
    for line in bad[:6]:
        print("     ", line)
    return 1 if bad else 0


def ks_statistic(a, b):
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return np.abs(fa - fb).max()


# Two-sample KS at alpha = 0.001: c(alpha) = sqrt(-ln(alpha / 2) / 2) = 1.949.
def ks_critical(n):
    return 1.949 * math.sqrt(2.0 / n)


def ks_boxes(what, ours, ref, w, h):
    """KS of two samples of boxes (x, y, width, height; 0 0 0 0 for none) on a w x h image:
    their area, log aspect ratio (of the sides plus one) and left offset within the room
    left. Prints a line; returns 1 on a failure."""
    n = len(ours)
    critical = ks_critical(n)
    d_area = ks_statistic(ours[:, 2] * ours[:, 3] / (w * h), ref[:, 2] * ref[:, 3] / (w * h))
    d_ratio = ks_statistic(np.log((ours[:, 2] + 1) / (ours[:, 3] + 1)),
                           np.log((ref[:, 2] + 1) / (ref[:, 3] + 1)))
    d_left = ks_statistic(ours[:, 0] / np.maximum(1, w - ours[:, 2] + 1),
                          ref[:, 0] / np.maximum(1, w - ref[:, 2] + 1))
    ok = max(d_area, d_ratio, d_left) < critical
    print(f"{'ok  ' if ok else 'FAIL'} {what}: KS D area {d_area:.4f}, log-ratio {d_ratio:.4f}, "
          f"offset {d_left:.4f} (critical {critical:.4f}, {n} draws each)")
    return 0 if ok else 1


def box_distribution(dump):
    failures = 0
    n = 20000
    for (w, h, scale, ratio) in [(500, 375, (0.08, 1.0), (3 / 4, 4 / 3)),
                                 (100, 1000, (0.08, 1.0), (3 / 4, 4 / 3)),
                                 (224, 224, (0.5, 1.0), (0.5, 2.0))]:
        out = subprocess.run([dump, "boxes", str(w), str(h), str(n), "7", str(scale[0]),
                              str(scale[1]), str(ratio[0]), str(ratio[1])],
                             check=True, capture_output=True, text=True).stdout
        ours = np.array([[int(v) for v in line.split()] for line in out.splitlines()])
        torch.manual_seed(7)
        img = Image.new("RGB", (w, h))
        ref = np.array([T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
                        for _ in range(n)])[:, [1, 0, 3, 2]]  # (top, left, h, w) -> x y w h
        failures += ks_boxes(f"RandomResizedCrop boxes on {w}x{h}, scale {scale}, ratio "
                             f"({ratio[0]:.3g}, {ratio[1]:.3g})", ours, ref, w, h)
    return failures


def chi_square_uniform(counts):
    """(statistic, critical value at alpha = 0.001) of counts against a uniform distribution."""
    n = sum(counts)
    k = len(counts)
    expected = n / k
    stat = sum((c - expected) ** 2 / expected for c in counts)
    df = k - 1
    z = statistics.NormalDist().inv_cdf(1 - 0.001)
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty
    return stat, critical


def draw_distributions(dump):
    failures = 0
    n = 20000
    critical = ks_critical(n)
    for (w, h, scale, ratio) in [(224, 224, (0.02, 0.33), (0.3, 3.3)),
                                 (100, 40, (0.1, 0.9), (0.5, 2.0))]:
        out = subprocess.run([dump, "erase-boxes", str(w), str(h), str(n), "9", str(scale[0]),
                              str(scale[1]), str(ratio[0]), str(ratio[1])], check=True,
                             capture_output=True, text=True).stdout
        ours = np.array([[int(v) for v in line.split()] for line in out.splitlines()])
        torch.manual_seed(9)
        img = torch.zeros(3, h, w)
        ref = []
        for _ in range(n):
            i, j, hh, ww, v = T.RandomErasing.get_params(img, scale, ratio, [0])
            ref.append((j, i, ww, hh) if v is not img else (0, 0, 0, 0))
        ref = np.array(ref)
        failures += ks_boxes(f"RandomErasing boxes on {w}x{h}, scale {scale}, ratio {ratio}",
                             ours, ref, w, h)
    torch.manual_seed(3)
    refs = {"rotation": [T.RandomRotation.get_params([-30.0, 30.0]) for _ in range(n)],
            "blur": [T.GaussianBlur.get_params(0.1, 2.0) for _ in range(n)]}
    for kind, ref in refs.items():
        out = subprocess.run([dump, "draws", kind, str(n), "11"], check=True, capture_output=True,
                             text=True).stdout
        ours = np.array([float(v) for v in out.split()])
        d = ks_statistic(ours, np.array(ref))
        ok = d < critical
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {kind} draws: KS D {d:.4f} against torchvision's "
              f"get_params (critical {critical:.4f}, {n} draws each)")
    names = list(T.TrivialAugmentWide()._augmentation_space(31).keys())
    for kind in ("trivial", "randaugment"):
        out = subprocess.run([dump, "draws", kind, str(n), "13"], check=True, capture_output=True,
                             text=True).stdout.splitlines()
        ops = [line.split()[0] for line in out]
        stat, crit = chi_square_uniform([ops.count(name) for name in names])
        ok = stat < crit
        bins_ok = True
        if kind == "trivial":
            bins = [int(line.split()[1]) for line in out
                    if line.split()[0] not in ("Identity", "AutoContrast", "Equalize")]
            bstat, bcrit = chi_square_uniform([bins.count(b) for b in range(31)])
            bins_ok = bstat < bcrit
        signs = [float(line.split()[2]) < 0 for line in out
                 if line.split()[0] in ("ShearX", "Rotate", "Brightness", "TranslateY")]
        sstat, scrit = chi_square_uniform([sum(signs), len(signs) - sum(signs)])
        ok = ok and bins_ok and sstat < scrit
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {kind} draws: chi-square of the 14 ops {stat:.1f} "
              f"(critical {crit:.1f})" + (f", of the 31 bins {bstat:.1f} (critical {bcrit:.1f})"
                                          if kind == "trivial" else "") +
              f", of the signs {sstat:.1f} (critical {scrit:.1f}), {len(ops)} draws")
    return failures


def invalid_files(dump, work):
    """The two places where an invalid PNG decodes differently from Pillow, as docs/datasets.md
    states them: checked on both sides, so that the documentation stays true."""
    def png(name, w, h, depth, color_type, rows, extra):
        raw = b"".join(b"\x00" + r for r in rows)
        ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
                    png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))
        return path

    def ours(path, color):
        out = subprocess.run([dump, "decode", path, color], check=True, capture_output=True,
                             text=True).stdout.split()
        return [int(v) for v in out[1:]]

    def pillow(path, mode):
        return np.asarray(Image.open(path).convert(mode)).reshape(-1).tolist()

    plte = png_chunk(b"PLTE", bytes([10, 20, 30, 40, 50, 60]))
    indices = [0, 1, 2, 77, 255]
    pal = png("beyond_plte.png", 5, 1, 8, 3, [bytes(indices)], plte + png_chunk(b"tRNS", b"\x64"))
    key = png("trns_key.png", 3, 1, 8, 2, [bytes([10, 20, 30, 40, 50, 60, 40, 50, 61])],
              png_chunk(b"tRNS", struct.pack(">HHH", 40, 50, 60)))
    grey_key = png("trns_grey_key.png", 3, 1, 8, 0, [bytes([7, 9, 7])],
                   png_chunk(b"tRNS", struct.pack(">H", 7)))
    expect = [
        # (what, got, documented)
        ("palette index beyond PLTE, Pillow RGB: a grey ramp", pillow(pal, "RGB"),
         [10, 20, 30, 40, 50, 60] + [v for i in indices[2:] for v in (i, i, i)]),
        ("palette index beyond PLTE, Pillow RGBA: opaque", pillow(pal, "RGBA"),
         [10, 20, 30, 100, 40, 50, 60, 255] + [v for i in indices[2:] for v in (i, i, i, 255)]),
        ("palette index beyond PLTE, stoker kRGB: black", ours(pal, "rgb"),
         [10, 20, 30, 40, 50, 60] + [0] * 9),
        ("palette index beyond PLTE, stoker kRGBA: opaque black", ours(pal, "rgba"),
         [10, 20, 30, 100, 40, 50, 60, 255] + [0, 0, 0, 255] * 3),
        ("palette index beyond PLTE, stoker kGray: 0", ours(pal, "gray"), [18, 48, 0, 0, 0]),
        ("tRNS colour key, Pillow RGBA: the key transparent", pillow(key, "RGBA"),
         [10, 20, 30, 255, 40, 50, 60, 0, 40, 50, 61, 255]),
        ("tRNS colour key, stoker kRGBA: opaque", ours(key, "rgba"),
         [10, 20, 30, 255, 40, 50, 60, 255, 40, 50, 61, 255]),
        ("tRNS colour key, kRGB the same", ours(key, "rgb"), pillow(key, "RGB")),
        ("tRNS grey key, Pillow RGBA: the key transparent", pillow(grey_key, "RGBA"),
         [7, 7, 7, 0, 9, 9, 9, 255, 7, 7, 7, 0]),
        ("tRNS grey key, stoker kRGBA: opaque", ours(grey_key, "rgba"),
         [7, 7, 7, 255, 9, 9, 9, 255, 7, 7, 7, 255]),
    ]
    bad = [f"{what}: {got}, documented {want}" for what, got, want in expect if got != want]
    return report(f"invalid files: {len(expect)} documented differences from Pillow hold", bad)


def fn_ops():
    """The deterministic operations run_fn_cases compares, in vision_dump's op syntax."""
    ops = ["vflip", "gray:1", "gray:3",
           "blur:3,3:0.5,0.5", "blur:5,9:1.3,0.7", "blur:11,11:4.0,4.0", "blur:1,7:0.2,2.5",
           "rotate:33.5:nearest:0:-:0,0,0", "rotate:-71:bilinear:1:-:10,200,30",
           "rotate:12.25:bicubic:0:5,3.5:0,0,0", "rotate:90:nearest:0:-:0,0,0",
           "rotate:270:bilinear:1:-:0,0,0", "rotate:180:bicubic:0:-:0,0,0",
           "rotate:-0.0001:bilinear:0:-:0,0,0", "rotate:135:bicubic:1:-:7,8,9",
           "affine:15:3,-5:1.2:10,-7:bilinear:0,0,0:-",
           "affine:0:0,0:0.7:0,0:nearest:50,60,70:-",
           "affine:-40:10,2:1.0:0,25:bicubic:0,0,0:2,3",
           "sharpness:0.3", "sharpness:2.5", "posterize:0", "posterize:1", "posterize:6",
           "solarize:100", "solarize:0", "solarize:255.5", "autocontrast", "equalize"]
    magnitudes = {
        "Identity": [0.0], "ShearX": [0.3, -0.99], "ShearY": [0.5, -0.2],
        "TranslateX": [7.9, -32.0], "TranslateY": [12.0, -3.6], "Rotate": [30.0, -135.0],
        "Brightness": [0.5, -0.99], "Color": [0.9, -0.5], "Contrast": [0.3, -0.9],
        "Sharpness": [0.99, -0.7], "Posterize": [2.0, 5.0, 8.0], "Solarize": [128.0, 0.0, 12.5],
        "AutoContrast": [0.0], "Equalize": [0.0],
    }
    for op, values in magnitudes.items():
        for m in values:
            ops.append(f"augment:{op}:{m!r}:nearest:0,0,0")
        ops.append(f"augment:{op}:{values[0]!r}:bilinear:128,128,128")
        ops.append(f"augment:{op}:{values[-1]!r}:bicubic:0,0,0")
    grey = ["gray:3", "rotate:20:bilinear:0:-:90,90,90", "rotate:-90:nearest:1:-:0,0,0",
            "blur:5,5:1.5,1.5", "sharpness:1.8", "autocontrast", "equalize", "posterize:3",
            "solarize:77", "augment:ShearX:0.4:bilinear:200,200,200",
            "augment:ShearX:0.4:bilinear:200,0,0", "augment:TranslateY:-9.5:nearest:30,30,30",
            "augment:Rotate:-45:bicubic:60,60,60", "augment:Color:0.5:nearest:0,0,0",
            "augment:Contrast:-0.5:nearest:0,0,0", "augment:Brightness:0.7:nearest:0,0,0"]
    return ops + ["L:" + op for op in grey]


def apply_fn_torchvision(path, op):
    """vision_dump's op on the file in torchvision (PIL); the result's pixels as HWC numpy."""
    img = Image.open(path).convert("RGB")
    if op.startswith("L:"):
        img, op = img.convert("L"), op[2:]
    a = op.split(":")
    name = a[0]

    def pair(text):
        return [float(v) for v in text.split(",")]

    def center(text):
        return None if text == "-" else pair(text)

    def fill(text):  # three different values for a grey image: torchvision raises, as stoker
        values = parse_fill(text)
        return values if img.mode == "L" and len(set(values)) > 1 else fill_for(img, values)

    if name == "vflip":
        img = F.vflip(img)
    elif name == "gray":
        img = F.rgb_to_grayscale(img, int(a[1]))
    elif name == "blur":
        img = F.gaussian_blur(img, [int(v) for v in pair(a[1])], pair(a[2]))
    elif name == "rotate":
        img = F.rotate(img, float(a[1]), INTERP[a[2]], a[3] == "1", center(a[4]), fill(a[5]))
    elif name == "affine":
        img = F.affine(img, angle=float(a[1]), translate=[int(v) for v in pair(a[2])],
                       scale=float(a[3]), shear=pair(a[4]), interpolation=INTERP[a[5]],
                       fill=fill(a[6]), center=center(a[7]))
    elif name == "augment":
        img = _apply_op(img, a[1], float(a[2]), INTERP[a[3]], fill(a[4]))
    elif name == "sharpness":
        img = F.adjust_sharpness(img, float(a[1]))
    elif name == "posterize":
        img = F.posterize(img, int(a[1]))
    elif name == "solarize":
        img = F.solarize(img, float(a[1]))
    elif name == "autocontrast":
        img = F.autocontrast(img)
    elif name == "equalize":
        img = F.equalize(img)
    else:
        raise ValueError(f"unknown op {op}")
    px = np.asarray(img)
    return px.reshape(px.shape[0], px.shape[1], -1)


def run_fn_cases(dump, files, work):
    """Each deterministic operation with given parameters, stoker's functional API against
    torchvision's, on images of every size down to 1 x 1 (and grey ones, "L:"): identical
    pixels, or an error on both sides (a blur kernel wider than the image). Returns
    (failures, runs)."""
    inputs = (files["jpeg"][::4] + files["small"] + files["odd"][:3] + files["grey"] +
              files["tiny"])
    jobs = [(f"f{i}", f, op) for i, (f, op) in
            enumerate((f, op) for op in fn_ops() for f in inputs)]
    with open(os.path.join(work, "fn_jobs.txt"), "w") as out:
        for job_id, f, op in jobs:
            out.write(f"{job_id} {f} {op}\n")
    outdir = os.path.join(work, "fn_out")
    os.makedirs(outdir, exist_ok=True)
    result = subprocess.run([dump, "fn", os.path.join(work, "fn_jobs.txt"), outdir], check=True,
                            capture_output=True, text=True).stdout
    lines = {line.split(" ", 1)[0]: line for line in result.splitlines()}
    groups = {}
    for job_id, f, op in jobs:
        a = op.split(":")
        group = ("L:" if a[0] == "L" else "") + (a[1] if a[0] == "L" else a[0])
        if group.endswith("augment"):
            group += " " + (a[2] if a[0] == "L" else a[1])
        g = groups.setdefault(group, {"n": 0, "values": 0, "refused": 0, "fail": []})
        g["n"] += 1
        fields = lines[job_id].split(" ", 3)
        try:
            ref = apply_fn_torchvision(f, op)
        except (RuntimeError, ValueError) as e:
            if fields[1] != "error":
                g["fail"].append(f"{os.path.basename(f)} [{op}]: torchvision raises ({e}), "
                                 f"stoker does not")
            g["refused"] += 1
            continue
        if fields[1] == "error":
            g["fail"].append(f"{os.path.basename(f)} [{op}]: stoker: {fields[3]}")
            continue
        shape = [int(v) for v in fields[1].split("x")]
        ours = np.fromfile(os.path.join(outdir, job_id + ".bin"), dtype=np.uint8)
        if list(ref.shape) != shape:
            g["fail"].append(f"{os.path.basename(f)} [{op}]: shape {shape}, torchvision "
                             f"{list(ref.shape)}")
            continue
        ours = ours.reshape(shape)
        g["values"] += ours.size
        if not np.array_equal(ours, ref):
            diff = np.abs(ours.astype(np.int32) - ref.astype(np.int32))
            g["fail"].append(f"{os.path.basename(f)} [{op}]: max |diff| {diff.max()}, "
                             f"{100 * (diff == 0).mean():.2f}% identical")
    failures = 0
    for group, g in groups.items():
        ok = not g["fail"]
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} functional {group} (exact): {g['n']} runs, "
              f"{g['values']} values compared" +
              (f", {g['refused']} refused by both" if g["refused"] else ""))
        for line in g["fail"][:6]:
            print("     ", line)
    return failures, len(jobs)


def kernels_and_magnitudes(dump):
    """GaussianBlur's 1-D kernels and the augment ops' magnitude bins, value by value against
    torchvision's (_get_gaussian_kernel1d, _augmentation_space). Returns the failures."""
    failures = 0
    torch.manual_seed(5)
    sigmas = [0.1, 0.5, 1.0, 2.0, 1.3333, 5.0, 7.7, 20.0] + [
        T.GaussianBlur.get_params(0.1, 2.0) for _ in range(24)]
    sizes = [1, 3, 5, 7, 9, 23, 31, 65, 101, 129, 257, 1025]
    bad = []
    n = 0
    for size in sizes:
        for sigma in sigmas:
            out = subprocess.run([dump, "kernel", str(size), repr(sigma)], check=True,
                                 capture_output=True, text=True).stdout.split()
            ours = [float.fromhex(v) for v in out]
            ref = [float(v) for v in Ft._get_gaussian_kernel1d(size, sigma).tolist()]
            n += 1
            if ours != ref:
                worst = max((abs(x - y) for x, y in zip(ours, ref)), default=float("inf"))
                bad.append(f"size {size}, sigma {sigma!r}: {len(ours)} values, "
                           f"{sum(x != y for x, y in zip(ours, ref))} differ (max {worst:.3g})")
    failures += report(f"GaussianBlur kernels (exact): {n} kernels, sizes {sizes[0]}.."
                       f"{sizes[-1]}", bad)
    bad = []
    n = 0
    for bins in (31, 2, 10, 17, 33, 50, 100):
        for w, h in ((224, 224), (37, 29), (150, 260)):
            out = subprocess.run([dump, "magnitudes", str(bins), str(w), str(h)], check=True,
                                 capture_output=True, text=True).stdout.splitlines()
            spaces = {1: T.TrivialAugmentWide()._augmentation_space(bins),
                      0: T.RandAugment()._augmentation_space(bins, (h, w))}
            seen = set()
            for line in out:
                wide, op, bin_, magnitude = line.split()
                magnitudes, _ = spaces[int(wide)][op]
                ref = float(magnitudes[int(bin_)].item()) if magnitudes.ndim > 0 else 0.0
                n += 1
                seen.add((int(wide), op))
                if float.fromhex(magnitude) != ref:
                    bad.append(f"{'wide' if int(wide) else 'randaugment'} {op} bin {bin_} of "
                               f"{bins} on {w}x{h}: {float.fromhex(magnitude)!r}, "
                               f"torchvision {ref!r}")
            want = {(k, op) for k, space in spaces.items() for op in space}
            if seen != want:
                bad.append(f"{bins} bins on {w}x{h}: ops {sorted(seen ^ want)} on one side only")
    failures += report(f"augment magnitude bins (exact): {n} values, 7 bin counts, 3 image "
                       f"sizes, both spaces", bad)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--only", help="run only the pipeline groups whose name holds this")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work = a.workdir or tempfile.mkdtemp(prefix="stoker-parity-")
    os.makedirs(work, exist_ok=True)
    try:
        files = make_images(work)
        jobs = []
        for case in cases(files):
            group, f, spec, seeds = case[:4]
            exact = len(case) > 4 and case[4]
            if a.only and a.only not in group:
                continue
            for seed in seeds:
                jobs.append((f"c{len(jobs)}", seed, f, spec, group, exact))
        with open(os.path.join(work, "jobs.txt"), "w") as out:
            for job_id, seed, f, spec, _, _ in jobs:
                out.write(f"{job_id} {seed} {f} {spec}\n")
        outdir = os.path.join(work, "out")
        os.makedirs(outdir, exist_ok=True)
        result = subprocess.run([a.dump, "run", os.path.join(work, "jobs.txt"), outdir],
                                check=True, capture_output=True, text=True).stdout
        lines = {line.split(" ", 1)[0]: line for line in result.splitlines()}
        groups = {}
        for job_id, seed, f, spec, group, exact in jobs:
            g = groups.setdefault(group, {"n": 0, "max": 0.0, "min_identical": 1.0, "sum": 0.0,
                                          "fail": [], "exact": exact})
            g["n"] += 1
            fields = lines[job_id].split(" ", 3)
            if fields[1] == "error":
                g["fail"].append(f"{os.path.basename(f)} [{spec}]: stoker: {fields[3]}")
                continue
            dtype, shape, trace = fields[1], [int(v) for v in fields[2].split("x")], parse_trace(fields[3])
            raw = np.fromfile(os.path.join(outdir, job_id + ".bin"), dtype=np.uint8)
            ours = torch.from_numpy(raw.copy()).view(TORCH_DTYPES[dtype]).reshape(shape)
            try:
                ref, normalized = apply_torchvision(f, spec, trace, outdir, job_id)
            except AssertionError as e:
                g["fail"].append(f"{os.path.basename(f)} [{spec}] seed {seed}: {e}")
                continue
            if list(ref.shape) != shape or ref.dtype != ours.dtype:
                g["fail"].append(f"{os.path.basename(f)} [{spec}] seed {seed}: shape {shape} {dtype}, "
                                 f"torchvision {list(ref.shape)} {ref.dtype}")
                continue
            worst, identical = compare(ours, ref, normalized)
            g["max"] = max(g["max"], worst)
            g["min_identical"] = min(g["min_identical"], identical)
            g["sum"] += identical
            g["compared"] = g.get("compared", 0) + 1
            if (exact and identical < 1.0) or worst > 1.0 + 1e-3 or identical < 0.99:
                g["fail"].append(f"{os.path.basename(f)} [{spec}] seed {seed}: max |diff| "
                                 f"{worst:.3f} levels, {100 * identical:.2f}% identical")
        failures = 0
        for group, g in groups.items():
            ok = not g["fail"]
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {group}{' (exact)' if g['exact'] else ''}: "
                  f"{g['n']} runs, max |diff| {g['max']:.3g} "
                  f"levels, identical {100 * g['sum'] / max(1, g.get('compared', 0)):.3f}% on "
                  f"average, {100 * g['min_identical']:.2f}% at worst")
            for line in g["fail"][:6]:
                print("     ", line)
        fn_failures, fn_runs = (0, 0) if a.only else run_fn_cases(a.dump, files, work)
        failures += fn_failures
        if not a.only:
            failures += kernels_and_magnitudes(a.dump)
            failures += invalid_files(a.dump, work)
            failures += box_distribution(a.dump)
            failures += draw_distributions(a.dump)
        print(f"parity: {len(jobs)} pipeline runs in {len(groups)} groups, {fn_runs} functional "
              f"runs, {'all within bounds' if failures == 0 else f'{failures} groups FAILED'}")
        return 1 if failures else 0
    finally:
        if not a.keep and not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
