#!/usr/bin/python3
"""Measures a command's process tree from outside: its peak memory, as the memory cgroup and the
OOM killer see it, sampled through the whole run.

  bench/tree_memory.py [--interval-ms 2] [--max-cpu-share 1] [--prefix outside_] -- COMMAND ...

Each pass reads, for the command's process and every descendant, its anonymous memory (Pss_Anon
of /proc/PID/smaps_rollup: a page shared copy-on-write is split among the processes that map it,
so the tree counts it once), and adds each shared-memory object (memfd, /dev/shm file, System V
segment, shared anonymous mapping) once, by inode, as the blocks the kernel has allocated to it
(st_blocks of /proc/PID/map_files/START-END; reading map_files needs root or CAP_SYS_ADMIN).
File-backed pages (code, libraries, memory-mapped data) are page cache and left out. A pass
during which a process was forked or reaped is read again (shares move then). Passes follow one
another every --interval-ms; with --max-cpu-share S < 1, a pass that took c seconds of this
script's CPU waits at least c / S before the next (the reference measurement of
bench/memory_check.sh uses no limit; bench/compare/run.sh's PyTorch and libtorch rows 0.01).

The command's standard output is passed through; each line that is a JSON object gets these
fields (their names after --prefix): peak_tree_mb (MB, 10^6 bytes), ring_resident_mb (the
objects named memfd:stoker-ring at that pass), tree_anonymous_mb, tree_processes,
peak_tree_at_s (seconds after the command started), memory_sampler (passes, skipped passes,
this script's CPU time). With no JSON line, one is printed with them alone.

This is an independent implementation of what stoker's own sampler (src/os/proc.hpp,
TreeMemorySampler, in stoker-bench) measures from inside, kept apart so that one checks the
other.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

SHMEM_PREFIXES = ("/memfd:", "/dev/shm/", "/run/shm/", "/SYSV", "/dev/zero")
RING_PREFIX = "/memfd:stoker-ring"


def tree(root):
    """root and its descendants, parents first (each thread's children file)."""
    out = [root]
    i = 0
    while i < len(out):
        pid = out[i]
        i += 1
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return out


def kb_fields(path, keys):
    values = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return values


def anonymous(pid):
    """Pss_Anon of smaps_rollup; RssAnon of statm when the kernel has no Pss_Anon; None when the
    process is gone."""
    values = kb_fields(f"/proc/{pid}/smaps_rollup", ("Pss_Anon",))
    if values is not None and "Pss_Anon" in values:
        return values["Pss_Anon"]
    try:
        with open(f"/proc/{pid}/statm") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def shmem_mappings(pid):
    """(range, device, inode, name) of each shared mapping of shared memory in /proc/PID/maps."""
    out = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.readlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 6 or len(fields[1]) != 4 or fields[1][3] != "s":
            continue
        name = fields[5].rstrip("\n")
        if not name.startswith(SHMEM_PREFIXES):
            continue
        start, _, end = fields[0].partition("-")
        try:
            rng = f"{int(start, 16):x}-{int(end, 16):x}"
            inode = int(fields[4])
        except ValueError:
            continue
        out.append((rng, fields[3], inode, name))
    return out


def one_pass(root):
    """(total, anonymous, ring, processes, unmeasured) of one consistent pass, or None."""
    for _ in range(3):
        pids = tree(root)
        anon = 0
        readable = 0
        objects = {}
        for pid in pids:
            a = anonymous(pid)
            if a is None:
                continue
            anon += a
            readable += 1
            for rng, device, inode, name in shmem_mappings(pid):
                if (device, inode) not in objects:
                    objects[(device, inode)] = (pid, rng, name)
        shared = 0
        ring = 0
        unmeasured = 0
        for (device, inode), (pid, rng, name) in objects.items():
            try:
                st = os.stat(f"/proc/{pid}/map_files/{rng}")
            except OSError:
                unmeasured += 1
                continue
            if st.st_ino != inode:
                unmeasured += 1
                continue
            shared += st.st_blocks * 512
            if name.startswith(RING_PREFIX):
                ring += st.st_blocks * 512
        if readable == 0:
            return None
        if tree(root) == pids:
            return anon + shared, anon, ring, readable, unmeasured
    return None


class Sampler(threading.Thread):
    def __init__(self, root, interval, share, started):
        super().__init__(daemon=True)
        self.root, self.interval, self.share, self.started = root, interval, share, started
        self.stop = threading.Event()
        self.peak = None  # (total, anon, ring, processes, unmeasured, at_s)
        self.passes = self.skipped = 0
        self.cpu = 0.0

    def run(self):
        while not self.stop.is_set():
            cpu0 = time.thread_time()
            at = time.monotonic() - self.started
            m = one_pass(self.root)
            cpu = time.thread_time() - cpu0
            self.cpu += cpu
            if m is None:
                self.skipped += 1
            else:
                self.passes += 1
                if self.peak is None or m[0] > self.peak[0]:
                    self.peak = m + (at,)
            rest = self.interval
            if self.share < 1:
                rest = max(rest, cpu / self.share)
            self.stop.wait(rest)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--max-cpu-share", type=float, default=1.0)
    ap.add_argument("--prefix", default="outside_")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        ap.error("give the command to measure after --")
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE)
    sampler = Sampler(child.pid, a.interval_ms / 1000, a.max_cpu_share, started)
    sampler.start()
    out = child.stdout.read()
    code = child.wait()
    sampler.stop.set()
    sampler.join()
    p = a.prefix
    fields = {f"{p}peak_tree_mb": None, f"{p}ring_resident_mb": None,
              f"{p}tree_anonymous_mb": None, f"{p}tree_processes": None,
              f"{p}peak_tree_at_s": None}
    if sampler.peak is not None:
        total, anon, ring, processes, unmeasured, at = sampler.peak
        fields.update({f"{p}peak_tree_mb": round(total / 1e6, 1),
                       f"{p}ring_resident_mb": round(ring / 1e6, 1),
                       f"{p}tree_anonymous_mb": round(anon / 1e6, 1),
                       f"{p}tree_processes": processes, f"{p}peak_tree_at_s": round(at, 3)})
        if unmeasured:
            print(f"tree_memory.py: {unmeasured} shared-memory objects could not be measured "
                  "(reading /proc/PID/map_files needs root)", file=sys.stderr)
    fields[f"{p}memory_sampler"] = {
        "by": "bench/tree_memory.py", "anonymous": "proportional",
        "interval_ms": a.interval_ms, "max_cpu_share": a.max_cpu_share,
        "passes": sampler.passes, "skipped": sampler.skipped,
        "cpu_ms": round(sampler.cpu * 1e3, 2),
        "command": " ".join(["bench/tree_memory.py", "--interval-ms", f"{a.interval_ms:g}",
                             "--max-cpu-share", f"{a.max_cpu_share:g}", "--prefix",
                             repr(p) if p == "" else p, "--"])}
    printed = False
    for line in out.decode().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            record.update(fields)
            line = json.dumps(record)
            printed = True
        print(line)
    if not printed:
        print(json.dumps(fields))
    return code


if __name__ == "__main__":
    sys.exit(main())
