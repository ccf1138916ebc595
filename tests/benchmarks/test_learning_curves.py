"""`benchmarks/learning_curves.py`: reading validation scores at each budget, the summary table and figure."""

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from learning_curves import Curve, budget_rows, markdown, plot, summary, trainer  # noqa: E402


def test_one_run_is_read_at_every_budget_and_the_kept_epoch_is_the_best_so_far():
    scores = [0.1, 0.3, 0.2, 0.25, 0.2, 0.4, 0.1, 0.1]  # 8 epochs = x4 of a 2-epoch demo budget
    rows = budget_rows("knrm", 0, 0, [1, 2, 4], 2, {4: Curve(scores, 10, 8.0, 7)}, 0.28)
    assert [r["epochs"] for r in rows] == [2, 4, 8]
    assert [r["validation_at_budget"] for r in rows] == [0.3, 0.25, 0.1]  # the weights at the budget's last epoch
    assert [r["validation_kept"] for r in rows] == [0.3, 0.3, 0.4]  # the best validation epoch up to there
    assert [r["kept_epoch"] for r in rows] == [2, 2, 6]
    assert [r["examples_seen"] for r in rows] == [20, 40, 80] and rows[0]["unit_examples"] == 7
    assert [r["train_seconds"] for r in rows] == [2.0, 4.0, 8.0] and all(r["one_run"] for r in rows)


def test_separate_runs_are_read_each_at_its_own_end():
    curves = {1: Curve([0.2, 0.3], 5, 1.0, 5), 4: Curve([0.1] * 7 + [0.35], 5, 4.0, 5)}
    rows = budget_rows("bert", 1, 2, [1, 4], 2, curves, 0.3)
    assert [r["validation_at_budget"] for r in rows] == [0.3, 0.35] and not any(r["one_run"] for r in rows)
    with pytest.raises(ValueError, match="x4 needs 8 epochs, the training ran 7"):
        budget_rows("bert", 1, 2, [4], 2, {4: Curve([0.1] * 7, 5, 4.0, 5)}, 0.3)


def test_the_table_averages_runs_and_the_figure_is_written(tmp_path):
    rows = (budget_rows("drmm", 0, 0, [1, 4], 1, {4: Curve([0.2, 0.2, 0.2, 0.3], 4, 1.0, 4)}, 0.25)
            + budget_rows("drmm", 1, 0, [1, 4], 1, {4: Curve([0.4, 0.2, 0.2, 0.5], 4, 1.0, 4)}, 0.35))
    table = summary(pl.DataFrame(rows))
    assert table["validation_at_budget"].to_list() == pytest.approx([0.3, 0.4]) and table["runs"].to_list() == [2, 2]
    assert "| drmm | x1 | 4 | 0.300 | 0.300 | 0.300 | 2 |" in markdown(table)
    plot("drmm", table, tmp_path / "drmm.png")
    assert (tmp_path / "drmm.png").read_bytes()[:4] == b"\x89PNG"


def test_every_method_has_a_trainer_and_an_unknown_one_is_refused():
    assert trainer("bert")[1] is False and trainer("ghrm")[1] is True and trainer("knrm")[1] is True
    with pytest.raises(SystemExit, match="unknown method 'nope'"):
        trainer("nope")
