#!/usr/bin/python3
"""Callgrind instruction counts of stoker-bench's hot path, in-process (num_workers 0, which runs
the same fetch -> collate -> write-slot code as a worker). Prints one JSON object.

  profile.py STOKER_BENCH OUTDIR

Each workload runs at two epoch sizes, N and 2N samples (one epoch, no warm-up): the difference
of the two totals divided by N is the cost of one more sample, free of start-up (ring setup,
the sample-size probe, static initialisation). The top functions come from the 2N run, by
exclusive instruction count (callgrind_annotate).
"""
import json
import os
import re
import subprocess
import sys

WORKLOADS = {"tiny": (12800, 256), "image": (320, 64)}  # N samples, batch size


def callgrind(bench, outdir, workload, samples):
    out = os.path.join(outdir, f"callgrind.{workload}.{samples}")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    bench, "--workload", workload, "--workers", "0", "--epochs", "1",
                    "--warmup", "0", "--samples", str(samples)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = subprocess.run(["callgrind_annotate", "--threshold=100", out], check=True,
                          capture_output=True, text=True).stdout
    return out, text


def total_ir(text):
    m = re.search(r"^\s*([\d,]+)\s+(?:\(100\.0%\)\s+)?PROGRAM TOTALS", text, re.M)
    return int(m.group(1).replace(",", ""))


def top_functions(text, count=12):
    rows = []
    for m in re.finditer(r"^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.+?)\s*$", text, re.M):
        if "PROGRAM TOTALS" in m.group(3):
            continue
        name = m.group(3)
        name = re.sub(r"\s+\[[^\]]*\]$", "", name)  # drop the object file
        name = name.split(":", 1)[1] if ":" in name.split("(")[0] else name
        rows.append({"ir": int(m.group(1).replace(",", "")), "percent": float(m.group(2)),
                     "function": name})
        if len(rows) == count:
            break
    return rows


def main():
    bench, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    result = {"command": "bench/compare/profile.py " + bench + " " + outdir, "workloads": {}}
    for workload, (n, batch) in WORKLOADS.items():
        _, small = callgrind(bench, outdir, workload, n)
        path, large = callgrind(bench, outdir, workload, 2 * n)
        per_sample = (total_ir(large) - total_ir(small)) / n
        result["workloads"][workload] = {
            "samples": [n, 2 * n], "batch_size": batch,
            "total_ir": [total_ir(small), total_ir(large)],
            "ir_per_sample": per_sample, "ir_per_batch": per_sample * batch,
            "top": top_functions(large), "callgrind_file": path,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
