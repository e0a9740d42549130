"""Checks stoker-tune end to end (registered with ctest by tools/CMakeLists.txt).

usage: check_stoker_tune.py {grid,progressive,sources,work,prefetch,bad_flags} STOKER_TUNE WORKDIR
                            [RSVG_CONVERT] [images]

grid / progressive: a short run on the tiny workload; the JSON must carry every key, each
result its figures, and the recommendation must be a measured setting within 5% of the best;
the SVG must parse as XML with two panels, a line per batch size and a legend, and render to
PNG when rsvg-convert is given. sources: a .npy file, a token shard and (with `images`) an
image folder, written here, each tuned briefly. work: --epochs times whole epochs, and
--simulate-work-us 200 (at most 5,000 samples/s per worker) lowers the measured throughput far
below the same setting without it. prefetch: --prefetch sweeps prefetch_factor in both
searches. bad_flags: each bad command line exits 2 with the usage.
"""
import json
import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

SVG = "{http://www.w3.org/2000/svg}"


def fail(message):
    print("check_stoker_tune: " + message, file=sys.stderr)
    sys.exit(1)


def run(tool, args, timeout=60):
    return subprocess.run([tool] + args, capture_output=True, text=True, timeout=timeout)


def check_json(doc, strategy):
    for key in ("tool", "command", "dataset", "system", "settings", "results",
                "recommendation", "elapsed_s"):
        if key not in doc:
            fail("JSON lacks '%s'" % key)
    if doc["settings"]["strategy"] != strategy:
        fail("strategy is %r" % doc["settings"]["strategy"])
    results = doc["results"]
    if not results:
        fail("no results")
    for r in results:
        for key in ("num_workers", "batch_size", "ok", "samples_per_s", "bytes_per_s",
                    "peak_tree_bytes", "ring_resident_bytes", "wait_fraction", "seconds",
                    "verdict", "diagnosis"):
            if key not in r:
                fail("result lacks '%s': %r" % (key, r))
        if not r["ok"]:
            fail("a setting failed: %r" % r)
        if r["samples_per_s"] <= 0 or r["peak_tree_bytes"] <= 0:
            fail("a setting measured nothing: %r" % r)
        # Every loader has a ring (one slot in-process), and the tree's peak holds it.
        if not 0 < r["ring_resident_bytes"] <= r["peak_tree_bytes"]:
            fail("the ring is not in the tree's peak: %r" % r)
        if not 0 <= r["wait_fraction"] <= 1:
            fail("wait_fraction out of range: %r" % r)
    rec = doc["recommendation"]
    best = max(r["samples_per_s"] for r in results)
    if not any(r["num_workers"] == rec["num_workers"] and r["batch_size"] == rec["batch_size"]
               for r in results):
        fail("the recommendation was not measured: %r" % rec)
    if rec["samples_per_s"] < 0.95 * best:
        fail("recommended %.0f samples/s, under 95%% of the best %.0f" %
             (rec["samples_per_s"], best))
    if abs(rec["best_samples_per_s"] - best) > 1e-6 * best:
        fail("best_samples_per_s %r is not the best result %r" % (rec["best_samples_per_s"], best))
    if not rec["reason"].startswith("num_workers=%d, batch_size=%d: " %
                                    (rec["num_workers"], rec["batch_size"])):
        fail("reason does not name the setting: %r" % rec["reason"])
    return results


