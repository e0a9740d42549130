"""Faults: exceptions in the dataset, worker_init_fn and collate_fn; a worker that dies; a hang
with a timeout; Ctrl-C; forking from a thread and from a process whose dataset runs threads.
Every test also passes the conftest check: no child process, stoker mapping or descriptor left.
The ones that could hang forever if broken run in a subprocess with a deadline."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch.utils.data as tud

import stoker
from helpers import ListDataset, vector_dataset
from leaks import children

HERE = os.path.dirname(os.path.abspath(__file__))


class BadSample(Exception):
    pass


class TwoArgs(Exception):
    def __init__(self, a, b):
        super().__init__(a, b)


def failing(i):
    if i == 5:
        raise ValueError("bad sample {}".format(i))
    return np.full(2, i)


def test_exception_in_getitem_arrives_with_traceback_index_and_worker():
    loader = stoker.DataLoader(ListDataset(12, failing), batch_size=2, num_workers=2)
    it = iter(loader)
    assert next(it).tolist() == [[0, 0], [1, 1]]
    assert next(it).tolist() == [[2, 2], [3, 3]]
    with pytest.raises(ValueError) as caught:
        next(it)
    e = caught.value
    text = str(e)
    assert text.startswith("Caught ValueError in DataLoader worker process 0 (sample 5).\n"
                           "Original Traceback (most recent call last):\n")
    assert "in failing" in text and "ValueError: bad sample 5" in text
    assert e.worker_id == 0 and e.index == 5 and e.batch == 2
    assert "bad sample 5" in e.worker_traceback
    # As in torch, the loader goes on with the next batch.
    assert next(it).tolist() == [[6, 6], [7, 7]]
    assert sum(1 for _ in it) == 2



def test_torch_words_the_same_error_the_same_way():
    loader = tud.DataLoader(ListDataset(12, failing), batch_size=2, num_workers=2)
    it = iter(loader)
    text = None
    try:
        for _ in it:
            pass
    except ValueError as e:
        text = str(e)
    it._shutdown_workers()  # torch's workers outlive the exception otherwise
    assert text.startswith("Caught ValueError in DataLoader worker process 0.\n"
                           "Original Traceback (most recent call last):\n")


def test_exception_types_survive_the_trip():
    def raise_(cls):
        def make(i):
            raise cls("at {}".format(i)) if cls is not TwoArgs else TwoArgs(1, 2)
        return make

    for cls, expected in [(BadSample, BadSample), (KeyError, KeyError),
                          (TwoArgs, RuntimeError), (StopIteration, StopIteration)]:
        loader = stoker.DataLoader(ListDataset(2, raise_(cls)), batch_size=2, num_workers=1)
        with pytest.raises(expected) as caught:
            next(iter(loader))
        assert "Caught {} in DataLoader worker process 0".format(cls.__name__) in str(
            caught.value)
        if cls is KeyError:
            assert not str(caught.value).startswith("'")  # readable, not a repr


def test_without_workers_the_original_exception_is_raised():
    with pytest.raises(ValueError) as caught:
        for _ in stoker.DataLoader(ListDataset(12, failing), batch_size=2):
            pass
    assert str(caught.value) == "bad sample 5"
    assert type(caught.value) is ValueError


def test_exception_in_worker_init_fn():
    def init(worker_id):
        if worker_id == 1:
            raise RuntimeError("no file for worker 1")

    loader = stoker.DataLoader(vector_dataset(8), batch_size=2, num_workers=2,
                               worker_init_fn=init)
    it = iter(loader)
    # Batch 0 is loaded by worker 0 alone (as in torch) while worker 1's fork waits for it, or,
    # when it is not done a fork's time after its first sample, split with worker 1, and then
    # it fails too.
    try:
        assert next(it)["x"].shape == (2, 8)
    except RuntimeError as e:
        assert "no file for worker 1" in str(e)
    for batch in range(1, 4):
        if batch == 2:
            assert next(it)["x"].shape == (2, 8)  # worker 0's batches still arrive
            continue
        with pytest.raises(RuntimeError) as caught:
            next(it)
        assert "Caught RuntimeError in DataLoader worker process 1 (in worker_init_fn)" in str(
            caught.value)
        assert "no file for worker 1" in str(caught.value)


def test_exception_in_collate_fn():
    def collate(samples):
        if samples[0] == 4:
            raise ValueError("cannot collate")
        return samples

    loader = stoker.DataLoader(ListDataset(8, lambda i: i), batch_size=2, num_workers=2,
                               collate_fn=collate)
    it = iter(loader)
    assert next(it) == [0, 1] and next(it) == [2, 3]
    with pytest.raises(ValueError, match=r"worker process 0 \(in collate_fn, batch 2\)"):
        next(it)
    assert next(it) == [6, 7]


def killing(i):
    if i == 13 and stoker.get_worker_info() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return i


def test_a_killed_worker_raises_worker_crashed():
    loader = stoker.DataLoader(ListDataset(40, killing), batch_size=4, num_workers=2)
    with pytest.raises(stoker.WorkerCrashed) as caught:
        list(loader)
    e = caught.value
    assert isinstance(e, RuntimeError)
    assert e.signal == signal.SIGKILL and e.worker_id == 1 and e.index == 13 and e.batch == 3
    assert "killed by signal 9 (SIGKILL)" in str(e)
    assert loader.worker_pids() == []


def segfaulting(i):
    if i == 9 and tud.get_worker_info() is not None:  # torch's or stoker's worker
        import ctypes
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return np.full(2, i)


def test_a_segfaulting_worker_raises_worker_crashed():
    # torch raises a RuntimeError ("DataLoader worker (pid N) is killed by signal: Segmentation
    # fault.", or "... exited unexpectedly"), or, when the worker dies while handing over a
    # tensor's descriptor, a ConnectionRefusedError from its descriptor sharer (and keeps its
    # descriptors). stoker raises WorkerCrashed, a RuntimeError naming the signal.
    loader = stoker.DataLoader(ListDataset(16, segfaulting), batch_size=2, num_workers=2)
    with pytest.raises(stoker.WorkerCrashed) as caught:
        for _ in loader:
            pass
    e = caught.value
    assert isinstance(e, RuntimeError)
    assert e.signal == signal.SIGSEGV and e.index == 9 and e.batch == 4 and e.worker_id == 0
    assert "killed by signal 11 (SIGSEGV)" in str(e)
    assert loader.worker_pids() == []


def test_respawn_replaces_a_killed_worker():
    flag = "/tmp/stoker-test-respawn-{}".format(os.getpid())

    def once(i):
        if i == 13 and stoker.get_worker_info() is not None and not os.path.exists(flag):
            open(flag, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    try:
        loader = stoker.DataLoader(ListDataset(40, once), batch_size=4, num_workers=2,
                                   on_worker_crash="respawn")
        assert [int(v) for b in loader for v in b] == list(range(40))
        assert loader.stats().respawns == 1
    finally:
        if os.path.exists(flag):
            os.remove(flag)


def test_a_hung_worker_times_out():
    def hang(i):
        if i == 6:
            time.sleep(60)
        return i

    loader = stoker.DataLoader(ListDataset(16, hang), batch_size=2, num_workers=2, timeout=1)
    start = time.monotonic()
    with pytest.raises(stoker.LoaderTimeout) as caught:
        list(loader)
    assert time.monotonic() - start < 20
    assert str(caught.value).startswith("DataLoader timed out after 1 seconds")
    assert isinstance(caught.value, RuntimeError) and caught.value.index == 6
    assert loader.worker_pids() == []


def script_command(body):
    """A fresh interpreter running `body`, with the package and these helpers on its path."""
    paths = [os.environ["STOKER_PYTHON_PATH"], HERE]
    return [sys.executable, "-c",
            "import sys\nsys.path[:0] = {!r}\n".format(paths) + textwrap.dedent(body)]


def run_script(body, timeout=90):
    """Runs `body` in a fresh interpreter (deadline `timeout` s); its result."""
    return subprocess.run(script_command(body), capture_output=True, text=True, timeout=timeout)


CTRL_C_SCRIPT = """
    import os, time
    import stoker
    from helpers import ListDataset

    def hang(i):
        if i >= 8:
            time.sleep(1000)  # no batch comes: only the wait itself can see Ctrl-C
        return i

    loader = stoker.DataLoader(ListDataset(1000, hang), batch_size=4, num_workers=2,
                               persistent_workers=True)
    it = iter(loader)
    next(it)
    next(it)  # worker 1 may be forked only once batch 0 is out (a slow-forking interpreter)
    print("pids", *loader.worker_pids(), flush=True)
    for batch in it:
        pass
