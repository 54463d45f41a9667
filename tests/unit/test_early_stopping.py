"""EarlyStopping counts evaluations without a new best ID loss."""
from trainables.train import EarlyStopping


def test_stops_after_patience_stale_evaluations():
    stopper = EarlyStopping(patience=2)
    assert [stopper.should_stop(x) for x in (3.0, 2.0, 2.5, 2.0, 1.0, 1.5, 1.2)] == [
        False, False, False, True, False, False, True]


def test_patience_zero_never_stops():
    stopper = EarlyStopping(patience=0)
    assert not any(stopper.should_stop(1.0) for _ in range(100))
