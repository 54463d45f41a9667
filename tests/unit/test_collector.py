"""trainables/__init__.py's collector setting: a headsweep process walks its heap in no full collection while it imports
torch, Ray Tune and pandas (six before, ~0.6 s of a debug command's CPU), and a process that set its own thresholds
keeps them. Each case a fresh interpreter: the imports are what is measured."""
import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Counts the full collections while importing what a sweep's driver and its trial workers import (sweep.tuner: Ray
# Tune, torch, pandas, the trainable), after setting the thresholds it is given (None: Python's own).
IMPORT_A_SWEEP = """
import gc, json, sys
own = json.loads(sys.argv[1])
if own:
    gc.set_threshold(*own)
full = []
gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 2 and full.append(1))
import sweep.tuner
print(json.dumps([len(full), gc.get_threshold()]))
"""


def full_collections_importing_a_sweep(own_thresholds) -> tuple[int, list[int]]:
    proc = subprocess.run([sys.executable, "-c", IMPORT_A_SWEEP, json.dumps(own_thresholds)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, thresholds = json.loads(proc.stdout)
    return count, thresholds


@pytest.mark.parametrize("own", [None, [700, 10, 11]], ids=["python's thresholds", "its own thresholds"])
def test_a_sweep_imports_without_walking_its_heap_unless_the_process_chose_its_own_thresholds(own):
    count, thresholds = full_collections_importing_a_sweep(own)
    if own is None:
        first, second, _ = gc.get_threshold()  # this process imported trainables too: Python's first two
        assert thresholds == [first, second, 100] and count <= 1, (count, thresholds)
    else:  # kept, and then the imports walk the heap as in any Python process
        assert thresholds == own and count >= 3, (count, thresholds)