"""


def gone(pid):
    """The process has exited: no /proc entry, or a zombie its new parent has not reaped."""
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def signal_hanging_loader(send):
    """Runs CTRL_C_SCRIPT in its own session, calls send(proc) once the main process waits in a
    fetch (both workers sleep inside __getitem__), and returns (returncode, stderr) once it
    ended, after its workers did (each within 10 s)."""
    proc = subprocess.Popen(script_command(CTRL_C_SCRIPT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("pids "), line + proc.stderr.read()
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2
        time.sleep(0.3)  # the main process is waiting inside a fetch
        send(proc)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(p) for p in pids), [p for p in pids if not gone(p)]
    return proc.returncode, err


@pytest.mark.parametrize("to_group", [False, True])
def test_ctrl_c_stops_and_reaps_the_workers(to_group):
    if to_group:  # as a terminal's Ctrl-C: the workers get it too
        returncode, err = signal_hanging_loader(lambda p: os.killpg(p.pid, signal.SIGINT))
    else:
        returncode, err = signal_hanging_loader(lambda p: os.kill(p.pid, signal.SIGINT))
    assert returncode != 0
    assert "KeyboardInterrupt" in err


def test_killing_the_main_process_ends_its_workers():
    # SIGKILL: no handler and no destructor run in the main process; the lifeline ends the
    # workers, inside __getitem__ too.
    returncode, _ = signal_hanging_loader(lambda p: p.kill())
    assert returncode == -signal.SIGKILL


def test_ctrl_c_ends_the_epoch_and_the_loader_goes_on():
    result = run_script("""
        import os, signal, threading, time
        import stoker
        from helpers import ListDataset

        hanging = [True]
        def slow(i):
            if hanging[0] and i >= 8 and stoker.get_worker_info() is not None:
                time.sleep(1000)
            return i

        loader = stoker.DataLoader(ListDataset(40, slow), batch_size=4, num_workers=2)
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            for batch in loader:
                pass
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted; workers", len(loader.worker_pids()))
        hanging[0] = False  # the next epoch's workers are forked with this
        print("next epoch", sum(1 for _ in loader))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["interrupted; workers 0", "next epoch 10"]


