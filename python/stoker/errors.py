"""stoker's errors, as Python exceptions.

Error is a RuntimeError, as torch.utils.data's loader errors are, so code that catches
RuntimeError around a torch DataLoader keeps working. The C++ engine's errors arrive as:

  WorkerCrashed        a worker process died (signal or exit code, worker id, pid, sample)
  WorkerException      a worker raised something that is not a Python exception (a C++ error)
  CollateError         samples that cannot be stacked (a WorkerException)
  LoaderTimeout        no batch within `timeout`; HeldBatchesTimeout: the program holds them all
  MemoryBudgetError    the loader would not fit in memory (and the settings that would)
  PinnedMemoryError    page-locked memory ran out
  DecodeError          an image that cannot be decoded
  FormatError          a malformed .npy, IDX, TFRecord or MDS file

A Python exception raised by a dataset, collate_fn or worker_init_fn in a worker arrives as its
own type, with torch's "Caught <Type> in DataLoader worker process <id>" text and the worker's
traceback, and these attributes: worker_id, index (the sample being loaded, or None), pid,
batch and worker_traceback. With num_workers=0 the exception is raised as it was.
"""

import importlib


class Error(RuntimeError):
    """The base of stoker's errors."""


class WorkerCrashed(Error):
    """A worker process died: worker_id, pid, signal, exit_code, batch, index, cause."""


class WorkerException(Error):
    """A worker raised an error that is not a Python exception: type_name, original_message,
    worker_id, pid, batch, index, where."""


class CollateError(WorkerException):
    """The samples of a batch cannot be stacked (a field is missing, or dtypes or shapes
    differ)."""


class LoaderTimeout(Error):
    """No batch arrived within the DataLoader's timeout."""


class HeldBatchesTimeout(LoaderTimeout):
    """Every slot that could carry the next batch is held by the program: keep clones."""


class MemoryBudgetError(Error):
    """The loader would not fit in memory; the message says what would."""


class PinnedMemoryError(Error):
    """Page-locked memory could not be had."""


class DecodeError(Error):
    """An image could not be decoded."""


class FormatError(Error):
    """A malformed .npy, IDX, TFRecord or MDS file."""


class _TextNeedsRaggedCollate(Exception):
    """Internal: a sample holds str or bytes; the loader rebuilds its collate."""


_PYTHON_ERROR = "stoker::python::PythonError"
_WORKER_KINDS = {
    "stoker::CollateError": CollateError,
    "stoker::vision::DecodeError": DecodeError,
    "stoker::NpyFormatError": FormatError,
    "stoker::IdxFormatError": FormatError,
    "stoker::TFRecordError": FormatError,
    "stoker::MdsError": FormatError,
    "stoker::MemoryBudgetError": MemoryBudgetError,
}


class _KeyErrorText(str):
    """KeyError shows repr() of its argument; this text shows as itself, traceback and all."""

    def __repr__(self):
        return str(self)


def _resolve(type_name):
    module, _, qualname = type_name.partition("\t")
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return None
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return None


def _python_error(details):
    type_name, _, traceback_text = details["original_message"].partition("\n")
    cls = _resolve(type_name)
    name = type_name.partition("\t")[2] or "Exception"
    where = "in DataLoader worker process {}".format(details["worker_id"])
    if details["where"] == "collate":
        where += " (in collate_fn, batch {})".format(details["batch"])
    elif details["where"] == "worker_init":
        where += " (in worker_init_fn)"
    elif details["index"] is not None:
        where += " (sample {})".format(details["index"])
    message = "Caught {} {}.\nOriginal {}".format(name.rpartition(".")[2], where,
                                                   traceback_text)
    error = None
    if cls is not None:
        try:
            error = cls(_KeyErrorText(message) if issubclass(cls, KeyError) else message)
        except Exception:
            error = None
    if error is None:
        error = RuntimeError(message)
    for key in ("worker_id", "index", "pid", "batch"):
        try:
            setattr(error, key, details[key])
        except Exception:
            pass
    try:
        error.worker_traceback = traceback_text
    except Exception:
        pass
    return error


def _from_engine(kind, message, details):
    """Called by the extension's error translation: the exception to raise."""
    if kind == "WorkerException":
        type_name = details["type_name"]
        if type_name == _PYTHON_ERROR:
            return _python_error(details)
        if type_name == "stoker::python::TextNeedsRaggedCollate":
            return _TextNeedsRaggedCollate(message)
        cls = _WORKER_KINDS.get(type_name, WorkerException)
    elif kind == "TextNeedsRaggedCollate":
        return _TextNeedsRaggedCollate(message)
    elif kind == "PythonError":
        cls = _resolve(details["type_name"]) or RuntimeError
        try:
            return cls(message.partition("\n")[2])
        except Exception:
            return RuntimeError(message)
    else:
        cls = globals().get(kind, Error)
        if cls is HeldBatchesTimeout:
            # The engine's advice in Python's terms.
            message = message.replace(
                "A Batch is a view into shared memory whose slot is reused only when the Batch "
                "is destroyed: keep batch.clone() instead of the Batch, or raise prefetch_factor",
                "A batch's tensors are views of shared memory whose slot is reused only when the "
                "last of them is freed: keep stoker.clone(batch) instead of the batch, raise "
                "prefetch_factor, or use prefetch_factor=\"auto\" (it grows while batches are "
                "held)").replace("LoaderOptions::held_timeout", "held_timeout").replace(
                "LoaderOptions::timeout", "timeout")
        elif cls is LoaderTimeout:
            # torch's words first: "DataLoader timed out after 5 seconds".
            message = "DataLoader timed out after {:g} seconds: {}".format(
                details["timeout_ms"] / 1000, message)
    error = cls(message)
    for key, value in details.items():
        setattr(error, key, value)
    return error


__all__ = [
    "Error", "WorkerCrashed", "WorkerException", "CollateError", "LoaderTimeout",
    "HeldBatchesTimeout", "MemoryBudgetError", "PinnedMemoryError", "DecodeError",
    "FormatError",
]
