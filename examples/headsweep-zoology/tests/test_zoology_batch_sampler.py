"""The MQAR task's batch_sampler: a packed trial's members draw their training batches in one vectorised call, each
from its own stream (the batch it draws alone), with the same operations whatever the member count, nothing read back
to the host, and one traceable graph; the `id` evaluation set is drawn by the same code."""
import dataclasses

import pytest
import torch
from omegaconf import OmegaConf

from headsweep_zoology import mqar
from headsweep_zoology.data import MqarConfig, sampler
from trainables import config, dry_run, population
from trainables.op_count import OpCounter
from trainables.streams import GeneratorDraws, Streams

TASK = mqar.TASK
CFG = MqarConfig(n_keys=20, n_values=12, n_pairs=5, n_queries=3, n_train_keys=9)
# A sweep's members: the knob varies (5 is every key a context needs, 15 the most that leaves 5 held out), and one
# member fixes its own ood keys.
MEMBERS = [dataclasses.replace(CFG, n_train_keys=k) for k in (5, 9, 15)] + [
    dataclasses.replace(CFG, n_train_keys=12, n_test_keys=6)]
KEYS = [11, 22, 33, 44]
FIELDS = ("tokens", "targets", "loss_mask", "labels")


def same_batches(a, b) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in FIELDS) and a.query is b.query is None


def test_the_members_of_a_pack_differ_in_their_keys_only():
    shapes = {f.name for f in dataclasses.fields(MqarConfig)} - set(TASK.member_fields)
    assert shapes == {"name", "n_keys", "n_values", "n_pairs", "n_queries", "teacher_forcing"}
    whole = lambda **task: config.from_layers([OmegaConf.create({
        "task": {"name": "headsweep_zoology.mqar:TASK", **task}, "model": {"name": "transformer", "n_layers": 2},
        "logging": {"wandb": False}})])
    assert population.pack_key(whole(n_train_keys=8)) == population.pack_key(whole(n_train_keys=12))
    same_dims = whole(n_keys=40, n_values=24)  # the default's d_vocab and T, but values drawn from other tokens
    assert TASK.dims(same_dims.task) == TASK.dims(whole().task)
    assert population.pack_key(same_dims) != population.pack_key(whole())


@pytest.mark.parametrize("teacher_forcing", [False, True])
def test_a_member_draws_the_same_batches_whatever_it_is_packed_with(teacher_forcing):
    cfgs = [dataclasses.replace(cfg, teacher_forcing=teacher_forcing) for cfg in MEMBERS]
    together, streams = sampler(cfgs, "cpu"), Streams(KEYS)
    alone = [(sampler([cfg], "cpu"), Streams([key])) for cfg, key in zip(cfgs, KEYS)]
    for _ in range(2):  # two steps: the streams advance alike
        batch = together(64, streams)
        assert batch.tokens.shape == (len(cfgs), 64, TASK.dims(cfgs[0])[1])
        for p, (draw_one, stream) in enumerate(alone):
            assert same_batches(batch.member(p), draw_one(64, stream).member(0))
            stream.advance()
        streams.advance()


def test_each_member_draws_its_own_training_keys():
    batch = sampler(MEMBERS, "cpu")(512, Streams(KEYS))
    for p, cfg in enumerate(MEMBERS):
        keys = batch.member(p).tokens[:, 0 : 2 * cfg.n_pairs : 2]  # (B, n_pairs)
        assert set(keys.unique().tolist()) == set(range(1, cfg.n_train_keys + 1))  # all of 1..n_train_keys, no more
        assert (keys.sort(1).values.diff(dim=1) > 0).all()  # distinct within a sequence


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_the_evaluation_sets_are_drawn_by_the_training_samplers_code(split):
    """sample() is the sampler with one member drawing from a generator: the `id` set is drawn as training batches."""
    drawn = TASK.sample(CFG, 50, torch.Generator().manual_seed(3), split)
    if split == "train":
        trained = sampler([CFG], "cpu")(50, GeneratorDraws(torch.Generator().manual_seed(3))).member(0)
        assert same_batches(drawn, trained)
    assert not torch.equal(drawn.tokens, TASK.sample(CFG, 50, torch.Generator().manual_seed(4), split).tokens)


def test_a_draw_dispatches_the_same_operations_for_any_member_count_and_reads_nothing_back():
    counts = []
    for members in (1, 8, 64):
        cfgs = [MEMBERS[p % len(MEMBERS)] for p in range(members)]
        draw, streams = sampler(cfgs, "cpu"), Streams(list(range(members)))
        draw(16, streams)
        streams.advance()
        with OpCounter() as counter:  # a training step's draw (the first also hashes the streams' element indices)
            draw(16, streams)
        assert not counter.syncs and "aten._local_scalar_dense.default" not in counter.ops
        counts.append(counter.ops)
    assert counts[0] == counts[1] == counts[2]


def test_a_draw_traces_as_one_graph():
    """fullgraph=True fails on any graph break: a value read back, data-dependent control flow. The eager backend
    compiles no kernels."""
    draw = sampler(MEMBERS, "cpu")
    traced = torch.compile(draw, fullgraph=True, backend="eager")(8, Streams(KEYS))
    assert same_batches(traced, draw(8, Streams(KEYS)))


def test_the_dry_run_accepts_the_sampler():
    cfg = config.from_layers([OmegaConf.create({"task": {"name": "headsweep_zoology.mqar:TASK"},
                                                "model": {"name": "transformer", "n_layers": 2},
                                                "logging": {"wandb": False}})])
    dry_run.check_batch_sampler(TASK, cfg, *TASK.dims(cfg.task))
