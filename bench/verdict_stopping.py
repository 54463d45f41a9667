"""Verdict-aware stopping (search.stop) measured on finished searches: the same search trained to the end
(`search.stop.streak=0 search.stop.decided=false`) and with stopping, side by side (answers, trainings, training steps,
the trials' own seconds), and what each streak would have saved and risked, replayed on the full one.

    .venv/bin/python bench/verdict_stopping.py runs/transformer_search_full runs/transformer_search
    .venv/bin/python bench/verdict_stopping.py runs/transformer_search_full --streaks 1 2 3 4 5

Wall time is the driver's, measured around the two commands (docs/PERFORMANCE.md gives them).

The replay: each seed's metrics.jsonl holds every evaluation. With streak k a seed stops at the k-th passing
evaluation in a row (before its last step) and counts as a success there; else it trains to its end and its
result.json decides. A candidate succeeds when min_seeds of its seeds do; with min_seeds = len(seeds) a failed seed
stops its candidate's others (verdict_known) only at its own end, which with every seed training equally long saves
nothing here. A candidate whose verdict changes would send bisection elsewhere: the replay counts them; with none,
the search with stopping asks the same candidates and gives the same answers. Prints one table row per k.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import yaml

from sweep.space import member_dir
from sweep.verdicts import Rule


def replay(out: Path, streaks: list[int]) -> pd.DataFrame:
    search = yaml.safe_load((out / "config.yaml").read_text())["search"]
    success = search["success"]
    rule = Rule(success["metric"], success["threshold"], success.get("direction", ">=") == ">=", streak=0, group="")
    trials = pd.read_csv(out / "trials.csv")
    trials = trials[trials["state"] == "COMPLETE"]
    point_keys = list(trials.columns[1:list(trials.columns).index("candidate")])
    seeds = []
    for _, row in trials.iterrows():
        point = {k: row[k].item() if hasattr(row[k], "item") else row[k] for k in point_keys}
        directory = member_dir(out, point)
        history = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
        result = json.loads((directory / "result.json").read_text())
        final = result.get("status") != "diverged" and rule.passes(result)
        seeds.append({"candidate": (row["study"], row["optuna_trial"]), "history": history, "final": final,
                      "steps": result["steps"], "feasible": bool(row["feasible"])})
    rows = []
    for k in [0, *streaks]:
        steps, verdicts = 0, {}
        false_successes = 0
        for seed in seeds:
            stop = _stop_step(seed["history"], seed["steps"], k, rule) if k else None
            steps += stop or seed["steps"]
            succeeded = stop is not None or seed["final"]
            false_successes += stop is not None and not seed["final"]
            verdicts.setdefault(seed["candidate"], []).append(succeeded)
        feasible = {s["candidate"]: s["feasible"] for s in seeds}
        changed = sum((sum(v) >= success["min_seeds"]) != feasible[c] for c, v in verdicts.items())
        share = round(steps / rows[0]["training steps"], 3) if rows else 1.0
        rows.append({"streak": k or "off", "training steps": steps, "share of steps": share,
                     "seeds that stopped as successes but failed at the end": false_successes,
                     "candidates whose verdict changes": changed, "candidates": len(verdicts)})
    return pd.DataFrame(rows)


def _stop_step(history: list[dict], last: int, k: int, rule: Rule) -> int | None:
    """The step at which a seed with streak k stops as a success, or None if it trains to its end."""
    run = 0
    for record in history:
        run = run + 1 if rule.passes(record) else 0
        if run >= k and record["step"] < last:
            return record["step"]
    return None


def side_by_side(full: Path, stopped: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two searches' min_diversity tables joined per slice, and their totals (trainings, statuses, steps,
    seconds) as one row each."""
    tables = [pd.read_csv(out / "min_diversity.csv").drop(columns=["study"]) for out in (full, stopped)]
    keys = [c for c in tables[0].columns if c.startswith(("task.", "model.", "optim."))]
    answers = tables[0].merge(tables[1], on=keys, suffixes=(" full", " stopped"))
    totals = []
    for name, out in (("full", full), ("stopped", stopped)):
        trials = pd.read_csv(out / "trials.csv")
        totals.append({"search": name, "trainings": len(trials), "training steps": int(trials["steps"].sum()),
                       "trials' seconds": round(trials["seconds"].sum()),
                       **trials["status"].value_counts().to_dict()})
    return answers, pd.DataFrame(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("full", type=Path, help="a search's output directory, every seed trained to its end")
    parser.add_argument("stopped", type=Path, nargs="?", help="the same search with search.stop")
    parser.add_argument("--streaks", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8])
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    if args.stopped:
        answers, totals = side_by_side(args.full, args.stopped)
        print(answers.to_string(index=False), totals.fillna(0).to_string(index=False), sep="\n\n", end="\n\n")
    print(replay(args.full, args.streaks).to_string(index=False))


if __name__ == "__main__":
    main()
