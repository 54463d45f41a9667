"""The members of a pack whose tensors stack (one architecture and training setup: pack_key) trained as one (DESIGN
"Packing"): their parameters stacked along a leading member dimension, one vmapped forward and backward per step,
one optimizer per phase over the stacked parameters.

Each member keeps its own seed, data distribution and batches, its own early stopping and its own divergence (train.py's
loop keeps those per member); what it gets from the stack is exactly what it would get alone:
- its batches come from its own random stream (Batches), the same whatever it is packed with;
- the loss is the sum of the members' mean losses, so each member's slice of the gradient is its own gradient, and
  the optimizers (SGD, Adam, AdamW: elementwise) update each slice exactly as they would update it alone; gradient
  clipping scales each member's slice by its own norm (clip_each), and the members of a pack share their optim
  settings (pack_key), so their learning-rate schedules too;
- a member that stopped (early stopping, a non-finite loss) has its loss masked out, so it touches no other member;
- its checkpoints hold its slice of the optimizer state in the format its own optimizer has, so it resumes packed or
  alone.
A stack of one runs the member's own module and optimizers directly (no vmap, no copies): that is `train(cfg)`.
A training step's host work does not grow with the member count, and it reads nothing back to the host: on a GPU the
host queues the next step while the device runs this one (docs/PERFORMANCE.md, "Packed step").
"""
from __future__ import annotations

import copy
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from trainables.models import MODELS
from trainables.streams import Streams
from trainables.tasks import Batch, task_of


def pack_key(cfg) -> tuple:
    """Members with equal keys can train as one: the same task, vocabulary and context, whether one position per
    sequence is scored, the task settings its batch_sampler needs equal (all but Task.member_fields), the same model
    and training settings, evaluation schedule and device. Seeds, data distributions, evaluation set sizes, patience
    and thresholds may differ."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    shared = repr({k: v for k, v in vars(cfg.task).items() if k not in task.member_fields})
    return (task.name, task.dims(cfg.task), task.query_only(cfg.task), shared, repr(cfg.model),
            repr(cfg.optim) if spec.uses_optim else None, cfg.eval.every, cfg.device)


class Collected(NamedTuple):
    """One member's training since the last evaluation, as Stack.collect hands it to the host."""

    alive: bool  # every loss finite so far; a member whose loss was not finite is masked out from that step on
    bad_step: int  # the step whose loss first was not finite (-1 while alive)
    bad_loss: float  # that loss
    loss_sum: float  # the training loss x count, summed over the steps since the last collect
    hits: float  # correct predictions at the scored positions (0 for real-valued targets)
    count: float  # scored positions