def check_svg(path, results, rsvg, workdir):
    root = ET.parse(path).getroot()
    if root.tag != SVG + "svg":
        fail("the SVG's root is %s" % root.tag)
    panels = root.findall(SVG + "g")
    if len(panels) != 2:
        fail("expected 2 panels, found %d" % len(panels))
    batches = {r["batch_size"] for r in results}
    for g in panels:
        if len(g.findall(SVG + "polyline")) != len(batches):
            fail("a panel should have one line per batch size (%d)" % len(batches))
    texts = " ".join(t.text or "" for t in root.iter(SVG + "text"))
    for needle in ["num_workers", "throughput", "peak memory", "recommended"] + \
                  ["batch_size=%d" % b for b in batches]:
        if needle not in texts:
            fail("the SVG has no text '%s'" % needle)
    if rsvg:
        png = os.path.join(workdir, "chart.png")
        subprocess.run([rsvg, "-o", png, path], check=True)
        with open(png, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail("rsvg-convert did not write a PNG")


def check_run(mode, tool, workdir, rsvg):
    svg = os.path.join(workdir, "chart.svg")
    if mode == "grid":
        args = ["--workload", "tiny", "--strategy", "grid", "--workers", "0,1,2",
                "--batch", "64,256", "--seconds", "0.3", "--warmup", "0.1"]
    else:
        args = ["--workload", "tiny", "--seconds", "0.2", "--warmup", "0.1", "--max-workers", "3",
                "--simulate-work-us", "1"]
    p = run(tool, args + ["--json", "--svg", svg])
    if p.returncode != 0:
        fail("stoker-tune exited %d:\n%s" % (p.returncode, p.stderr))
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        fail("stdout is not JSON (%s):\n%s" % (e, p.stdout))
    results = check_json(doc, mode)
    if mode == "grid" and len(results) != 6:
        fail("a 3 x 2 grid gave %d results" % len(results))
    if mode == "progressive":
        if results[0]["num_workers"] != 1:
            fail("progressive should start at a quarter of the cores (>= 1): %r" % results[0])
    if "recommended:" not in p.stderr or "samples/s" not in p.stderr:
        fail("the table and recommendation should go to stderr with --json:\n" + p.stderr)
    check_svg(svg, results, rsvg, workdir)


def write_npy(path, rows, cols):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % (rows * cols), *[float(i) for i in range(rows * cols)]))


def write_png(path, side, shade):
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes([shade, 255 - shade, 128]) * side for _ in range(side))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def check_sources(tool, workdir, images):
    npy = os.path.join(workdir, "x.npy")
    write_npy(npy, 2000, 16)
    tokens = os.path.join(workdir, "tokens.bin")
    with open(tokens, "wb") as f:
        f.write(struct.pack("<20000H", *[i % 50257 for i in range(20000)]))
    sources = [["--npy", npy], ["--tokens", tokens, "--window", "64"]]
    if images:
        root = os.path.join(workdir, "images")
        for label in ("cat", "dog"):
            os.makedirs(os.path.join(root, label), exist_ok=True)
            for i in range(4):
                write_png(os.path.join(root, label, "%d.png" % i), 32, 40 * i)
        sources.append(["--images", root])
    for source in sources:
        p = run(tool, source + ["--strategy", "grid", "--workers", "0,1", "--batch", "4",
                                "--seconds", "0.1", "--warmup", "0.05", "--json"])
        if p.returncode != 0:
            fail("%r exited %d:\n%s" % (source, p.returncode, p.stderr))
        results = json.loads(p.stdout)["results"]
        if len(results) != 2 or not all(r["ok"] for r in results):
            fail("%r: %r" % (source, results))


def check_bad_flags(tool):
    cases = [
        [],
        ["--workload", "huge"],
        ["--workload", "tiny", "--frobnicate"],
        ["--workload", "tiny", "--seconds"],
        ["--workload", "tiny", "--seconds", "-1"],
        ["--workload", "tiny", "--strategy", "random"],
        ["--workload", "tiny", "--strategy", "grid", "--workers", "1,x"],
        ["--workload", "tiny", "--workers", "1,2"],
        ["--workload", "tiny", "--npy", "a.npy"],
        ["--workload", "tiny", "--window", "8"],
    ]
    for args in cases:
        p = run(tool, args)
        if p.returncode != 2:
            fail("%r exited %d, not 2" % (args, p.returncode))
        if not p.stderr.startswith("stoker-tune: ") or "usage: stoker-tune" not in p.stderr:
            fail("%r did not explain itself and print the usage:\n%s" % (args, p.stderr))
    p = run(tool, ["--help"])
    if p.returncode != 0 or "usage: stoker-tune" not in p.stdout:
        fail("--help should print the usage on stdout and exit 0")


