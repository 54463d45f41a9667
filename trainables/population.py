"""Members of one shape trained as one (DESIGN "Packing"): their parameters stacked along a leading member dimension,
one vmapped forward and backward per step, one optimizer per phase over the stacked parameters.

Each member keeps its own seed, data distribution and batches (its own generators), its own early stopping and its
own divergence (train.py's loop keeps those per member); what it gets from the stack is exactly what it would get
alone:
- the loss is the sum of the members' mean losses, so each member's slice of the gradient is its own gradient, and
  the optimizers (SGD, Adam, AdamW: elementwise, no clipping) update each slice exactly as they would update it alone;
- a member that stopped (early stopping, a non-finite loss) is frozen: its loss is masked out and its slice restored
  after every step;
- its checkpoints hold its slice of the optimizer state in the format its own optimizer has, so it resumes packed or
  alone.
A stack of one runs the member's own module and optimizers directly (no vmap, no copies): that is `train(cfg)`.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from trainables.models import MODELS
from trainables.tasks import Batch, task_of


def pack_key(cfg) -> tuple:
    """Members with equal keys can train as one: the same task, vocabulary and context, whether one position per
    sequence is scored, the same model and training settings, evaluation schedule and device. Seeds, data
    distributions, evaluation set sizes, patience and thresholds may differ."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    return (task.name, task.dims(cfg.task), task.query_only(cfg.task), repr(cfg.model),
            repr(cfg.optim) if spec.uses_optim else None, cfg.eval.every, cfg.device)


