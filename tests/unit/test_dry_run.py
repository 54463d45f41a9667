"""The dry run names the final metrics a trial reports (trainables/dry_run.py::reported_metrics), which a search's
validation holds its success metric and its minimised metric to: they must be what train() really returns."""
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from trainables import config, dry_run
from trainables.errors import ConfigError
from trainables.models import MODELS
from trainables.tasks import TASKS
from trainables.train import train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEBUG = {"trigger_copy": "debug.yaml", "bigram_trigger": "debug_bigram_trigger.yaml",
         "markov_ngram": "debug_markov_ngram.yaml", "mixed_ngram": "debug_mixed_ngram.yaml",
         "linear_regression": "debug_linear_regression.yaml"}


def tiny(cfg: config.Config) -> config.Config:
    """The config trained for one step on 4 sequences, measured at that step."""
    spec = MODELS[cfg.model.name]
    point = {key: 4 for key in spec.batch_sizes(cfg.model, cfg.optim)} | {
        "eval.n_id": 4, "eval.n_ood": 4, "eval.n_examples": 1, "eval.every": 1}
    if spec.uses_optim:
        point["optim.max_steps"] = 1
    return config.with_point(config.to_dict(cfg), point)


def test_every_built_in_task_has_a_debug_config():
    assert set(DEBUG) == set(TASKS.builtins)


@pytest.mark.parametrize("task, model", list(itertools.product(TASKS.builtins, MODELS.builtins)))
def test_the_dry_run_names_the_final_metrics_train_reports(task, model):
    try:
        cfg = config.load(CONFIGS / DEBUG[task], [f"model.name={model}"])
    except ConfigError as e:  # a model that reads one query position, with a task that scores several, or one that
        # reads token ids, with a continuous task
        assert e.key == "model.name" and ("query" in e.reason or "reads token ids" in e.reason)
        return
    assert dry_run.reported_metrics(cfg) == set(train(tiny(cfg)).metrics)


def test_the_names_follow_the_config_not_only_its_task_and_model():
    """markov_ngram's summary names a step per strategy up to its order: a pair's names are not cached."""
    low, high = (config.load(CONFIGS / DEBUG["markov_ngram"], [f"task.order={order}"]) for order in (2, 3))
    assert "ood/first_step_at_bigram" in dry_run.reported_metrics(high) - dry_run.reported_metrics(low)


def test_validating_a_grid_or_a_search_builds_no_optimizer_so_its_driver_never_imports_dynamo():
    """A driver validates every point (dry_run.check) and a search the metrics it names, but neither trains: building
    the phases' optimizers there imported torch._dynamo, about 1.5 s of every `headsweep grid` and `search`. A fresh
    process, since this one may have it; it loads them all, and says after each whether dynamo came in."""
    probe = """import sys
from sweep import space
from sweep.search.config import load_search
for verb, path in zip(sys.argv[1::2], sys.argv[2::2]):
    space.load_sweep(path, []) if verb == "grid" else load_search(path, [])
    print(path, 'torch._dynamo' in sys.modules, 'trainables.dry_run' in sys.modules)
"""
    loads = [("grid", "debug_grid.yaml"), ("grid", "transformer_grid.yaml"), ("search", "debug_search.yaml"),
             ("search", "transformer_quickstart.yaml")]
    out = subprocess.run([sys.executable, "-c", probe, *(a for verb, name in loads for a in (verb, CONFIGS / name))],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [f"{CONFIGS / name} False True" for _, name in loads], out


def test_a_search_may_still_name_the_learning_rate_which_only_a_scheduled_model_reports():
    from sweep.search.config import load_search

    cfg = config.load(CONFIGS / "debug.yaml", [])
    assert dry_run.reported_metrics(cfg) - dry_run.reported_metrics(cfg, learning_rate=False) == {"train/lr"}
    load_search(CONFIGS / "transformer_quickstart.yaml", ["search.success.metric=train/lr"])
    with pytest.raises(ConfigError, match="train/lr is not a metric"):
        load_search(CONFIGS / "debug_search.yaml", ["search.success.metric=train/lr"])
