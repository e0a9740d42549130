#!/usr/bin/python3
"""Parity of stoker::vision with torchvision 0.14 (Pillow 9.4) on generated images.

  parity.py DUMP [--workdir DIR] [--keep]

Writes small JPEG (baseline and progressive; 4:4:4, 4:2:2 and 4:2:0; grey; CMYK), PNG (RGB, RGBA,
grey, grey + alpha, palette with and without transparency, 1/2/4-bit grey, 16-bit grey, RGB and
grey + alpha) and WebP (lossy, lossless, with alpha) files, runs each pipeline case through
DUMP (vision_dump) and through torchvision on the same file with the random parameters DUMP
drew (crop boxes, flips, jitter factors and order, replayed with torchvision's functional API),
and compares: uint8 outputs must be within 1 level with at least 99% of values identical; float
outputs within 1/255 before normalisation, likewise. Then compares the distribution of
RandomResizedCrop's boxes with torchvision's (two-sample Kolmogorov-Smirnov on the area fraction
and the log aspect ratio). Prints one line per case group; exits 1 on any failure.
"""
import argparse
import math
import os
import shutil
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
    return files


def cases(files):
    """(group, file, spec, seeds)."""
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
    return out


def apply_torchvision(path, spec, trace):
    img = Image.open(path).convert("RGB")
    boxes = iter(trace["boxes"])
    flips = iter(trace["flips"])
    jitters = iter(trace["jitters"])
    normalize = False
    dtype, layout = None, "chw"
    for step in ([] if spec == "-" else spec.split(";")):
        a = step.split(":")
        name = a[0]
        if name == "Resize":
            interp = INTERP[a[2] if len(a) > 2 else "bilinear"]
            size = [int(v) for v in a[1].split("x")] if "x" in a[1] else int(a[1])
            img = T.Resize(size, interp)(img)
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
        elif name == "Normalize":
            normalize = True
        elif name == "Out":
            dtype, layout = a[1], a[2] if len(a) > 2 else "chw"
        elif name == "Mode":
            pass
    if normalize or dtype in ("float32", "bfloat16", "float16"):
        t = F.normalize(F.to_tensor(img), MEAN, STD) if normalize else F.to_tensor(img)
        t = {"bfloat16": t.to(torch.bfloat16), "float16": t.to(torch.float16)}.get(dtype, t)
    else:
        t = F.pil_to_tensor(img)
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
        jitters.append((order, *[None if v == "-" else float(v) for v in f[1:5]]))
    return {"boxes": boxes, "flips": flips, "jitters": jitters}


TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}


def compare(ours, ref, normalized):
    """(max difference in 8-bit levels, fraction of values identical)."""
    if ours.dtype == torch.uint8:
        diff = (ours.to(torch.int32) - ref.to(torch.int32)).abs().to(torch.float64)
    else:
        diff = (ours.to(torch.float64) - ref.to(torch.float64)).abs() * 255.0
        if normalized:  # back to pixel levels: x = value * std + mean
            std = torch.tensor(STD, dtype=torch.float64)
            shape = [3, 1, 1] if ours.shape[0] == 3 else [1, 1, 3]
            diff = diff * std.reshape(shape)
    identical = (ours == ref).to(torch.float64).mean().item()
    return diff.max().item(), identical


