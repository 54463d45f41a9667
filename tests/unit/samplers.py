"""Checks every population sampler (Task.batch_sampler) must pass, shared by the built-in tasks' tests: a member draws
the batches it would draw alone, and a draw dispatches the same operations for any member count and reads nothing
back."""
from collections import Counter
from collections.abc import Callable

import torch

from trainables.op_count import OpCounter
from trainables.streams import Streams
from trainables.tasks import Batch

FIELDS = ("tokens", "targets", "loss_mask", "labels", "query", "inputs")


def same_batches(a: Batch, b: Batch) -> bool:
    """Every tensor of the two batches equal, info included."""
    same = lambda x, y: x is y is None or (x is not None and y is not None and torch.equal(x, y))
    return (all(same(getattr(a, f), getattr(b, f)) for f in FIELDS)
            and a.info.keys() == b.info.keys() and all(torch.equal(a.info[k], b.info[k]) for k in a.info))


def assert_drawn_as_alone(sampler: Callable, cfgs: list, keys: list[int], n: int, steps: int = 2) -> Batch:
    """Over `steps` steps, member p's batch drawn with the others equals the one sampler([cfgs[p]]) draws alone from
    its own stream. Returns the last population batch."""
    together, streams = sampler(cfgs, "cpu"), Streams(keys)
    alone = [(sampler([cfg], "cpu"), Streams([key])) for cfg, key in zip(cfgs, keys)]
    for _ in range(steps):  # the streams advance alike
        batch = together(n, streams)
        for p, (draw_one, stream) in enumerate(alone):
            assert same_batches(batch.member(p), draw_one(n, stream).member(0)), f"member {p}"
            stream.advance()
        streams.advance()
    return batch


def draw_op_counts(sampler: Callable, populations: list[list], n: int) -> list[Counter]:
    """The operations one training step's draw dispatches, per population (the first draw also hashes the streams'
    element indices, so the second is counted); fails on any value read back to the host."""
    counts = []
    for cfgs in populations:
        draw_batch, streams = sampler(cfgs, "cpu"), Streams(list(range(len(cfgs))))
        draw_batch(n, streams)
        streams.advance()
        with OpCounter() as counter:
            draw_batch(n, streams)
        assert not counter.syncs, counter.syncs
        counts.append(counter.ops)
    return counts
