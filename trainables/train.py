"""train(cfg, logger) -> Result: the one training loop, for the one-step model and the transformer alike.

A run is a list of phases (optimizer, steps, batch size). The one-step model's Algorithm 1 is two phases of a single
plain gradient step each; the transformer is one phase of Adam. Every step draws a fresh training batch; every
`eval.every` steps (and after the last) the model is measured on fixed ID and OOD sets drawn once up front.
"""
from __future__ import annotations

import copy
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from trainables import metrics
from trainables.logger import Logger
from trainables.models import build_model
from trainables.tasks.lengths import distribution, diversity_metrics
from trainables.tasks.trigger_copy import Batch, sample, valid_pairs

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


@dataclass
class OptimConfig:
    """Gradient training of the transformer (the one-step model's Algorithm 1 is configured under `model`)."""

    name: str = "adam"  # adam | adamw | sgd
    lr: float = 1e-4  # learning rate
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam and sgd
    batch_size: int = 64  # fresh training sequences per step
    max_steps: int = 20000  # training steps unless early stopping ends the run sooner


@dataclass
class EvalConfig:
    """When and on what the model is measured."""

    every: int = 250  # evaluate every this many training steps, and after the last
    n_id: int = 1024  # in-distribution evaluation sequences (drawn once per run)
    n_ood: int = 1024  # OOD evaluation sequences of task.ood_split (drawn once per run)
    n_pairs_per_cell: int = 4  # final all_pairs evaluation: sequences per (l1, l2) cell of the accuracy matrix
    patience: int = 5  # stop after this many evaluations without a new best ID loss; 0 never stops early
    threshold: float = 0.99  # ood/acc >= threshold counts as generalizing OOD (ood/success = 1)
    n_examples: int = 4  # OOD sequences whose attention is saved in attention.npz


@dataclass
class Phase:
    optimizer: torch.optim.Optimizer
    steps: int
    batch_size: int


@dataclass
class EarlyStopping:
    """Stop after `patience` evaluations in a row without a new best ID loss; patience 0 never stops."""

    patience: int
    best: float = math.inf
    stale: int = 0

    def should_stop(self, id_loss: float) -> bool:
        if id_loss < self.best - 1e-6:
            self.best, self.stale = id_loss, 0
        else:
            self.stale += 1
        return self.patience > 0 and self.stale >= self.patience


@dataclass
class Result:
    metrics: dict[str, float | str]  # final metrics with flat `split/name` keys, plus status, steps, seconds
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # attention, accuracy matrix, W_KQ: attention.npz


def training_phases(cfg, model: torch.nn.Module) -> list[Phase]:
    m = cfg.model
    if m.name == "one_step":
        # Algorithm 1: from W_KQ = W_V = 0, one plain gradient step on W_V, then one on W_KQ at the new W_V, each on
        # fresh samples. Plain SGD without momentum makes each step exactly W <- W - eta * grad.
        return [
            Phase(torch.optim.SGD([model.W_V], lr=m.eta_V), 1, m.n_samples_V),
            Phase(torch.optim.SGD([model.W_KQ], lr=m.eta_KQ), 1, m.n_samples_KQ),
        ]
    o = cfg.optim
    return [Phase(OPTIMIZERS[o.name](model.parameters(), lr=o.lr, weight_decay=o.weight_decay), o.max_steps, o.batch_size)]


def seeded_generators(seed: int) -> tuple[int, torch.Generator, torch.Generator]:
    """Independent streams for initialisation, training data and evaluation data, all from the one seed."""
    init_seed, train_seed, eval_seed = torch.randint(2**62, (3,), generator=torch.Generator().manual_seed(seed)).tolist()
    return init_seed, torch.Generator().manual_seed(train_seed), torch.Generator().manual_seed(eval_seed)


def copy_generator(generator: torch.Generator) -> torch.Generator:
    """A generator in the same state, so mid-run readouts leave the final readout's draws unchanged."""
    twin = torch.Generator()
    twin.set_state(generator.get_state())
    return twin


