"""The dry run before any work: a config's task and model, built-in or plugin, run on a few sequences and checked
against the contracts the rest of headsweep relies on (batches, logits, the metrics of an evaluation and of a run's
summary), once per (task, model) pair in a process (`check`, from config validation). A plugin that breaks one is one
line of bad input naming `task.name` or `model.name` and what is wrong, before an output directory exists, instead of
every trial failing.

The same run, with the final readout, names the final metrics a trial of the config reports (`reported_metrics`:
what train() returns, held equal to it by tests/unit/test_dry_run.py), so that a search refuses a misspelt success
metric before it starts.
"""
from __future__ import annotations

import torch

from trainables import readouts
from trainables.errors import ConfigError, require
from trainables.models import MODELS, build_model
from trainables.streams import Streams
from trainables.tasks import Batch, is_continuous, task_of
from trainables.train import evaluate, loss_and_accuracy, scored

N_SEQUENCES = 3
RUN_FACTS = {"status", "steps", "seconds"}  # what train() adds to the metrics about the run itself (train._finish)
_passed: set[tuple[str, str]] = set()


def check(cfg) -> None:
    """Raise ConfigError (task.name or model.name) for a task or model that breaks its contract on this config."""
    if (cfg.task.name, cfg.model.name) not in _passed:
        _dry_run(cfg, readout=False, learning_rate=False)
        _passed.add((cfg.task.name, cfg.model.name))


def reported_metrics(cfg, learning_rate: bool = True) -> set[str]:
    """The names of the final metrics a trial of this config reports (its result.json's, as train() returns them),
    from its dry run with the final readout. Not cached per pair like `check`: the names may depend on the config
    (markov_ngram's order). Without `learning_rate`, train/lr is left out: knowing it means building the model's
    phases, and so its optimizers, and the first optimizer of a process imports torch._dynamo (about 1.5 s)."""
    return _dry_run(cfg, readout=True, learning_rate=learning_rate)