def test_workers_forked_from_another_thread_run_python():
    result = run_script("""
        import os, signal, threading
        import numpy as np
        import stoker
        from helpers import ListDataset

        state = {"killed": False}
        def make(i):
            info = stoker.get_worker_info()
            if i == 21 and info is not None and info.id == 1 and not os.path.exists(FLAG):
                open(FLAG, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)  # the respawn forks from the thread too
            return {"x": np.full(3, i), "worker": info.id}

        FLAG = "/tmp/stoker-thread-respawn-%d" % os.getpid()
        out = []
        def consume():
            loader = stoker.DataLoader(ListDataset(64, make), batch_size=4, num_workers=2,
                                       on_worker_crash="respawn")
            for epoch in range(2):
                out.append(sorted(int(v) for b in loader for v in b["x"][:, 0]))
            out.append(loader.stats().respawns)
        t = threading.Thread(target=consume)
        t.start()
        t.join()
        os.remove(FLAG)
        print(out[0] == list(range(64)), out[1] == list(range(64)), out[2])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "0"] or \
        result.stdout.split() == ["True", "True", "1"]


def test_a_dataset_running_threads_does_not_deadlock_the_fork():
    result = run_script("""
        import logging, threading, time
        import numpy as np
        import stoker
        from helpers import ListDataset

        lock = threading.Lock()
        log = logging.getLogger("busy")
        log.addHandler(logging.NullHandler())
        counter = [0]
        def busy():
            while True:
                with lock:       # a lock the workers never take
                    counter[0] += 1
                log.info("tick %d", counter[0])  # logging's own lock, re-made in a child
                [str(i) for i in range(50)]      # Python work, so it holds the GIL often

        class Threaded(ListDataset):
            def __init__(self):
                super().__init__(200, lambda i: {"x": np.full(4, i), "n": counter[0] >= 0})
                threading.Thread(target=busy, daemon=True).start()

        loader = stoker.DataLoader(Threaded(), batch_size=10, num_workers=2)
        totals = [sum(int(v) for b in loader for v in b["x"][:, 0]) for _ in range(8)]
        print(totals == [sum(range(200))] * 8, counter[0] > 0)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def test_no_process_or_memory_left_after_an_abandoned_epoch():
    before = children()
    loader = stoker.DataLoader(vector_dataset(400), batch_size=4, num_workers=2,
                               prefetch_factor=4)
    it = iter(loader)
    held = [next(it) for _ in range(3)]  # tensors over ring slots, kept
    assert len(loader.worker_pids()) == 2
    del it  # ends the epoch: the workers are stopped
    deadline = time.monotonic() + 10
    while children() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children() == before
    assert held[2]["x"][0, 0] == 8 * 8  # the batches kept stay valid
    del held, loader  # and with them the ring goes (the conftest check)
