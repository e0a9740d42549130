"""examples/python/quickstart.py runs and says what it shows: the same result from both
loaders, and a resumed loader that goes on with the next batch."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quickstart_example():
    env = dict(os.environ, PYTHONPATH=os.environ["STOKER_PYTHON_PATH"])
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "python", "quickstart.py"), "--workers",
         "2", "--epochs", "1", "--samples", "3000"],
        capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "the same result from both loaders: True" in lines
    assert "resumed with the next batch: True" in lines
    assert any(line.startswith("stoker epoch 0: 3000 samples") for line in lines)
