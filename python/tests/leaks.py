"""What a test must leave as it found it: child processes (from /proc), stoker's shared-memory
mappings (memfd:stoker-* in /proc/self/maps), and open file descriptors."""

import os
import time


def children():
    """Pids whose parent is this process, zombies included."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/{}/stat".format(entry)) as f:
                stat = f.read()
        except OSError:
            continue
        # The command may hold spaces and parentheses: the fields after the last ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == me:
            out.append(int(entry))
    return sorted(out)


def stoker_mappings():
    """Lines of /proc/self/maps naming one of stoker's memfd regions."""
    with open("/proc/self/maps") as f:
        return [line for line in f if "memfd:stoker" in line]


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def memfds():
    """This process's descriptors that are memfds."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("/memfd:"):
            out.append(target)
    return out


def process_state():
    return {"children": children(), "mappings": len(stoker_mappings()), "fds": open_fds(),
            "memfds": len(memfds())}


def differences(before, now):
    out = []
    extra = sorted(set(now["children"]) - set(before["children"]))
    if extra:
        out.append("child processes {}".format(extra))
    for key in ("mappings", "fds", "memfds"):
        if now[key] > before[key]:
            out.append("{} {} -> {}".format(key, before[key], now[key]))
    return "; ".join(out)


def wait_clean(before, timeout):
    """The differences from `before` once they are gone, or at `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        diff = differences(before, process_state())
        if not diff or time.monotonic() > deadline:
            return diff
        time.sleep(0.05)
