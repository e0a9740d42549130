"""stoker.DataLoader's API against torch.utils.data.DataLoader's: arguments and their errors,
len(), orders (shuffle=False, samplers, batch samplers: the same batches as torch), shuffling,
iterable datasets and get_worker_info, workers' start-up, resume, stats and diagnose."""

import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import stoker
from helpers import ListDataset, assert_same, collect, vector_dataset


def torch_error(**kwargs):
    dataset = kwargs.pop("dataset", vector_dataset(10))
    with pytest.raises(ValueError) as e:
        tud.DataLoader(dataset, **kwargs)
    return str(e.value)


@pytest.mark.parametrize("kwargs", [
    {"num_workers": -1},
    {"timeout": -1},
    {"prefetch_factor": 4},
    {"persistent_workers": True},
    {"sampler": tud.SequentialSampler(range(10)), "shuffle": True},
    {"batch_sampler": tud.BatchSampler(range(10), 2, False), "batch_size": 3},
    {"batch_sampler": tud.BatchSampler(range(10), 2, False), "drop_last": True},
    {"batch_size": None, "drop_last": True},
    {"batch_size": 0},
    {"batch_size": -3},
    {"shuffle": True, "dataset": ListDataset(0, lambda i: i)},
    {"multiprocessing_context": "fork"},
])
def test_argument_errors_are_torchs(kwargs):
    expected = torch_error(**dict(kwargs))
    dataset = kwargs.pop("dataset", vector_dataset(10))
    with pytest.raises(ValueError) as e:
        stoker.DataLoader(dataset, **kwargs)
    assert str(e.value) == expected


