#!/usr/bin/python3
"""Generates the real-pipeline data of bench/compare, once, from a fixed seed.

  gen_data.py DIR [--images N] [--tokens T]

DIR/images/class_<k>/img_<i>.jpg: N JPEGs (quality 90) of 256-500 px a side in 10 classes,
smooth random colour fields with noise, so they compress like photos rather than like noise.
DIR/tokens.bin: T random uint16 tokens below 50,257 (GPT-2's vocabulary), headerless
(nanoGPT's format). A DIR/.done-<N>-<T> marker makes a second call a no-op.
"""
import argparse
import os
import sys

import numpy as np
from PIL import Image


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=100_000_000)
    args = parser.parse_args()
    marker = os.path.join(args.dir, f".done-{args.images}-{args.tokens}")
    if os.path.exists(marker):
        return
    rng = np.random.default_rng(20240520)
    images = os.path.join(args.dir, "images")
    for k in range(10):
        os.makedirs(os.path.join(images, f"class_{k}"), exist_ok=True)
    # A call with more images before this one left images this one must not have, and its
    # marker, which would now be wrong.
    for name in os.listdir(args.dir):
        if name.startswith(".done-"):
            os.remove(os.path.join(args.dir, name))
    for k in range(10):
        folder = os.path.join(images, f"class_{k}")
        for name in os.listdir(folder):
            stem = name[4:].split(".")[0]
            if name.startswith("img_") and stem.isdigit() and int(stem) >= args.images:
                os.remove(os.path.join(folder, name))
    for i in range(args.images):
        w, h = (int(v) for v in rng.integers(256, 501, size=2))
        coarse = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
        field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), dtype=np.int16)
        noise = rng.integers(-12, 13, size=(h, w, 3), dtype=np.int16)
        pixels = np.clip(field + noise, 0, 255).astype(np.uint8)
        path = os.path.join(images, f"class_{i % 10}", f"img_{i:05d}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
    tokens = rng.integers(0, 50257, size=args.tokens, dtype=np.uint16)
    tokens.tofile(os.path.join(args.dir, "tokens.bin"))
    open(marker, "w").close()
    print(f"gen_data: {args.images} JPEGs and {args.tokens:,} tokens in {args.dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
