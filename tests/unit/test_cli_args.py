"""Command-line parsing: overrides before or after the options, stray arguments refused with exit code 2."""
import pytest

from sweep import cli


@pytest.mark.parametrize("argv", [
    ["search", "c.yaml", "seed=1", "--out", "d", "search.budget.per_slice=3"],
    ["search", "c.yaml", "--out", "d", "seed=1", "search.budget.per_slice=3"],
])
def test_overrides_may_come_before_or_after_the_options(argv):
    args = cli.parse(argv)
    assert sorted(args.overrides) == ["search.budget.per_slice=3", "seed=1"] and str(args.out) == "d"


@pytest.mark.parametrize("argv", [
    ["train", "c.yaml", "--out", "d", "--bogus"],
    ["train", "c.yaml", "--out", "d", "stray"],
    ["report", "d", "seed=1"],  # report takes no overrides
])
def test_anything_else_is_a_one_line_error_with_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
