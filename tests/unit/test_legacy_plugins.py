"""Task plugins written against the API before views and one sampling hook (tests/plugins/legacy.py, verbatim from
the docs of the time) keep working: registering one adapts it once, explicitly, with one DeprecationWarning naming
what moved (trainables/tasks/legacy.py); nothing looks attributes up between a task and its view."""
import warnings

import pytest
import torch

from tests.plugins.legacy import PackedRepeat, Repeat, ShownOnItsTask
from trainables import config, dry_run
from trainables.errors import ConfigError
from trainables.population import pack_key
from trainables.streams import Streams
from trainables.tasks import TASKS, Task, view_of
from trainables.train import train

FAST = ["optim.max_steps=4", "eval.every=2", "eval.n_id=16", "eval.n_ood=16", "eval.n_examples=2",
        "logging.wandb=false", "model.name=tests.plugins.mean_mixer:SPEC"]


def registered(obj):
    """obj adapted as the registry adapts what it loads, and the warnings that said so."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adapted = TASKS.adapt(obj)
    return adapted, [str(w.message) for w in caught if w.category is DeprecationWarning]


def test_one_warning_names_what_moved_and_where_and_only_once():
    task, said = registered(ShownOnItsTask())
    assert len(said) == 1 and "headline, dashboard, short_names, figures_module, figures (on the Task) -> a " \
                              "TaskView subclass" in said[0]
    assert "sample(cfg, n, generator, split) -> batch_sampler(cfgs, device, split)" in said[0]
    assert registered(task) == (task, [])  # adapted once: registering it again says nothing


def test_a_task_of_the_current_api_is_left_as_it_is():
    from tests.plugins.repeat import TASK

    assert registered(TASK) == (TASK, []) and not vars(TASK)


def test_a_sample_that_wraps_a_current_tasks_draw_is_not_taken_for_an_old_one():
    from tests.plugins.repeat import Repeat as Current

    class Shorter(Current):
        def sample(self, cfg, n, generator, split="train", pad_to=None):
            return super().sample(cfg, n, generator, split).cropped(2 * cfg.length - 1)

    task, said = registered(Shorter())
    assert said == [] and "batch_sampler" not in vars(task)
    assert task.sample(task.config(), 4, torch.Generator().manual_seed(0)).tokens.shape == (4, 11)


def test_presentation_set_on_the_task_class_is_what_its_view_shows():
    task, _ = registered(ShownOnItsTask())
    view = view_of(task)
    assert view.headline == task.headline == ("ood/acc", "id/loss", "data/n_train_strings") == view.table_columns
    assert view.short_names == {"ood/acc": "copies"} and view.dashboard is task.dashboard
    assert set(view.figures({})) == {"legacy/override"}  # its figures() override
    assert set(view.images({})) == {"shown/mark"} and view.figure_note.startswith("Drawn")  # its figures_module


def test_no_attribute_is_looked_up_between_a_task_and_its_view():
    from tests.plugins.repeat import TASK

    assert not hasattr(TASK, "headline") and not hasattr(Task, "__getattr__")
    assert "__getattribute__" not in vars(type(view_of(TASK)))


def test_its_sample_still_draws_its_evaluation_sets_and_training_batches_alike_in_any_pack():
    task, _ = registered(Repeat())
    cfg = task.config(n_train_strings=3)
    drawn = task.sample(cfg, 50, torch.Generator().manual_seed(1))
    assert torch.equal(drawn.tokens, Repeat.sample(task, cfg, 50, torch.Generator().manual_seed(1)).tokens)
    assert len(drawn.tokens.unique(dim=0)) <= 3
    other = task.config(n_train_strings=40, length=4)  # members of a pack may differ in any field: each draws alone
    assert pack_key(config.load(None, ["task.name=tests.plugins.legacy:TASK", *FAST])) == \
        pack_key(config.load(None, ["task.name=tests.plugins.legacy:TASK", "task.pool_seed=3", *FAST]))
    both = task.batch_sampler([cfg, other], "cpu")(5, Streams([7, 8]))  # (P, n, T), padded to the widest
    alone = task.batch_sampler([other], "cpu")(5, Streams([8]))
    assert both.tokens.shape == (2, 5, 12) and torch.equal(both.member(1).cropped(8).tokens, alone.member(0).tokens)


def test_its_old_batch_sampler_draws_the_training_batches():
    task, said = registered(PackedRepeat())
    assert "sample(cfg, n, generator, split) and batch_sampler(cfgs, device) -> " in said[0]
    cfg = task.config()
    together = task.batch_sampler([cfg, cfg], "cpu")(4, Streams([1, 2]))
    assert torch.equal(together.tokens, PackedRepeat.batch_sampler(task, [cfg, cfg], "cpu")(4, Streams([1, 2])).tokens)
    assert task.batch_sampler([cfg], "cpu", "fresh")(4, Streams([1])).tokens.shape == (1, 4, 12)


@pytest.mark.parametrize("name", ["TASK", "PACKED", "SHOWN_ON_ITS_TASK"])
def test_a_legacy_plugin_named_by_module_path_passes_the_dry_run_and_trains(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        cfg = config.load(None, [f"task.name=tests.plugins.legacy:{name}", *FAST])
    assert train(cfg).metrics["status"] == "completed"
    dry_run.check_batch_sampler(TASKS[cfg.task.name], cfg, *TASKS[cfg.task.name].dims(cfg.task))


def test_a_task_without_any_sampling_hook_is_refused():
    class Nothing(Task):
        name, config = "nothing", Repeat.config

    with pytest.raises(ConfigError, match=r"does not implement validate, dims, batch_sampler, eval_splits$"):
        TASKS.register(Nothing())