def check_work(tool):
    """--epochs, and --simulate-work-us, on one setting of the tiny workload."""
    rates = {}
    for work, timing in ((0, ["--epochs", "2"]), (0, ["--seconds", "0.3"]),
                         (200, ["--seconds", "0.3"])):
        args = ["--workload", "tiny", "--strategy", "grid", "--workers", "1", "--batch", "64",
                "--warmup", "0.1", "--simulate-work-us", str(work), "--json"] + timing
        p = run(tool, args, timeout=120)
        if p.returncode != 0:
            fail("stoker-tune %s exited %d:\n%s" % (" ".join(args), p.returncode, p.stderr))
        doc = json.loads(p.stdout)
        results = doc["results"]
        if len(results) != 1 or not results[0]["ok"] or results[0]["samples_per_s"] <= 0:
            fail("one setting should give one good result: %r" % results)
        if timing[0] == "--epochs":
            if doc["settings"].get("epochs") != 2:
                fail("the settings should record --epochs 2: %r" % doc["settings"])
        else:
            rates[work] = results[0]["samples_per_s"]
    # 200 us per sample allows at most 5,000 samples/s on one worker; tiny alone runs far faster.
    if not rates[200] < 5500 or not rates[200] * 10 < rates[0]:
        fail("--simulate-work-us 200 gave %.0f samples/s against %.0f without" %
             (rates[200], rates[0]))


def check_prefetch(tool):
    """--prefetch sweeps prefetch_factor: the grid measures every value, the progressive search
    tries the others at its best setting; the JSON and the table name each."""
    args = ["--workload", "tiny", "--strategy", "grid", "--workers", "1", "--batch", "64",
            "--prefetch", "0,2,8", "--seconds", "0.2", "--warmup", "0.05", "--json"]
    p = run(tool, args, timeout=120)
    if p.returncode != 0:
        fail("stoker-tune %s exited %d:\n%s" % (" ".join(args), p.returncode, p.stderr))
    doc = json.loads(p.stdout)
    got = sorted(r["prefetch_factor"] for r in doc["results"] if r["ok"])
    if got != [0, 2, 8] or doc["settings"]["prefetch_factors"] != [0, 2, 8]:
        fail("the grid should measure prefetch_factor 0, 2 and 8: %r" % doc["results"])
    if "adaptive" not in p.stderr or "prefetch" not in p.stderr:
        fail("the table should name the prefetch of each row:\n" + p.stderr)
    args = ["--workload", "tiny", "--max-workers", "1", "--batch", "64", "--prefetch", "0,4",
            "--seconds", "0.2", "--warmup", "0.05", "--json"]
    p = run(tool, args, timeout=120)
    if p.returncode != 0:
        fail("stoker-tune %s exited %d:\n%s" % (" ".join(args), p.returncode, p.stderr))
    results = json.loads(p.stdout)["results"]
    tried = [r for r in results if r["prefetch_factor"] == 4]
    if len(tried) != 1 or "vs prefetch_factor=adaptive" not in tried[0]["note"]:
        fail("the progressive search should try prefetch_factor 4 once at its best: %r" % results)


def main():
    mode, tool, workdir = sys.argv[1:4]
    rsvg = sys.argv[4] if len(sys.argv) > 4 else ""
    os.makedirs(workdir, exist_ok=True)
    if mode == "bad_flags":
        check_bad_flags(tool)
    elif mode == "sources":
        check_sources(tool, workdir, "images" in sys.argv[5:])
    elif mode == "work":
        check_work(tool)
    elif mode == "prefetch":
        check_prefetch(tool)
    else:
        check_run(mode, tool, workdir, rsvg)
    print("check_stoker_tune: %s passed" % mode)


if __name__ == "__main__":
    main()
