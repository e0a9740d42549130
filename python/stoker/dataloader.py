"""stoker.DataLoader: torch.utils.data.DataLoader's arguments, defaults and errors in front of
stoker's C++ engine.

Batches are loaded by fork()ed worker processes straight into a shared-memory ring and arrive
as torch tensors over that memory (no pickling, no copy). The default collation is done in C++
with default_collate's structure and dtypes; a collate_fn runs in the worker and its output is
written into the ring as it is. See docs/python.md for what differs from torch.
"""

import math
import warnings

import torch
import torch.utils.data as tud

from . import _stoker
from . import errors

_STATE_VERSION = 1


def _is_native(dataset):
    return getattr(dataset, "_stoker_native", None) is not None


def _native(dataset):
    return dataset._stoker_native


def _is_iterable(dataset):
    if _is_native(dataset):
        return _native(dataset).iterable
    return isinstance(dataset, tud.IterableDataset)


def _mix_seed(seed, epoch):
    """A 62-bit seed from (seed, epoch) (SplitMix64's finaliser), so that each epoch's
    workers draw new random numbers, and worker w's seed (this + w) stays an int64."""
    z = (seed * 0x9E3779B97F4A7C15 + epoch + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) >> 2


class DataLoader:
    """torch.utils.data.DataLoader on stoker's engine: the same arguments and defaults.

    Beyond torch's arguments (keyword only): prefetch_factor="auto" (stoker's adaptive depth,
    2 to 32 batches per worker, deeper while the program waits and workers sit blocked),
    in_order (deliver batches in order, the default, or as they are ready), held_timeout
    (seconds a fetch waits when every slot the next batch could use is held by batches the
    program keeps, before HeldBatchesTimeout; 0: as long as `timeout`), seed (the shuffle
    order and the workers' seeds; default: drawn from `generator`, or from torch's default
    generator), and the engine's options: on_worker_crash ("fail" or "respawn"), max_respawns,
    on_sample_error ("fail" or "skip"), max_skipped_samples, max_batches_per_worker,
    max_batch_bytes, check_memory, memory_limit, memory_fraction, sample_bytes (the largest
    sample's bytes: no probe process before the first batch), bind_workers, trace_path.
    """

    __initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True, seed=None, held_timeout=2.0, on_worker_crash="fail",
                 max_respawns=3,
                 on_sample_error="fail", max_skipped_samples=100, max_batches_per_worker=0,
                 max_batch_bytes=None, check_memory=True, memory_limit=None,
                 memory_fraction=0.8, sample_bytes=None, bind_workers=False, trace_path=None):
        # The checks and their texts are torch 1.13's (torch/utils/data/dataloader.py), in its
        # order. prefetch_factor=None is torch 2's default: 2 batches per worker; "auto" is
        # stoker's adaptive depth (deeper while the program waits and workers sit idle).
        if num_workers < 0:
            raise ValueError('num_workers option should be non-negative; '
                             'use num_workers=0 to disable multiprocessing.')
        if timeout < 0:
            raise ValueError('timeout option should be non-negative')
        if num_workers == 0 and prefetch_factor not in (None, 2, "auto"):
            raise ValueError('prefetch_factor option could only be specified in multiprocessing.'
                             'let num_workers > 0 to enable multiprocessing.')
        if prefetch_factor not in (None, "auto") and (
                not isinstance(prefetch_factor, int) or prefetch_factor <= 0):
            raise ValueError('prefetch_factor option should be a positive int or "auto", but '
                             'got prefetch_factor={!r}'.format(prefetch_factor))
        if persistent_workers and num_workers == 0:
            raise ValueError('persistent_workers option needs num_workers > 0')
        if multiprocessing_context is not None:
            if num_workers == 0:
                raise ValueError(('multiprocessing_context can only be used with '
                                  'multi-process loading (num_workers > 0), but got '
                                  'num_workers={}').format(num_workers))
            method = multiprocessing_context
            if not isinstance(method, str):
                method = getattr(method, "get_start_method", lambda: None)()
            if method != "fork":
                raise ValueError("stoker.DataLoader: multiprocessing_context={!r}: stoker's "
                                 "workers are always fork()ed from the process that iterates "
                                 "the loader; leave it unset or 'fork'".format(
                                     multiprocessing_context))

        iterable = _is_iterable(dataset)
        if iterable:
            if shuffle not in {False, None}:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    "shuffle option, but got shuffle={}".format(shuffle))
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    "sampler option, but got sampler={}".format(sampler))
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    "batch_sampler option, but got batch_sampler={}".format(batch_sampler))
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError('sampler option is mutually exclusive with '
                             'shuffle')
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError('batch_sampler option is mutually exclusive '
                                 'with batch_size, shuffle, sampler, and '
                                 'drop_last')
            batch_size = None
            drop_last = False
        elif batch_size is None:
            if drop_last:
                raise ValueError('batch_size=None option disables auto-batching '
                                 'and is mutually exclusive with drop_last')

        # torch's samplers, for their checks and as attributes; stoker orders the epoch itself
        # unless the program gave a sampler or batch sampler.
        self._own_sampler = sampler is None and batch_sampler is None
        if sampler is None and not iterable:
            sampler = (tud.RandomSampler(dataset, generator=generator) if shuffle
                       else tud.SequentialSampler(dataset))
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = tud.BatchSampler(sampler, batch_size, drop_last)
            self._given_batch_sampler = False
        else:
            self._given_batch_sampler = batch_sampler is not None
        if iterable and batch_size is not None:
            tud.BatchSampler(range(0), batch_size, drop_last)  # its checks of batch_size

        if pin_memory and not torch.cuda.is_available():
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                          "then device pinned memory won't be used.")
            pinned = False
        else:
            pinned = bool(pin_memory)

        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self.seed = seed
        self._iterable = iterable
        self._shuffle = shuffle
        self._user_sampler = None if self._own_sampler or self._given_batch_sampler else sampler
        self._options = {
            "batch_size": 1 if batch_size is None else batch_size,
            "shuffle": shuffle and self._own_sampler,
            "drop_last": drop_last,
            "num_workers": num_workers,
            "prefetch_factor": (0 if prefetch_factor == "auto" else
                                2 if prefetch_factor is None else prefetch_factor),
            "persistent_workers": persistent_workers,
            "in_order": in_order,
            "timeout_ms": int(math.ceil(timeout * 1000)),
            "held_timeout_ms": int(math.ceil(held_timeout * 1000)),
            "seed": seed & 0xFFFFFFFFFFFFFFFF,
            "pin_memory": pinned,
            "iterable": iterable,
            "sampler": self._user_sampler is not None,
            "batch_sampler": self._given_batch_sampler,
            "collate_fn": collate_fn,
            "unbatched": batch_size is None and not self._given_batch_sampler,
            "worker_init_fn": worker_init_fn,
            "on_worker_crash": on_worker_crash,
            "max_respawns": max_respawns,
            "on_sample_error": on_sample_error,
            "max_skipped_samples": max_skipped_samples,
            "max_batches_per_worker": max_batches_per_worker,
            "max_batch_bytes": max_batch_bytes,
            "check_memory": check_memory,
            "memory_limit": memory_limit,
            "memory_fraction": memory_fraction,
            "sample_bytes": sample_bytes,
            "bind_workers": bind_workers,
            "trace_path": trace_path,
        }
        if held_timeout < 0:
            raise ValueError("held_timeout option should be non-negative")
        if on_worker_crash not in ("fail", "respawn"):
            raise ValueError("on_worker_crash should be 'fail' or 'respawn', but got "
                             "on_worker_crash={!r}".format(on_worker_crash))
        if on_sample_error not in ("fail", "skip"):
            raise ValueError("on_sample_error should be 'fail' or 'skip', but got "
                             "on_sample_error={!r}".format(on_sample_error))
        if _is_native(dataset) and (collate_fn is not None or self._options["unbatched"]):
            raise ValueError("stoker.DataLoader: {} is one of stoker's C++ datasets, whose "
                             "batches are collated in C++; collate_fn and batch_size=None need "
                             "a Python dataset".format(type(dataset).__name__))
        if collate_fn is not None or self._options["unbatched"]:
            self._collation = "python"
        else:
            self._collation = "stack"
        self._core = None
        self._pending_state = None
        self._yielded_any = False
        self.__initialized = True

    def __setattr__(self, attr, val):
        if self.__initialized and attr in (
                'batch_size', 'batch_sampler', 'sampler', 'drop_last', 'dataset',
                'persistent_workers'):
            raise ValueError('{} attribute should not be set after {} is '
                             'initialized'.format(attr, self.__class__.__name__))
        super().__setattr__(attr, val)

    # ---- the engine ----

    def _loader(self):
        if self._core is None:
            options = dict(self._options, collation=self._collation)
            target = _native(self.dataset) if _is_native(self.dataset) else self.dataset
            self._core = _stoker.Loader(target, options)
        return self._core

    def _rebuild(self, collation, epoch):
        """The engine again with another collate, at the same epoch and resume state."""
        self._core = None
        self._collation = collation
        core = self._loader()
        if self._pending_state is not None:
            core.load_state(self._pending_state)
        else:
            core.set_epoch(epoch)
        return core

    def _begin(self):
        core = self._loader()
        epoch = core.epoch
        if self._pending_state is not None and not self._yielded_any:
            core.load_state(self._pending_state)
            epoch = core.epoch
        core.set_base_seed(_mix_seed(self.seed, epoch))
        if self._given_batch_sampler:
            core.set_batches([[int(i) for i in batch] for batch in self.batch_sampler])
        elif self._user_sampler is not None:
            core.set_indices([int(i) for i in self._user_sampler])
        return epoch, core.begin()

    def __iter__(self):
        epoch, it = self._begin()
        return _Iterator(self, it, epoch)

    def __len__(self):
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                if self.drop_last:
                    return length // self.batch_size
                return int(math.ceil(length / self.batch_size))
            return length
        if self._given_batch_sampler:
            return len(self.batch_sampler)
        if self.batch_size is None:
            return len(self.sampler)
        if self._user_sampler is not None:
            n = len(self._user_sampler)
            return n // self.batch_size if self.drop_last else int(math.ceil(n / self.batch_size))
        return self._loader().num_batches()

    # ---- what stoker adds ----

    def set_epoch(self, epoch):
        """The epoch the next iteration runs (its shuffle order depends on seed and epoch
        alone); without it, each iteration runs the next epoch."""
        self._loader().set_epoch(int(epoch))

    @property
    def epoch(self):
        """The epoch the next iteration runs."""
        return self._loader().epoch

    def state_dict(self):
        """Where the loader stands, for a checkpoint: the epoch, the seed, and the batches
        handed out (the one being processed included). load_state_dict() on a loader built with
        the same dataset and arguments (any num_workers) goes on with the next batch."""
        return {"version": _STATE_VERSION, "stoker": self._loader().state()}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError("stoker.DataLoader.load_state_dict: expected the dict that "
                             "state_dict() returns (version {}), got {!r}".format(
                                 _STATE_VERSION, state))
        self._loader().load_state(state["stoker"])
        self._pending_state = state["stoker"]
        self._yielded_any = False

    def stats(self):
        """The engine's figures of the current (or last) epoch: samples/s, the time the
        program waited, each worker's busy fraction and stage times, memory (LoaderStats)."""
        return self._loader().stats()

    def diagnose(self):
        """What limits this loader (data-bound, compute-bound, CPU, storage, memory), from
        stats() and the machine, with advice: a Diagnosis (str() for the text)."""
        return _stoker.diagnose(self._loader().stats())

    def memory_estimate(self):
        """The engine's estimate of the loader's peak memory, as text."""
        return self._loader().memory_estimate()

    def worker_pids(self):
        """The live worker processes, in worker-id order."""
        return self._loader().worker_pids()


