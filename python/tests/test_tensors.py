"""Batches are torch tensors over the ring, without a copy: their memory is the loader's
shared-memory slot, a slot goes back to the workers when the last tensor of its batch is freed,
stoker.clone() copies a batch out, and pin_memory pins where CUDA is present."""

import gc
import threading
import time

import numpy as np
import pytest
import torch

import stoker
from helpers import ListDataset, vector_dataset


def ring_ranges():
    """The address ranges of this process's stoker ring mappings."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "memfd:stoker-ring" in line:
                start, end = line.split()[0].split("-")
                out.append((int(start, 16), int(end, 16)))
    return out


def in_ring(tensor):
    p = tensor.data_ptr()
    return any(start <= p < end for start, end in ring_ranges())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_tensors_live_in_the_ring(num_workers):
    dataset = ListDataset(16, lambda i: {"x": np.full((3, 5), i, np.float32), "y": i,
                                          "b": i % 2 == 0, "t": torch.full((2,), i)})
    for batch in stoker.DataLoader(dataset, batch_size=4, num_workers=num_workers):
        for name in ("x", "y", "b", "t"):
            assert in_ring(batch[name]), name
        assert batch["b"].dtype == torch.bool
        assert batch["x"].is_contiguous()


def test_a_slot_is_released_by_its_last_tensor():
    loader = stoker.DataLoader(vector_dataset(40), batch_size=4, num_workers=1,
                               prefetch_factor=2, held_timeout=0.5)
    it = iter(loader)
    first = next(it)
    second = next(it)
    kept = first["x"]  # one tensor keeps the whole first slot
    del first
    gc.collect()
    # Both slots of the worker are held (one through `kept`): no batch can come. With another
    # thread that could free one, the fetch waits held_timeout first.
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    start = time.monotonic()
    try:
        with pytest.raises(stoker.HeldBatchesTimeout) as caught:
            next(it)
    finally:
        stop.set()
        other.join()
    assert 0.4 < time.monotonic() - start < 10
    assert "the program still holds 2 batches" in str(caught.value)
    assert "keep stoker.clone(batch) instead of the batch" in str(caught.value)
    assert str(caught.value).endswith(" ms, held_timeout)")
    assert kept[1, 0].item() == 8.0  # what is held stays valid
    del kept, second
    gc.collect()
    assert next(it)["x"][0, 0].item() == 8 * 8  # released: the epoch goes on
    assert sum(b["x"].shape[0] for b in it) == 40 - 12


def test_keeping_every_batch_fails_fast_with_advice():
    loader = stoker.DataLoader(vector_dataset(64), batch_size=4, num_workers=2, held_timeout=0.5)
    with pytest.raises(stoker.HeldBatchesTimeout, match="stoker.clone"):
        list(loader)
    # The adaptive depth grows while batches are held.
    loader = stoker.DataLoader(vector_dataset(64), batch_size=4, num_workers=2,
                               prefetch_factor="auto")
    assert len(list(loader)) == 16


def test_clone_copies_a_batch_out_of_the_ring():
    loader = stoker.DataLoader(ListDataset(100, lambda i: {"x": np.full(2, i), "s": str(i),
                                                             "n": (i, [float(i)])}),
                               batch_size=1, num_workers=2)
    kept = [stoker.clone(b) for b in loader]  # more batches than the ring has slots
    assert len(kept) == 100
    assert not any(in_ring(b["x"]) for b in kept)
    assert kept[57]["x"].tolist() == [[57, 57]] and kept[57]["s"] == ["57"]
    assert kept[57]["n"][1][0].item() == 57.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_memory_gives_page_locked_tensors():
    loader = stoker.DataLoader(vector_dataset(32), batch_size=8, num_workers=2, pin_memory=True)
    for batch in loader:
        assert batch["x"].is_pinned() and batch["y"].is_pinned()
        assert batch["x"].cuda(non_blocking=True).sum().item() == batch["x"].sum().item()