class Stream(tud.IterableDataset):
    """0 .. n-1, each worker its own part, as torch's documentation shards an IterableDataset."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = tud.get_worker_info()  # torch's: stoker's workers answer it too
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self):
        return self.n


@pytest.mark.parametrize("kwargs", [{"shuffle": True}, {"sampler": [0, 1]},
                                    {"batch_sampler": [[0, 1]]}])
def test_iterable_dataset_argument_errors_are_torchs(kwargs):
    expected = torch_error(dataset=Stream(4), **kwargs)
    with pytest.raises(ValueError) as e:
        stoker.DataLoader(Stream(4), **kwargs)
    assert str(e.value) == expected


def test_attributes_cannot_be_set_after_construction():
    loader = stoker.DataLoader(vector_dataset(10))
    with pytest.raises(ValueError, match="batch_size attribute should not be set after "
                                         "DataLoader is initialized"):
        loader.batch_size = 3


def test_other_start_methods_are_refused():
    with pytest.raises(ValueError, match="always fork"):
        stoker.DataLoader(vector_dataset(10), num_workers=1, multiprocessing_context="spawn")


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (7, False), (7, True), (100, False),
                                                  (200, True)])
def test_sequential_batches_are_torchs(batch_size, drop_last, num_workers):
    dataset = vector_dataset(100)
    theirs = list(tud.DataLoader(dataset, batch_size=batch_size, drop_last=drop_last))
    loader = stoker.DataLoader(dataset, batch_size=batch_size, drop_last=drop_last,
                               num_workers=num_workers)
    assert len(loader) == len(theirs)
    assert_same(collect(loader), theirs)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_sampler_gives_torchs_batches(num_workers):
    dataset = vector_dataset(50)
    make = lambda: tud.RandomSampler(dataset, generator=torch.Generator().manual_seed(7))
    theirs = list(tud.DataLoader(dataset, batch_size=6, sampler=make()))
    loader = stoker.DataLoader(dataset, batch_size=6, sampler=make(), num_workers=num_workers)
    assert len(loader) == len(theirs)
    assert_same(collect(loader), theirs)
    # A plain list of indices is a sampler too.
    assert_same(collect(stoker.DataLoader(dataset, batch_size=4, sampler=[5, 3, 3, 1])),
                list(tud.DataLoader(dataset, batch_size=4, sampler=[5, 3, 3, 1])))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_sampler_gives_torchs_batches(num_workers):
    dataset = vector_dataset(30)
    batches = [[0, 1, 2], [29], [5, 5, 7, 9, 11], [3]]
    theirs = list(tud.DataLoader(dataset, batch_sampler=batches))
    loader = stoker.DataLoader(dataset, batch_sampler=batches, num_workers=num_workers)
    assert len(loader) == 4
    assert_same(collect(loader), theirs)


def order(loader):
    return [int(i) for batch in loader for i in batch["x"][:, 0] // 8]


def test_shuffle_is_a_permutation_that_changes_by_epoch_and_repeats_by_seed():
    dataset = vector_dataset(64)
    a = stoker.DataLoader(dataset, batch_size=5, shuffle=True, seed=3)
    first, second = order(a), order(a)
    assert sorted(first) == list(range(64)) and sorted(second) == list(range(64))
    assert first != second and first != list(range(64))
    b = stoker.DataLoader(dataset, batch_size=5, shuffle=True, seed=3, num_workers=2)
    assert order(b) == first and order(b) == second  # any num_workers: the same order
    b.set_epoch(0)
    assert order(b) == first
    c = stoker.DataLoader(dataset, batch_size=5, shuffle=True, seed=4)
    assert order(c) != first


def test_without_a_seed_torch_manual_seed_repeats_the_order():
    dataset = vector_dataset(40)
    torch.manual_seed(11)
    a = order(stoker.DataLoader(dataset, batch_size=4, shuffle=True))
    torch.manual_seed(11)
    b = order(stoker.DataLoader(dataset, batch_size=4, shuffle=True))
    g = torch.Generator().manual_seed(5)
    c = order(stoker.DataLoader(dataset, batch_size=4, shuffle=True, generator=g))
    assert a == b and a != c


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_iterable_dataset_is_torchs(num_workers):
    theirs = list(tud.DataLoader(Stream(23), batch_size=4, num_workers=num_workers))
    ours = collect(stoker.DataLoader(Stream(23), batch_size=4, num_workers=num_workers))
    assert len(stoker.DataLoader(Stream(23), batch_size=4)) == len(tud.DataLoader(
        Stream(23), batch_size=4))
    # Each worker's batches in turn, its last one short: torch's order as well.
    assert_same(ours, theirs)


def test_iterable_dataset_with_drop_last():
    theirs = list(tud.DataLoader(Stream(23), batch_size=4, num_workers=2, drop_last=True))
    ours = collect(stoker.DataLoader(Stream(23), batch_size=4, num_workers=2, drop_last=True))
    assert_same(ours, theirs)


def test_get_worker_info():
    assert stoker.get_worker_info() is None

    def make(i):
        info = stoker.get_worker_info()
        theirs = tud.get_worker_info()
        assert info.id == theirs.id and info.num_workers == theirs.num_workers == 3
        assert info.seed == theirs.seed and info.dataset is theirs.dataset
        return np.array([info.id, info.seed % 1000003, isinstance(info.dataset, ListDataset)])
    loader = stoker.DataLoader(ListDataset(9, make), batch_size=1, num_workers=3)
    rows = [b[0].tolist() for b in loader]
    assert [r[0] for r in rows] == [0, 1, 2] * 3
    assert all(r[2] == 1 for r in rows)
    assert len({r[1] for r in rows}) == 3  # a seed per worker
    again = [b[0].tolist() for b in loader]
    assert {r[1] for r in again}.isdisjoint({r[1] for r in rows})  # and per epoch


def test_worker_init_fn_and_seeding():
    def init(worker_id):
        info = stoker.get_worker_info()
        assert info.id == worker_id
        np.random.seed(100 + worker_id)

    def make(i):
        return np.array([stoker.get_worker_info().id, np.random.randint(0, 1 << 30)])
    rows = [r.tolist() for b in stoker.DataLoader(ListDataset(8, make), batch_size=2,
                                                  num_workers=2, worker_init_fn=init) for r in b]
    # Each worker's values are the draws of the generator its init function seeded, in the
    # order of the samples it loaded (batch 0 is split between the workers).
    for worker in (0, 1):
        mine = [value for w, value in rows if w == worker]
        np.random.seed(100 + worker)
        assert mine == [np.random.randint(0, 1 << 30) for _ in mine]
    assert {w for w, _ in rows} == {0, 1}
    # Without an init function each worker's generators are seeded differently, and each
    # epoch anew (as torch's base_seed does).
    plain = stoker.DataLoader(ListDataset(8, lambda i: int(torch.randint(0, 1 << 30, ()))),
                              batch_size=4, num_workers=2)
    e0, e1 = [b.tolist() for b in plain], [b.tolist() for b in plain]
    assert e0[0] != e0[1] and e0 != e1


@pytest.mark.parametrize("persistent", [False, True])
def test_persistent_workers_and_epochs(persistent):
    dataset = vector_dataset(40)
    loader = stoker.DataLoader(dataset, batch_size=8, num_workers=2,
                               persistent_workers=persistent)
    pids = []
    for epoch in range(3):
        assert loader.epoch == epoch
        it = iter(loader)
        next(it)
        next(it)  # every worker is forked by batch 1 (worker 1 may follow batch 0)
        pids.append(tuple(loader.worker_pids()))
        assert sum(1 for _ in it) == 3
    assert (len(set(pids)) == 1) == persistent
    assert len(loader.worker_pids()) == (2 if persistent else 0)


def test_a_new_loaders_quick_batch_0_comes_from_worker_0_before_the_other_fork():
    # An interpreter that has imported torch forks in milliseconds, longer than these batches
    # take: worker 0 loads batch 0 alone, and worker 1 is forked once it is out (or, on a
    # machine so busy that worker 0 is not done a fork's time after its first sample, worker 1
    # is forked then and takes the rows worker 0 has not begun).
    def make(i):
        return {"x": np.full(4, i, dtype=np.float32), "w": stoker.get_worker_info().id}

    loader = stoker.DataLoader(ListDataset(64, make), batch_size=16, num_workers=2)
    expected = [b["x"] for b in tud.DataLoader(ListDataset(64, lambda i: {
        "x": np.full(4, i, dtype=np.float32)}), batch_size=16)]
    for epoch in range(2):
        workers, got = [], []
        for batch in loader:
            workers.append(len(loader.worker_pids()))
            got.append(batch)
        assert len(got) == 4
        for k, batch in enumerate(got):
            assert torch.equal(batch["x"], expected[k])
            if k > 0:
                assert batch["w"].tolist() == [k % 2] * 16  # batch k whole from worker k mod 2
        first = got[0]["w"].tolist()
        assert first[0] == 0 and first == sorted(first), first  # worker 0's rows first
        if first == [0] * 16:
            assert workers[0] == 1, epoch  # worker 1 was forked after batch 0
        assert workers[1:] == [2, 2, 2], epoch


def test_in_order_false_delivers_every_batch_once():
    def make(i):
        if i % 10 == 0:
            import time
            time.sleep(0.05)  # batch 0 of each worker is slow: others come first
        return i
    loader = stoker.DataLoader(ListDataset(60, make), batch_size=5, num_workers=2,
                               in_order=False)
    got = [int(v) for b in loader for v in b]
    assert sorted(got) == list(range(60))


def test_state_dict_resumes_mid_epoch_with_other_workers():
    dataset = vector_dataset(64)
    full = stoker.DataLoader(dataset, batch_size=4, shuffle=True, seed=9, num_workers=2)
    expected = order(full)
    first = stoker.DataLoader(dataset, batch_size=4, shuffle=True, seed=9, num_workers=2)
    seen = []
    it = iter(first)
    for _ in range(5):
        seen.extend(int(i) for i in next(it)["x"][:, 0] // 8)
    state = first.state_dict()
    del it
    resumed = stoker.DataLoader(dataset, batch_size=4, shuffle=True, seed=9, num_workers=1)
    resumed.load_state_dict(state)
    assert seen + order(resumed) == expected
    with pytest.raises(ValueError, match="state_dict"):
        resumed.load_state_dict({"version": 99})


def test_stats_and_diagnose():
    loader = stoker.DataLoader(vector_dataset(200), batch_size=10, num_workers=2)
    for _ in loader:
        pass
    stats = loader.stats()
    assert stats.batches == 20 and stats.samples == 200
    assert [w.worker_id for w in stats.workers] == [0, 1]
    assert sum(w.samples for w in stats.workers) == 200
    assert stats.samples_per_second > 0
    diagnosis = loader.diagnose()
    assert diagnosis.verdict in ("compute-bound", "data-bound", "cpu-saturated", "unknown",
                                 "memory-pressure", "storage-bound", "gpu-starved")
    assert diagnosis.verdict in str(diagnosis) or diagnosis.summary in str(diagnosis)


def test_pin_memory_without_cuda_warns_as_torch_and_loads():
    if torch.cuda.is_available():
        pytest.skip("CUDA is present: pin_memory pins")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = stoker.DataLoader(vector_dataset(8), batch_size=4, pin_memory=True)
    assert any("pin_memory" in str(w.message) for w in caught)
    batches = collect(loader)
    assert len(batches) == 2 and not batches[0]["x"].is_pinned()


def test_iterator_len_and_early_close():
    loader = stoker.DataLoader(vector_dataset(20), batch_size=6, num_workers=2)
    it = iter(loader)
    assert len(it) == 4
    next(it)
    it.close()
    with pytest.raises(StopIteration):
        next(it)