class Stack:
    """The parameters and optimizers of the members' TrainStates as one. One state runs its own module and its own
    optimizers; several run a vmapped functional call of the first state's module over parameters stacked along
    dim 0, with one optimizer per phase over them. `states` keep their order: a member's slot is its position."""

    def __init__(self, states: list, compiled: bool = False):
        self.states = states
        template = states[0].model
        self.template = template
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
        self.frozen: dict[int, dict[str, torch.Tensor]] = {}  # slot -> parameters of a member that stopped
        # Compiled, the forward and backward run as a few fused kernels instead of a hundred small ones; the first
        # step compiles them (seconds), and a new batch width may compile once more.
        self._forward = torch.compile(self._forward) if compiled else self._forward

    def step(self, batches: dict[int, Batch]) -> dict[int, float]:
        """One optimizer step of the current phase for the members in `batches` (slot -> its batch; every other
        member is frozen): per slot, its loss (a member whose loss is not finite takes no step)."""
        slots = sorted(batches)
        optimizer = self.optimizers[self.states[slots[0]].phase_index()]
        for state in self.states:
            state.model.train()
        self._differentiate_only(optimizer)
        losses, hits, counts = self._forward(_stack([batches[s] for s in slots], slots, len(self.states)))  # (M,)
        stepping = torch.zeros_like(losses, dtype=torch.bool)  # (M,) on the members' device
        stepping[slots] = True
        live = torch.isfinite(losses) & stepping
        optimizer.zero_grad(set_to_none=True)
        torch.where(live, losses, torch.zeros_like(losses)).sum().backward()
        # One copy to the host a step (on a GPU each .item() would wait for the device): four lists of M.
        host = torch.stack([losses.detach(), hits.to(losses), counts.to(losses), live.to(losses)])  # (4, M)
        loss, hit, count, alive = host.tolist()
        if any(alive):
            optimizer.step()
        self._restore_frozen()
        for slot in slots:
            if math.isfinite(loss[slot]):
                state = self.states[slot]
                state.step += 1
                state.loss_sum += loss[slot] * count[slot]
                state.hits += hit[slot]
                state.count += int(count[slot])
        return {slot: loss[slot] for slot in slots}

    def _differentiate_only(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients for the parameters this phase's optimizer updates, none for the others: the one-step model's W_V
        step then skips the backward through its attention (W_KQ's gradient, which no optimizer would use)."""
        stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for p in self.params.values():
            p.requires_grad_(id(p) in stepped)

    def _forward(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per member: mean cross-entropy over its scored positions, its correct predictions and their count."""
        if len(self.states) == 1:
            one = {k: (v[0] if v is not None else None) for k, v in batch.items()}
            return tuple(x[None] for x in scored_loss(self.template, one))
        template = self.template

        def member_loss(params, buffers, tokens, query, targets, mask):
            model = lambda tokens, query: functional_call(template, (params, buffers), (tokens, query))
            return scored_loss(model, {"tokens": tokens, "query": query, "targets": targets, "mask": mask})

        query_dim = 0 if batch["query"] is not None else None
        return vmap(member_loss, in_dims=(0, 0, 0, query_dim, 0, 0))(
            self.params, self.buffers, batch["tokens"], batch["query"], batch["targets"], batch["mask"])

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

    def freeze(self, slot: int) -> None:
        """A member that stopped keeps its parameters: its slice is restored after every later step."""
        if len(self.states) > 1:
            self.frozen[slot] = {name: p[slot].detach().clone() for name, p in self.params.items()}

    def _restore_frozen(self) -> None:
        with torch.no_grad():
            for slot, saved in self.frozen.items():
                for name, value in saved.items():
                    self.params[name][slot] = value


def compiles(cfg) -> bool:
    """Whether a member's training step runs torch.compile'd (`optim.compile`; models trained by `optim` only)."""
    return MODELS[cfg.model.name].uses_optim and cfg.optim.compiles()


def scored_loss(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over the scored positions (the query, or where the mask is set), the correct predictions and
    their count, written without data-dependent shapes so that it vmaps. model(tokens, query) -> logits."""
    logits = model(batch["tokens"], batch["query"])
    if batch["query"] is not None:  # logits (B, N) at the query
        targets = batch["targets"].gather(1, batch["query"][:, None])[:, 0]  # (B,)
        hits = (logits.argmax(-1) == targets).sum()
        return F.cross_entropy(logits, targets), hits, torch.tensor(targets.shape[0])
    mask = batch["mask"].to(logits.dtype)  # (B, T)
    per_position = F.cross_entropy(logits.transpose(1, 2), batch["targets"], reduction="none")  # (B, T)
    count = mask.sum()
    hits = ((logits.argmax(-1) == batch["targets"]).to(logits.dtype) * mask).sum()
    return (per_position * mask).sum() / count, hits, count


def _stack(batches: list[Batch], slots: list[int], size: int) -> dict:
    """The members' batches padded to one width and stacked in their slots; a frozen member's slot holds a copy of
    the first batch (its loss is masked out)."""
    width = max(b.tokens.shape[1] for b in batches)
    by_slot = {slot: b.padded(width) for slot, b in zip(slots, batches)}
    ordered = [by_slot.get(slot, by_slot[slots[0]]) for slot in range(size)]
    stack = lambda name: torch.stack([getattr(b, name) for b in ordered])
    return {"tokens": stack("tokens"), "targets": stack("targets"), "mask": stack("loss_mask"),
            "query": stack("query") if ordered[0].query is not None else None}


def _stacked_optimizer(optimizer: torch.optim.Optimizer, names: dict[int, str], params: dict) -> torch.optim.Optimizer:
    """An optimizer of the same type and settings as a member's, over the stacked parameters of the same names in the
    same order (so the stacked state's indices are the member optimizer's)."""
    groups = [{**{k: v for k, v in group.items() if k != "params"},
               "params": [params[names[id(p)]] for p in group["params"]]} for group in optimizer.param_groups]
    return type(optimizer)(groups)


def _slice_optimizer_state(stacked: dict, slot: int, param_groups: list) -> dict:
    """One member's optimizer state_dict out of the stacked one: every per-parameter tensor sliced at the member's slot
    (scalars such as Adam's step are shared), with the member's own param_groups."""
    state = {index: {k: (v[slot] if torch.is_tensor(v) and v.dim() > 0 else v).clone() if torch.is_tensor(v) else v
                     for k, v in entry.items()} for index, entry in stacked["state"].items()}
    return {"state": state, "param_groups": param_groups}


def _stack_optimizer_states(states: list[dict]) -> dict:
    """The stacked optimizer's state_dict out of the members' (all at the same step)."""
    stacked = {index: {k: (torch.stack([s["state"][index][k] for s in states]) if torch.is_tensor(v) and v.dim() > 0
                           else v) for k, v in entry.items()} for index, entry in states[0]["state"].items()}
    return {"state": stacked, "param_groups": states[0]["param_groups"]}