def clone(batch):
    """A copy of `batch` in memory of its own: every tensor cloned, the structure kept. A batch's
    tensors are views of the loader's shared-memory ring and hold their slot until they are
    freed; keep clones of the batches kept past the loop body (a list of all of them, say), or
    the loader runs out of slots (HeldBatchesTimeout)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, dict):
        out = {k: clone(v) for k, v in batch.items()}
        try:
            return type(batch)(out)
        except TypeError:
            return out
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(clone(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        out = [clone(v) for v in batch]
        try:
            return type(batch)(out)
        except TypeError:
            return out
    return batch


class _Iterator:
    """One epoch of a stoker.DataLoader. Closing it (or dropping it) ends the epoch."""

    def __init__(self, loader, it, epoch):
        self._loader = loader
        self._it = it
        self._epoch = epoch
        self._yielded = 0

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def __next__(self):
        try:
            batch = next(self._it)
        except errors._TextNeedsRaggedCollate:
            if self._yielded > 0 or self._loader._collation != "stack":
                raise TypeError("stoker.DataLoader: a sample holds str or bytes, but earlier "
                                "samples did not; the samples of a dataset need one structure "
                                "for the default collation") from None
            # The first batch showed that samples hold text: the engine's collate becomes one
            # that keeps text fields ragged, and the epoch starts again (nothing was handed
            # out yet).
            self._it.close()
            self._it = None
            core = self._loader._rebuild("ragged", self._epoch)
            core.set_base_seed(_mix_seed(self._loader.seed, self._epoch))
            if self._loader._given_batch_sampler:
                core.set_batches([[int(i) for i in b] for b in self._loader.batch_sampler])
            elif self._loader._user_sampler is not None:
                core.set_indices([int(i) for i in self._loader._user_sampler])
            self._it = core.begin()
            batch = next(self._it)
        self._yielded += 1
        self._loader._yielded_any = True
        self._loader._pending_state = None
        return batch

    def close(self):
        """Ends the epoch now (its workers stop unless persistent_workers)."""
        if self._it is not None:
            self._it.close()
