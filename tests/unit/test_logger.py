"""Logger fan-out: every sink gets every record; media and summaries reach only the sinks that take them."""
import json
from pathlib import Path

from trainables import config, logger
from trainables.logger import JsonlSink, Logger
from trainables.train import train
from tests.conftest import CONFIGS


class RecordingSink:
    def __init__(self):
        self.steps, self.media_steps, self.summaries = [], [], []

    def log(self, metrics, step):
        self.steps.append(step)

    def log_media(self, arrays, step):
        assert {"acc_by_pair", "query_attention", "patterns"} <= set(arrays)
        self.media_steps.append(step)

    def summary(self, metrics):
        self.summaries.append(metrics)

    def close(self):
        pass


class ScalarOnlySink:
    def __init__(self):
        self.records = []

    def log(self, metrics, step):
        self.records.append(step)

    def close(self):
        pass


def test_media_at_the_configured_cadence_and_at_the_end(tmp_path):
    cfg = config.load(CONFIGS / "debug.yaml", ["optim.max_steps=200", "eval.every=25", "logging.media_every=3",
                                               "task.n_pairs_per_cell=1"])
    recording, scalar_only = RecordingSink(), ScalarOnlySink()
    with Logger(JsonlSink(tmp_path / "m.jsonl"), recording, scalar_only) as logger:
        result = train(cfg, logger)
        logger.summary(result.metrics)
    assert recording.steps == scalar_only.records == list(range(25, 201, 25))
    assert recording.media_steps == [75, 150, 200]  # every third evaluation, then the final readout
    assert recording.summaries == [result.metrics]
    assert [json.loads(line)["step"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == recording.steps


def test_mid_run_media_leave_the_result_unchanged():
    overrides = ["optim.max_steps=100", "eval.every=25", "task.n_pairs_per_cell=1"]
    plain = train(config.load(CONFIGS / "debug.yaml", overrides)).metrics
    with_media = train(config.load(CONFIGS / "debug.yaml", overrides + ["logging.media_every=1"]),
                       Logger(RecordingSink())).metrics
    assert {k: v for k, v in plain.items() if k != "seconds"} == {k: v for k, v in with_media.items() if k != "seconds"}


def test_a_trial_drops_the_wandb_service_its_worker_inherited_and_keeps_its_own(monkeypatch):
    """The inherited one (a notebook kernel's, via `ray start` or a local Ray) is shared by every worker of the node;
    one this process started after its first run is its own (a reused Ray actor's next member)."""
    from trainables import trainable

    monkeypatch.setattr(trainable, "INHERITED_WANDB_SERVICE", "3-1-tcp-localhost-9")
    monkeypatch.setenv("WANDB_SERVICE", "3-1-tcp-localhost-9")
    trainable.drop_inherited_wandb_service()
    assert "WANDB_SERVICE" not in trainable.os.environ
    monkeypatch.setenv("WANDB_SERVICE", "3-4242-tcp-localhost-5151")
    trainable.drop_inherited_wandb_service()
    assert trainable.os.environ["WANDB_SERVICE"] == "3-4242-tcp-localhost-5151"


def test_the_offline_notice_is_one_short_line_with_the_path_as_typed(tmp_path, monkeypatch):
    """A search prints one notice per command and a train one per run: why it is offline and the upload command, the
    directory relative to where the user stands (as --out was typed), about 120 characters (it was ~250)."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "quickstart" / "wandb" / "offline-run-20261127_220000-abcdefgh"
    why = logger.resolve_wandb_mode("offline")[1]
    line = logger.offline_notice("search run", why, logger.shown_path(run_dir))
    assert line == ("W&B: offline search run (logging.mode=offline); upload: wandb sync "
                    "runs/quickstart/wandb/offline-run-20261127_220000-abcdefgh")
    assert logger.shown_path(Path("/elsewhere/wandb")) == "/elsewhere/wandb"
    assert len(logger.offline_notice("run", "no W&B credentials; `wandb login` to log online",
                                     "runs/quickstart/wandb/offline-run-*")) < 130