def train(cfg, logger: Logger | None = None, resume: dict | None = None,
          on_checkpoint: Callable[[dict], None] | None = None) -> Result:
    """Train one model as configured and return its final metrics and arrays. The config must be validated.

    on_checkpoint receives the full training state after every finite evaluation (before that evaluation is logged);
    train(cfg, resume=state) continues from it exactly: same batches, same optimizer moments, same result.
    """
    started = time.perf_counter() - (resume["seconds"] if resume else 0.0)
    logger = logger or Logger()
    device = torch.device(cfg.device)
    task = cfg.task
    init_seed, train_generator, eval_generator = seeded_generators(cfg.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = build_model(cfg.model, task.vocab_size, task.max_len).to(device)
    eval_sets = {
        "id": sample(task, cfg.eval.n_id, eval_generator, "train").to(device),
        "ood": sample(task, cfg.eval.n_ood, eval_generator, task.ood_split).to(device),
    }
    data_metrics = diversity_metrics(distribution(task.lengths, task.n_triggers))

    phases = training_phases(cfg, model)
    schedule = [phase for phase in phases for _ in range(phase.steps)]
    status, stopper, done = "completed", EarlyStopping(cfg.eval.patience), 0
    if resume:
        model.load_state_dict(resume["model"])
        for phase, state in zip(phases, resume["optimizers"]):
            phase.optimizer.load_state_dict(state)
        train_generator.set_state(resume["train_generator"])
        stopper, status, done = EarlyStopping(**resume["stopper"]), resume["status"], resume["step"]
    # The run's result is its last finite evaluation; a diverged run falls back to it (or to initialisation).
    finite_state, finite_step, finite_metrics = copy.deepcopy(model.state_dict()), done, resume and resume["metrics"]
    train_losses, train_hits, train_count = 0.0, 0.0, 0
    bar = tqdm(total=len(schedule), initial=done, desc=cfg.name, unit="step", disable=not sys.stderr.isatty(), leave=False)
    for step, phase in enumerate(schedule[done:] if status == "completed" else [], start=done + 1):
        model.train()
        batch = sample(task, phase.batch_size, train_generator).to(device)
        logits, _ = model(batch.tokens, batch.query)  # (B, N) at the query
        loss = F.cross_entropy(logits, batch.targets)
        if not torch.isfinite(loss):
            status = "diverged"
            break
        phase.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        phase.optimizer.step()
        train_losses += loss.item() * len(batch.targets)
        train_hits += (logits.argmax(-1) == batch.targets).sum().item()
        train_count += len(batch.targets)
        bar.update()

        if step % cfg.eval.every == 0 or step == len(schedule):
            latest = {"train/loss": train_losses / train_count, "train/acc": train_hits / train_count}
            latest |= evaluate(model, eval_sets, cfg) | data_metrics
            train_losses, train_hits, train_count = 0.0, 0.0, 0
            if math.isfinite(latest["id/loss"]):
                finite_state, finite_step, finite_metrics = copy.deepcopy(model.state_dict()), step, latest
                if stopper.should_stop(latest["id/loss"]):
                    status = "early_stopped"
                if on_checkpoint:
                    on_checkpoint({"step": step, "status": status, "metrics": latest, "model": finite_state,
                                   "optimizers": [p.optimizer.state_dict() for p in phases],
                                   "train_generator": train_generator.get_state(), "stopper": vars(stopper).copy(),
                                   "seconds": time.perf_counter() - started})
            else:
                status = "diverged"
            logger.log(latest, step)
            evaluation = step // cfg.eval.every  # the last step's evaluation logs its media after the loop
            if cfg.logging.media_every and evaluation % cfg.logging.media_every == 0 and step % cfg.eval.every == 0 \
                    and status == "completed" and step < len(schedule):
                logger.log_media(final_readouts(model, eval_sets["ood"], cfg, copy_generator(eval_generator)), step)
            bar.set_postfix({k: f"{latest[k]:.3f}" for k in ("id/loss", "ood/acc")})
            if status != "completed":
                break
    bar.close()
    if status == "diverged":
        model.load_state_dict(finite_state)

    final = dict(finite_metrics or {"train/loss": math.nan, "train/acc": math.nan} | evaluate(model, eval_sets, cfg) | data_metrics)
    arrays = final_readouts(model, eval_sets["ood"], cfg, eval_generator)
    final["all_pairs/acc"] = float(np.nanmean(arrays["acc_by_pair"]))
    logger.log_media(arrays, finite_step)
    final |= {"status": status, "steps": finite_step, "seconds": time.perf_counter() - started}
    return Result(final, arrays)


@torch.no_grad()
def evaluate(model: torch.nn.Module, eval_sets: dict[str, Batch], cfg) -> dict[str, float]:
    """ID and OOD loss/accuracy, shortcut rates and mechanism scores on the fixed evaluation sets."""
    model.eval()
    result = {}
    logits, _ = model(eval_sets["id"].tokens, eval_sets["id"].query)
    result |= metrics.loss_and_accuracy(logits, eval_sets["id"].targets, "id")
    ood = eval_sets["ood"]
    logits, attention = model(ood.tokens, ood.query)
    result |= metrics.loss_and_accuracy(logits, ood.targets, "ood")
    result |= metrics.shortcut_rates(logits.argmax(-1), ood, min(distribution(cfg.task.lengths, cfg.task.n_triggers)))
    result |= metrics.mechanism_scores(attention[-1], ood)
    if cfg.model.name == "one_step":
        result |= metrics.kq_peaks(model.W_KQ, cfg.task.vocab_size, cfg.task.max_len, cfg.task.n_triggers)
    result["ood/success"] = float(result["ood/acc"] >= cfg.eval.threshold)
    return result


@torch.no_grad()
def final_readouts(model: torch.nn.Module, ood: Batch, cfg, generator: torch.Generator) -> dict[str, np.ndarray]:
    """Arrays for attention.npz: accuracy by (l1, l2), attention at the query, example patterns, W_KQ."""
    task = cfg.task
    n_pairs = len(valid_pairs(task.max_len))
    pairs = sample(task, n_pairs * cfg.eval.n_pairs_per_cell, generator, "all_pairs").to(ood.tokens.device)
    logits, _ = model(pairs.tokens, pairs.query)
    arrays = {"acc_by_pair": metrics.accuracy_by_pair(logits.argmax(-1) == pairs.targets, pairs, task.max_len).numpy()}

    _, attention = model(ood.tokens, ood.query)  # [(B, H, T)] per layer
    arrays["query_attention_mean"] = torch.stack([a.mean(0) for a in attention]).cpu().numpy()  # (n_layers, H, T)
    k = min(cfg.eval.n_examples, len(ood.tokens))
    arrays["query_attention"] = torch.stack([a[:k] for a in attention], 1).cpu().numpy()  # (k, n_layers, H, T)
    arrays |= {"tokens": ood.tokens[:k].cpu().numpy(), "l1": ood.l1[:k].cpu().numpy(), "l2": ood.l2[:k].cpu().numpy()}
    if hasattr(model, "run"):  # the transformer also exposes the full causal patterns
        _, patterns = model.run(ood.tokens[:k])
        arrays["patterns"] = torch.stack(patterns, 1).cpu().numpy()  # (k, n_layers, H, T, T)
    if cfg.model.name == "one_step":
        arrays["W_KQ"], arrays["W_V"] = model.W_KQ.cpu().numpy(), model.W_V.cpu().numpy()
    return arrays


def save(result: Result, out_dir: str | Path) -> None:
    """Write result.json and attention.npz; each appears whole or not at all (written aside, then renamed)."""
    out_dir = Path(out_dir)
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in result.metrics.items()}
    _atomic_write(out_dir / "result.json", lambda f: f.write(json.dumps(clean, indent=2).encode()))
    _atomic_write(out_dir / "attention.npz", lambda f: np.savez_compressed(f, **result.arrays))


def _atomic_write(path: Path, write) -> None:
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        write(f)
    os.replace(partial, path)
