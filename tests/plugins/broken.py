"""Plugins that break the contract, one way each; tests name them by module path and expect one line naming the key."""
import torch

from tests.plugins.repeat import Repeat
from tests.plugins.mean_mixer import MeanMixerSpec
from trainables.tasks import Task


class FloatTokens(Repeat):
    def batch_sampler(self, cfgs, device, split="train"):
        draw = super().batch_sampler(cfgs, device, split)

        def float_tokens(n, draws):
            batch = draw(n, draws)
            batch.tokens = batch.tokens.float()
            return batch

        return float_tokens


class TooLong(Repeat):
    def dims(self, cfg):
        return cfg.n_symbols + 1, cfg.length  # shorter than the sequences sample() returns


class NoOodSplit(Repeat):
    def eval_splits(self, cfg):
        return {"id": "train"}


class Raises(Repeat):
    def batch_sampler(self, cfgs, device, split="train"):
        raise RuntimeError("the generator's table is missing")


class RaisesWhenLong(Repeat):
    """Fine on its base config (the dry run passes), raises in a trial of a longer string."""

    def batch_sampler(self, cfgs, device, split="train"):
        if cfgs[0].length > 4:
            raise ValueError(f"strings longer than 4 are not supported (got {cfgs[0].length})")
        return super().batch_sampler(cfgs, device, split)


class PackedTogether(Repeat):
    """A batch_sampler that draws every member's strings from the first member's stream: a member's batches would
    depend on what it is packed with."""

    def batch_sampler(self, cfgs, device, split="train"):
        draw = super().batch_sampler(cfgs, device, split)
        return lambda n, draws: draw(n, draws)._map(lambda t, _: t[:1].expand(t.shape))  # member 0's everywhere


class NoSample(Task):
    name = "no_sample"
    config = Repeat.config

    def validate(self, cfg): ...
    def dims(self, cfg): return 4, 4
    def eval_splits(self, cfg): return {"id": "train", "ood": "train"}


class WrongLogits(MeanMixerSpec):
    def build(self, cfg, d_vocab, n_ctx):
        model = super().build(cfg, d_vocab - 1, n_ctx)  # one logit short
        model.embed = torch.nn.Embedding(d_vocab, cfg.d_model)
        return model


FLOAT_TOKENS, TOO_LONG, NO_OOD, RAISES, NO_SAMPLE = FloatTokens(), TooLong(), NoOodSplit(), Raises(), NoSample()
PACKED_TOGETHER = PackedTogether()
RAISES_WHEN_LONG = RaisesWhenLong()
WRONG_LOGITS = WrongLogits()
NOT_A_TASK = object()


class NoForward(MeanMixerSpec):
    """run_with_cache alone: training, which calls the module, would fail at its first step."""

    def build(self, cfg, d_vocab, n_ctx):
        model = super().build(cfg, d_vocab, n_ctx)
        model.forward = torch.nn.Module.forward.__get__(model)  # nn.Module's own: raises NotImplementedError
        return model


NO_FORWARD = NoForward()