def ks_statistic(a, b):
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return np.abs(fa - fb).max()


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
                        for _ in range(n)])  # (top, left, h, w)
        ours_area = ours[:, 2] * ours[:, 3] / (w * h)
        ref_area = ref[:, 3] * ref[:, 2] / (w * h)
        ours_ratio = np.log(ours[:, 2] / ours[:, 3])
        ref_ratio = np.log(ref[:, 3] / ref[:, 2])
        # Two-sample KS at alpha = 0.001: c(alpha) = sqrt(-ln(alpha / 2) / 2) = 1.949.
        critical = 1.949 * math.sqrt(2.0 / n)
        d_area = ks_statistic(ours_area, ref_area)
        d_ratio = ks_statistic(ours_ratio, ref_ratio)
        # The offsets: uniform over the room left, in both.
        d_left = ks_statistic(ours[:, 0] / np.maximum(1, w - ours[:, 2] + 1),
                              ref[:, 1] / np.maximum(1, w - ref[:, 3] + 1))
        ok = max(d_area, d_ratio, d_left) < critical
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} RandomResizedCrop boxes on {w}x{h}, scale {scale}, "
              f"ratio ({ratio[0]:.3g}, {ratio[1]:.3g}): KS D area {d_area:.4f}, log-ratio "
              f"{d_ratio:.4f}, offset {d_left:.4f} (critical {critical:.4f}, {n} draws each)")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work = a.workdir or tempfile.mkdtemp(prefix="stoker-parity-")
    os.makedirs(work, exist_ok=True)
    try:
        files = make_images(work)
        jobs = []
        for group, f, spec, seeds in cases(files):
            for seed in seeds:
                jobs.append((f"c{len(jobs)}", seed, f, spec, group))
        with open(os.path.join(work, "jobs.txt"), "w") as out:
            for job_id, seed, f, spec, _ in jobs:
                out.write(f"{job_id} {seed} {f} {spec}\n")
        outdir = os.path.join(work, "out")
        os.makedirs(outdir, exist_ok=True)
        result = subprocess.run([a.dump, "run", os.path.join(work, "jobs.txt"), outdir],
                                check=True, capture_output=True, text=True).stdout
        lines = {line.split(" ", 1)[0]: line for line in result.splitlines()}
        groups = {}
        for job_id, seed, f, spec, group in jobs:
            g = groups.setdefault(group, {"n": 0, "max": 0.0, "min_identical": 1.0, "sum": 0.0,
                                          "fail": []})
            g["n"] += 1
            fields = lines[job_id].split(" ", 3)
            if fields[1] == "error":
                g["fail"].append(f"{os.path.basename(f)} [{spec}]: stoker: {fields[3]}")
                continue
            dtype, shape, trace = fields[1], [int(v) for v in fields[2].split("x")], parse_trace(fields[3])
            raw = np.fromfile(os.path.join(outdir, job_id + ".bin"), dtype=np.uint8)
            ours = torch.from_numpy(raw.copy()).view(TORCH_DTYPES[dtype]).reshape(shape)
            ref, normalized = apply_torchvision(f, spec, trace)
            if list(ref.shape) != shape or ref.dtype != ours.dtype:
                g["fail"].append(f"{os.path.basename(f)} [{spec}] seed {seed}: shape {shape} {dtype}, "
                                 f"torchvision {list(ref.shape)} {ref.dtype}")
                continue
            worst, identical = compare(ours, ref, normalized)
            g["max"] = max(g["max"], worst)
            g["min_identical"] = min(g["min_identical"], identical)
            g["sum"] += identical
            g["compared"] = g.get("compared", 0) + 1
            if worst > 1.0 + 1e-3 or identical < 0.99:
                g["fail"].append(f"{os.path.basename(f)} [{spec}] seed {seed}: max |diff| "
                                 f"{worst:.3f} levels, {100 * identical:.2f}% identical")
        failures = 0
        for group, g in groups.items():
            ok = not g["fail"]
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {group}: {g['n']} runs, max |diff| {g['max']:.3g} "
                  f"levels, identical {100 * g['sum'] / max(1, g.get('compared', 0)):.3f}% on "
                  f"average, {100 * g['min_identical']:.2f}% at worst")
            for line in g["fail"][:6]:
                print("     ", line)
        failures += box_distribution(a.dump)
        print(f"parity: {len(jobs)} runs in {len(groups)} groups, "
              f"{'all within bounds' if failures == 0 else f'{failures} groups FAILED'}")
        return 1 if failures else 0
    finally:
        if not a.keep and not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