class Stack:
    """The parameters and optimizers of the members' TrainStates as one. One state runs its own module and its own
    optimizers; several run a vmapped functional call of the first state's module over parameters stacked along
    dim 0, with one optimizer per phase over them. `states` keep their order: a member's slot is its position.

    A step reads nothing back to the host (issue gpu-ready): the members' losses, hits and counts add up on the device,
    a member whose loss is not finite is masked out from that step on and its step and loss are kept there, and
    `collect` reads it all at the next evaluation. Every slot keeps its place, stopped or not, so shapes never change;
    a stopped member's slot is never read again (its result was taken when it stopped)."""

    def __init__(self, states: list, compiled: str | None = None):
        self.states = states
        self.template = template = states[0].model
        if len(states) == 1:
            self.params, self.buffers = dict(template.named_parameters()), dict(template.named_buffers())
            self.optimizers = [phase.optimizer for phase in states[0].phases]
        else:
            names = {id(p): name for name, p in template.named_parameters()}
            self.params, self.buffers = stack_module_state([state.model for state in states])
            self.optimizers = [_stacked_optimizer(phase.optimizer, names, self.params) for phase in states[0].phases]
            if states[0].step:  # resumed: the members' optimizer moments, stacked
                for index, optimizer in enumerate(self.optimizers):
                    optimizer.load_state_dict(_stack_optimizer_states(
                        [state.phases[index].optimizer.state_dict() for state in states]))
        device = next(iter(self.params.values())).device
        M = len(states)
        self.training = torch.ones(M, dtype=torch.bool, device=device)  # (M,) stepping: not stopped, losses finite
        self.clock = torch.tensor(states[0].step, device=device)  # the step count, on the device
        self.bad_step = torch.full((M,), -1, device=device)  # (M,) the step whose loss was first not finite
        self.bad_loss = torch.zeros(M, dtype=torch.float64, device=device)  # (M,) that loss
        self.sums = torch.zeros(3, M, dtype=torch.float64, device=device)  # loss x count, hits, count since collect
        self._phase = None
        # Compiled, the forward and backward run as a few fused kernels instead of a hundred small ones; the first
        # step compiles them (seconds). "reduce-overhead" also replays them as CUDA graphs (shapes never change).
        if compiled:
            self._forward = torch.compile(self._forward, mode=None if compiled == "default" else compiled)

    def step(self, batch: Batch, phase: int, at: int = 0) -> None:
        """One optimizer step of phase `phase` (its step `at`, from 0: where its learning-rate schedule is) for every
        member still training, each on its batch (batch tensors (M, n, ...)): the same operations whatever M, and no
        value read back to the host (the learning rate is a host number, the clipping scale stays on the device)."""
        optimizer, settings = self.optimizers[phase], self.states[0].phases[phase]  # the members' settings are equal
        if phase != self._phase:
            self._differentiate_only(optimizer)
            self._phase = phase
        if settings.lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = settings.lr(at)
        self.template.train()  # evaluation left it in eval mode; vmap runs the template's code for every member
        losses, hits, counts = self._forward(batch)  # (M,) each
        live = self.training & torch.isfinite(losses)  # (M,)
        went_bad = self.training & ~live
        self.bad_step.copy_(torch.where(went_bad, self.clock, self.bad_step))
        self.bad_loss.copy_(torch.where(went_bad, losses.detach().double(), self.bad_loss))
        self.training.copy_(live)
        optimizer.zero_grad(set_to_none=True)
        torch.where(live, losses, torch.zeros_like(losses)).sum().backward()
        if settings.clip_norm:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            clip_each(grads if len(self.states) > 1 else [g[None] for g in grads], settings.clip_norm)
        optimizer.step()  # a masked member's gradient is zero; whatever its slice becomes is never read
        step_sums = torch.stack([losses.detach().double() * counts, hits.double(), counts.double()])  # (3, M)
        self.sums += torch.where(live, step_sums, torch.zeros_like(step_sums))
        self.clock += 1

    def collect(self) -> list[Collected]:
        """Per slot, what its steps summed on the device since the last collect, which starts a new window: the one
        read back to the host, once per evaluation."""
        host = torch.cat([torch.stack([self.training.double(), self.bad_step.double(), self.bad_loss]),
                          self.sums]).tolist()  # (6, M)
        self.sums.zero_()
        return [Collected(bool(alive), int(step), loss, *sums) for alive, step, loss, *sums in zip(*host)]

    def stop(self, slot: int) -> None:
        """A member that stopped trains no more: its loss is masked out from now on."""
        self.training[slot] = False

    def _differentiate_only(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients for the parameters this phase's optimizer updates, none for the others: the one-step model's W_V
        step then skips the backward through its attention (W_KQ's gradient, which no optimizer would use)."""
        stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for p in self.params.values():
            p.requires_grad_(id(p) in stepped)

    def _forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per member: its mean loss over its scored positions, its correct predictions and their count."""
        if len(self.states) == 1:
            one = batch.member(0)
            return tuple(x[None] for x in scored_loss(self.template, one.model_input, one.query, one.targets,
                                                      one.loss_mask))
        return stacked_loss(self.template, self.params, self.buffers, batch.model_input, batch.query, batch.targets,
                            batch.loss_mask)

    def unstack(self, slots: list[int]) -> None:
        """Copy the stacked parameters into these members' own modules (for their evaluation and checkpoint)."""
        if len(self.states) == 1:
            return
        with torch.no_grad():
            for slot in slots:
                for name, p in self.states[slot].model.named_parameters():
                    p.copy_(self.params[name][slot])

    def optimizer_states(self, slot: int) -> list[dict]:
        """The member's slice of each phase's optimizer state, in the format its own optimizer has."""
        own = [copy.deepcopy(phase.optimizer.state_dict()) for phase in self.states[slot].phases]
        if len(self.states) == 1:
            return own
        return [_slice_optimizer_state(optimizer.state_dict(), slot, mine["param_groups"])
                for optimizer, mine in zip(self.optimizers, own)]


class Batches:
    """The training batches of a population, stacked (tensors (M, n, ...)): one vectorised draw of the task's
    batch_sampler from the members' own streams (trainables/streams.py) on their device, the same operations for any
    member count."""

    def __init__(self, cfgs: list, states: list):
        self.sampler = task_of(cfgs[0]).batch_sampler([cfg.task for cfg in cfgs], cfgs[0].device)
        self.streams = Streams([state.key for state in states], cfgs[0].device, states[0].step)

    def draw(self, n: int) -> Batch:
        """The next batch of n sequences of every member (a stopped member's slot too: shapes never change)."""
        batch = self.sampler(n, self.streams)
        self.streams.advance()
        return batch


def compile_mode(cfg) -> str | None:
    """How a member's training step is torch.compile'd (`optim.compile`; models trained by `optim` only): None (not
    at all), "default" or "reduce-overhead" (CUDA graphs)."""
    return cfg.optim.compile_mode() if MODELS[cfg.model.name].uses_optim else None


def scored_loss(model, model_input: torch.Tensor, query: torch.Tensor | None, targets: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mean loss over the scored positions (the query, or where the mask is set), the correct predictions and
    their count, written without data-dependent shapes so that it vmaps. model(model_input, query) -> outputs. Token
    or real-valued targets (cross-entropy, or squared error and no hits) are told apart by the dtype, before any value
    is read, so the branch is the same for every member and step."""
    outputs = model(model_input, query)  # (B, T, N), or (B, N) at the query
    continuous = targets.is_floating_point()
    if query is not None:  # one scored position per sequence
        index = query[:, None, None].expand(-1, 1, targets.shape[-1]) if continuous else query[:, None]
        targets = targets.gather(1, index)[:, 0]  # (B, d_out) or (B,)
        if continuous:
            errors = (outputs - targets).square().mean(-1)  # (B,)
            return errors.mean(), torch.zeros_like(errors[0]), torch.full_like(errors[0], len(errors))
        hits = (outputs.argmax(-1) == targets).sum()
        return F.cross_entropy(outputs, targets), hits, torch.full_like(hits, targets.shape[0])
    mask = mask.to(outputs.dtype)  # (B, T)
    count = mask.sum()
    if continuous:
        per_position = (outputs - targets).square().mean(-1)  # (B, T)
        return (per_position * mask).sum() / count, torch.zeros_like(count), count
    per_position = F.cross_entropy(outputs.transpose(1, 2), targets, reduction="none")  # (B, T)
    hits = ((outputs.argmax(-1) == targets).to(outputs.dtype) * mask).sum()
    return (per_position * mask).sum() / count, hits, count


def stacked_loss(template: torch.nn.Module, params: dict, buffers: dict, model_input: torch.Tensor,
                 query: torch.Tensor | None, targets: torch.Tensor, mask: torch.Tensor):
    """scored_loss of every member at once, (M,) each: one vmapped functional call of `template` over parameters,
    buffers and batch tensors stacked along a leading member dimension."""
    def member_loss(params, buffers, model_input, query, targets, mask):
        model = lambda model_input, query: functional_call(template, (params, buffers), (model_input, query))
        return scored_loss(model, model_input, query, targets, mask)

    return vmap(member_loss, in_dims=(0, 0, 0, None if query is None else 0, 0, 0))(
        params, buffers, model_input, query, targets, mask)


def clip_each(grads: list[torch.Tensor], max_norm: float) -> None:
    """Scale each member's gradients (tensors (M, ...), member first) in place to a global norm of at most max_norm:
    what torch.nn.utils.clip_grad_norm_ does to one model alone, for every member at once, each by its own norm (a
    member's norm, even a non-finite one, never scales another's)."""
    norms = torch.stack([g.reshape(len(g), -1).norm(dim=1) for g in grads]).norm(dim=0)  # (M,): the norm of norms
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # (M,), as clip_grad_norm_ computes it
    for g in grads:
        g.mul_(scale.view(-1, *(1,) * (g.dim() - 1)))


def _stacked_optimizer(optimizer: torch.optim.Optimizer, names: dict[int, str], params: dict) -> torch.optim.Optimizer:
    """An optimizer of the same type and settings as a member's, over the stacked parameters of the same names in the
    same order (so the stacked state's indices are the member optimizer's)."""
    groups = [{**{k: v for k, v in group.items() if k != "params"},
               "params": [params[names[id(p)]] for p in group["params"]]} for group in optimizer.param_groups]
    return type(optimizer)(groups)


def _slice_optimizer_state(stacked: dict, slot: int, param_groups: list) -> dict:
    """One member's optimizer state_dict out of the stacked one: every per-parameter tensor sliced at the member's slot
    (scalars such as Adam's step are shared), with the member's own param_groups at the stacked groups' settings
    (the learning rate its schedule set last)."""
    state = {index: {k: (v[slot] if torch.is_tensor(v) and v.dim() > 0 else v).clone() if torch.is_tensor(v) else v
                     for k, v in entry.items()} for index, entry in stacked["state"].items()}
    groups = [{**{k: v for k, v in settings.items() if k != "params"}, "params": own["params"]}
              for settings, own in zip(stacked["param_groups"], param_groups)]
    return {"state": state, "param_groups": groups}


def _stack_optimizer_states(states: list[dict]) -> dict:
    """The stacked optimizer's state_dict out of the members' (all at the same step)."""
    stacked = {index: {k: (torch.stack([s["state"][index][k] for s in states]) if torch.is_tensor(v) and v.dim() > 0
                           else v) for k, v in entry.items()} for index, entry in states[0]["state"].items()}
    return {"state": stacked, "param_groups": states[0]["param_groups"]}
