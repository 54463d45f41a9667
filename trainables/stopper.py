"""What training asks, besides a member's own early stopping, about ending it before its last step: a Stopper.

Training knows only these four questions; the answers are the sweep's verdict rule (sweep/verdicts.py, bound to
trainable.run_trial by sweep/tuner.py), so training runs whatever a sweep decides without importing it. A run on its
own stops on nothing of the kind: NEVER. The statuses a stopper leads to are trainables.io's SUCCEEDED and
VERDICT_KNOWN.
"""
from __future__ import annotations

from typing import Protocol


class Stopper(Protocol):
    """The members of one train_members call, by index (their positions in its lists)."""

    def passed(self, index: int, history: list[dict]) -> str | None:
        """Why the member stops as a success after its latest evaluation (`history`: every evaluation so far, each
        with its step), or None."""

    def settle(self, index: int, result: dict) -> None:
        """A member's final metrics (with its status), which may decide whether others need training."""

    def decided(self, index: int) -> str | None:
        """Why the member needs no further training, from what others settled, or None."""

    def of(self, indices: list[int]) -> Stopper:
        """The same stopper for a subset of the members, renumbered 0.. in the order of `indices` (what one
        train_members call sees); results settled through it count here too."""


class _Never:
    """Stops nothing: a run judged by no rule."""

    def passed(self, index: int, history: list[dict]) -> None:
        return None

    def settle(self, index: int, result: dict) -> None:
        pass

    def decided(self, index: int) -> None:
        return None

    def of(self, indices: list[int]) -> _Never:
        return self


NEVER: Stopper = _Never()

