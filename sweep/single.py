"""`headsweep train`: one member, trained in this process into a local directory (config.yaml, metrics.jsonl,
result.json, attention.npz, report.html). What the CLI and headsweep.train both call."""
from __future__ import annotations

from pathlib import Path

from trainables import config
from trainables.errors import ConfigError
from trainables.io import claim_out, create_out, read_json
from trainables.logger import member_logger
from trainables.train import save, train


def run(cfg: config.Config, out: str | Path) -> tuple[dict, bool]:
    """Train `cfg` into `out`, or keep what a finished earlier run there left (an unfinished one starts again from
    step 0); its final metrics (result.json's) and whether they were there already. Bad input raises ConfigError with
    nothing written (a place that is not a local directory; `out` holding another config's results)."""
    if str(out).startswith("s3:/"):  # Path("s3://b/p") reads s3:/b/p
        raise ConfigError("--out", "train writes a local directory; an s3:// place is for grid and search")
    out, resolved = Path(out), config.to_yaml(cfg)
    claim_out(out, resolved, *config.to_yaml_as_written_before(cfg))
    if (out / "result.json").exists():
        return read_json(out / "result.json"), True

    create_out(out, resolved)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # an unfinished earlier attempt restarts from step 0
    with member_logger(cfg, out) as logger:
        result = train(cfg, logger)
        logger.summary(result.metrics)
    save(result, out)
    from dashboards import report  # pandas and matplotlib: only once there is something to report

    report.build(out)
    return result.metrics, False