def _dry_run(cfg, readout: bool, learning_rate: bool) -> set[str]:
    """Check the contracts on this config (ConfigError naming task.name or model.name) and return the names of the
    final metrics its trials report; those of the final readout only with `readout`: it may take seconds (trigger
    copy's reads every pair of lengths), too long for every validation of a large config; train/lr only with
    `learning_rate` (reported_metrics)."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    splits = _call("task.name", f"{task.name}: eval_splits()", task.eval_splits, cfg.task)
    require(("task.name", isinstance(splits, dict) and {"id", "ood"} <= set(splits),
             f"{task.name}: eval_splits() must map the prefixes 'id' and 'ood' (and any others) to splits, got "
             f"{splits!r}"))
    d_vocab, n_ctx = _call("task.name", f"{task.name}: dims()", task.dims, cfg.task)
    d_in = _call("task.name", f"{task.name}: input_width()", task.input_width, cfg.task)
    generator = torch.Generator().manual_seed(0)
    batches = {}
    for split in dict.fromkeys(["train", *splits.values()]):
        what = f"{task.name}: sample(split={split!r})"
        batches[split] = _call("task.name", what, task.sample, cfg.task, N_SEQUENCES, generator, split)
        check_batch(batches[split], what, d_vocab, n_ctx, task.query_only(cfg.task), d_in)
    check_batch_sampler(task, cfg, d_vocab, n_ctx, d_in)

    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG as it was
        model = _call("model.name", f"{spec.name}: build()", build_model, spec, cfg.model, d_vocab, n_ctx, d_in)
        batch = batches["train"]
        output = _call("model.name", f"{spec.name}: run_with_cache()", model.run_with_cache, batch.model_input,
                       batch.query)
        require(("model.name", isinstance(output, tuple) and len(output) == 2 and isinstance(output[1], dict),
                 f"{spec.name}: run_with_cache() must return (logits, cache dict), got {type(output).__name__}"))
        # what training calls: the module itself
        trained = _call("model.name", f"{spec.name}: forward()", model, batch.model_input, batch.query)
    B, T = batch.tokens.shape
    expected = (B, d_vocab) if batch.query is not None else (B, T, d_vocab)
    outputs, width = ("predictions", "d_out") if is_continuous(task) else ("logits", "d_vocab")
    for what, logits in (("run_with_cache()", output[0]), ("forward()", trained)):
        require(("model.name", isinstance(logits, torch.Tensor) and tuple(logits.shape) == expected
                 and logits.is_floating_point(),
                 f"{spec.name}: {what} must return float {outputs} of shape {expected} "
                 f"({f'(B, {width}) at the query' if batch.query is not None else f'(B, T, {width})'}), got "
                 f"{_describe(logits)}"))

    train_metrics = loss_and_accuracy(*scored(trained.detach(), batch), "train")  # what a step reports
    # and the learning rate of a scheduled phase (train._measure)
    if learning_rate and any(phase.lr is not None for phase in spec.phases(cfg.model, cfg.optim, model)):
        train_metrics["train/lr"] = cfg.optim.lr
    eval_sets = {prefix: batches[split] for prefix, split in splits.items()}
    metrics = _call("task.name", f"{task.name}: an evaluation", evaluate, model, eval_sets, cfg)
    require(("task.name", task.success_metric in metrics,
             f"{task.name}: its success metric {task.success_metric} is not among the metrics an evaluation reports "
             f"({', '.join(sorted(metrics))})"))
    diversity = _call("task.name", f"{task.name}: diversity()", task.diversity, cfg.task)
    require(("task.name", all(k.startswith("data/") and isinstance(v, (int, float)) for k, v in diversity.items()),
             f"{task.name}: diversity() must map data/* names to numbers, got {diversity!r}"))
    # The end of a run (train._finish): the task's summary of its evaluations, then the final readout.
    history = [{"step": 1} | train_metrics | metrics | diversity]
    final = metrics | _call("task.name", f"{task.name}: summary()", task.summary, cfg.task, history)
    if readout:
        final |= _call("task.name", f"{task.name}: readouts()", readouts.final, cfg, model, eval_sets["ood"],
                       generator)[1]
    odd = [k for k, v in final.items() if not isinstance(v, (int, float)) or isinstance(v, bool)]
    require(("task.name", not odd, f"{task.name}: metrics must be numbers; {', '.join(odd)} are not"))
    return set(train_metrics) | set(final) | set(diversity) | RUN_FACTS


def forget(name: str) -> None:
    """Check again every pair with a task or model of this name (registered anew: trainables/plugins.py)."""
    _passed.difference_update({pair for pair in _passed if name in pair})


def check_batch_sampler(task, cfg, d_vocab: int, n_ctx: int, d_in: int | None = None) -> None:
    """A task's batch_sampler of the train split: two members' batches at once, each a Batch of the contract, and
    each member's the one it draws alone (its stream's, whatever it is packed with)."""
    what = f"{task.name}: batch_sampler()"
    draw = _call("task.name", what, task.batch_sampler, [cfg.task, cfg.task], "cpu")
    both = _call("task.name", what, draw, N_SEQUENCES, Streams([0, 1]))
    require(("task.name", isinstance(both, Batch) and isinstance(both.tokens, torch.Tensor)
             and both.tokens.dim() == 3 and both.tokens.shape[0] == 2,
             f"{what} must draw a Batch of (P, n, T) tensors, got {_describe(getattr(both, 'tokens', both))} "
             "tokens for P = 2"))
    alone = _call("task.name", what, task.batch_sampler([cfg.task], "cpu"), N_SEQUENCES, Streams([1]))
    check_batch(both.member(1), what, d_vocab, n_ctx, task.query_only(cfg.task), d_in)
    require(("task.name", torch.equal(both.member(1).model_input, alone.member(0).model_input),
             f"{what}: a member's batch depends on the members drawn with it (draw each one's from its own stream)"))
    width = _call("task.name", f"{task.name}: batch_width()", task.batch_width, cfg.task)
    require(("task.name", both.tokens.shape[2] <= width <= n_ctx,
             f"{what}: {both.tokens.shape[2]} positions, but batch_width() says {width} (at most n_ctx = {n_ctx}), "
             "what the memory estimate weighs"))


def check_batch(batch, what: str, d_vocab: int, n_ctx: int, query_only: bool, d_in: int | None = None) -> None:
    """A sampled Batch against the contract of trainables.tasks.Batch (of a continuous task where d_in, its input
    width, is given); ConfigError(task.name) naming the first violation."""
    require(("task.name", isinstance(batch, Batch), f"{what} must return a trainables.tasks.Batch, got "
                                                    f"{type(batch).__name__}"))
    tokens = batch.tokens
    require(("task.name", isinstance(tokens, torch.Tensor) and tokens.dim() == 2 and tokens.dtype == torch.long,
             f"{what}: tokens must be a (B, T) torch.long tensor, got {_describe(tokens)}"))
    B, T = tokens.shape
    checks = [("task.name", B == N_SEQUENCES, f"{what}: returned {B} sequences for n={N_SEQUENCES}"),
              ("task.name", 1 <= T <= n_ctx, f"{what}: {T} positions, but dims() says at most n_ctx = {n_ctx}")]
    real = torch.get_default_dtype()  # a continuous task's inputs and targets: of the model's float type
    targets = ("targets", (B, T), torch.long) if d_in is None else ("targets", (B, T, d_vocab), real)
    fields = [targets, ("labels", (B, T), torch.long), ("loss_mask", (B, T), torch.bool)]
    if d_in is not None:
        fields.append(("inputs", (B, T, d_in), real))
    for field, shape, dtype in fields:
        value = getattr(batch, field)
        checks.append(("task.name", isinstance(value, torch.Tensor) and tuple(value.shape) == shape
                       and value.dtype == dtype,
                       f"{what}: {field} must be a {shape} {dtype} tensor, got {_describe(value)}"))
    require(*checks)
    require(("task.name", bool(batch.loss_mask.any()), f"{what}: loss_mask scores no position"))
    if d_in is not None:
        require(("task.name", bool(batch.inputs.isfinite().all() and batch.targets.isfinite().all()),
                 f"{what}: inputs and targets must be finite"))
    else:
        scored = batch.targets[batch.loss_mask]
        require(("task.name", bool(((tokens >= 0) & (tokens < d_vocab)).all()),
                 f"{what}: tokens must lie in [0, d_vocab = {d_vocab}), got "
                 f"{tokens.min().item()}..{tokens.max().item()}"),
                ("task.name", bool(((scored >= 0) & (scored < d_vocab)).all()),
                 f"{what}: scored targets must lie in [0, d_vocab = {d_vocab})"))
    query = batch.query
    if query_only:
        require(("task.name", isinstance(query, torch.Tensor) and tuple(query.shape) == (B,)
                 and query.dtype == torch.long,
                 f"{what}: query_only() is true, so query must be a ({B},) torch.long tensor, got {_describe(query)}"))
        scores_query = batch.loss_mask.sum(1).eq(1).all() and batch.loss_mask[torch.arange(B), query].all()
        require(("task.name", bool(scores_query),
                 f"{what}: query_only() is true, so loss_mask must score exactly each sequence's query position"))
    else:
        require(("task.name", query is None, f"{what}: query must be None unless query_only() is true"))
    bad_info = [k for k, v in batch.info.items() if not (isinstance(v, torch.Tensor) and v.shape[:1] == (B,))]
    require(("task.name", not bad_info, f"{what}: info values must be ({B},) tensors, one per sequence: "
                                        f"{', '.join(bad_info)}"))


def _call(key: str, what: str, function, *args):
    """function(*args), with whatever a plugin raises turned into ConfigError(key) (a ConfigError passes through)."""
    try:
        return function(*args)
    except ConfigError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()
        raise ConfigError(key, f"{what} raised {type(e).__name__}: {first[0] if first else '(no message)'}") from None


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {value.dtype}"
    return "None" if value is None else type(value).__name__

