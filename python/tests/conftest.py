"""pytest set-up for stoker's Python tests: import the package from the build tree
(STOKER_PYTHON_PATH, default build/release/python), and check after every test that it left
no child process, no stoker shared memory and no extra file descriptors behind."""

import gc
import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STOKER_PYTHON_PATH", os.path.join(ROOT, "build", "release", "python"))
if not os.path.isdir(os.path.join(BUILD, "stoker")):
    raise RuntimeError("stoker's Python package is not built at {} (cmake --build "
                       "build/release --target stoker_python), or set STOKER_PYTHON_PATH".format(
                           BUILD))
sys.path.insert(0, BUILD)
os.environ["STOKER_PYTHON_PATH"] = BUILD  # for the tests that start another interpreter

from leaks import process_state, wait_clean  # noqa: E402


@pytest.fixture(autouse=True)
def clean_process():
    """Every test ends as it started: children reaped, rings unmapped, descriptors closed."""
    gc.collect()
    before = process_state()
    yield
    gc.collect()
    diff = wait_clean(before, timeout=10.0)
    assert not diff, "the test left this behind: " + diff
