"""headsweep's bottom layer (tasks, models, training, a trial). Imported first by every headsweep process (sweep/ imports
it before Ray Tune), hence the one process-wide setting below.

The collector's full collections: Python (3.11, measured) runs one every ten younger ones once the heap has grown by a
quarter, and each walks every object alive. Importing torch, Ray Tune and pandas grows the heap from ~50k to ~330k
objects, so a `headsweep train configs/debug.yaml` walked it six times while it started, 0.55-0.61 s of its ~6 s of
CPU (the last two 0.23-0.26 s each), and a debug grid's driver as much; training ran none after that (the same six in
300 steps and in 3,000). Ten times rarer full collections: none in either; the younger generations, where short-lived
cycles die, are collected as before. A trial worker imports Ray Tune before any of headsweep (the actor's class is
Tune's) and gains two of its five. A process that set its own thresholds keeps them. (docs/PERFORMANCE.md)
"""
import gc

PYTHON_FULL_COLLECTION_EVERY = 10  # Python's default third threshold: a full collection every 10 of the second
FULL_COLLECTION_EVERY = 100

_first, _second, _third = gc.get_threshold()
if _third == PYTHON_FULL_COLLECTION_EVERY:
    gc.set_threshold(_first, _second, FULL_COLLECTION_EVERY)
