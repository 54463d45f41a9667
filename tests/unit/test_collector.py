"""trainables/__init__.py's collector setting: a headsweep process walks its heap in no full collection while it imports
torch, Ray Tune and pandas (six before, ~0.6 s of a debug command's CPU), and a process that set its own thresholds
keeps them. Each case a fresh interpreter: the imports are what is measured."""
import gc
import json
import subprocess
import sys
from pathlib import Path

from trainables import FULL_COLLECTION_EVERY

ROOT = Path(__file__).resolve().parents[2]
# The full collections while importing `module`, after setting the thresholds given (null: Python's own).
IMPORT = """
import gc, importlib, json, sys
own, module = json.loads(sys.argv[1]), sys.argv[2]
if own:
    gc.set_threshold(*own)
full = []
gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 2 and full.append(1))
importlib.import_module(module)
print(json.dumps([len(full), gc.get_threshold()]))
"""


def full_collections_importing(module: str, own_thresholds=None) -> tuple[int, list[int]]:
    proc = subprocess.run([sys.executable, "-c", IMPORT, json.dumps(own_thresholds), module], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, thresholds = json.loads(proc.stdout)
    return count, thresholds


def test_a_sweep_imports_torch_ray_tune_and_pandas_without_walking_its_heap():
    count, thresholds = full_collections_importing("sweep.tuner")  # what a driver and a trial worker import
    first, second, _ = gc.get_threshold()  # this process imported trainables too: Python's first two
    assert thresholds == [first, second, FULL_COLLECTION_EVERY] and count <= 1, (count, thresholds)


def test_a_process_that_chose_its_own_thresholds_keeps_them():
    _, thresholds = full_collections_importing("trainables", [700, 10, 11])
    assert thresholds == [700, 10, 11]
