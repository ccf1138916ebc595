import numpy as np
import polars as pl
import pytest
from matplotlib.colors import to_rgba

from dagster_ir.evaluation import figure_to_png_bytes, per_query_difference_plot, recall_curve_plot
from dagster_ir.evaluation.plots import bar_heights
from dagster_ir.schemas import PER_QUERY_EVAL


def per_query(rows: list[tuple[str, str, float]], measure: str = "AP") -> pl.DataFrame:
    return pl.DataFrame([(r, q, measure, v) for r, q, v in rows], schema=PER_QUERY_EVAL, orient="row")


TABLE = per_query(
    [
        ("base", "q1", 0.5),
        ("base", "q2", 0.2),
        ("base", "q3", 0.4),
        ("base", "q4", 0.1),
        ("run", "q1", 0.7),
        ("run", "q2", 0.2),
        ("run", "q3", 0.1),
        ("run", "q4", 0.2),
    ]
)  # differences: +0.2, 0, -0.3, +0.1


def test_difference_plot_draws_the_sorted_per_query_differences():
    fig = per_query_difference_plot(TABLE, "run", "base", "AP")
    ax = fig.axes[0]
    heights = bar_heights(ax)
    assert heights == pytest.approx([0.2, 0.1, 0.0, -0.3])
    assert "(2 better, 1 equal, 1 worse)" in ax.get_title()


def test_difference_plot_pairs_only_the_shared_queries():
    table = TABLE.filter(~((pl.col("run_name") == "run") & (pl.col("query_id") == "q1")))
    ax = per_query_difference_plot(table, "run", "base", "AP").axes[0]
    assert bar_heights(ax) == pytest.approx([0.1, 0.0, -0.3])


def test_difference_plot_colours_each_sign_and_spans_one_unit_per_query():
    ax = per_query_difference_plot(TABLE, "run", "base", "AP").axes[0]
    better, equal, worse = ax.patches
    assert [p.get_facecolor() for p in ax.patches] == [to_rgba(c) for c in ("#2b8a3e", "#868e96", "#c92a2a")]
    np.testing.assert_allclose(better.get_data().edges, [-0.5, 0.5, 1.5])  # queries 0 and 1, bars 1 wide
    np.testing.assert_allclose(equal.get_data().edges, [1.5, 2.5])
    np.testing.assert_allclose(worse.get_data().edges, [2.5, 3.5])
    assert all(p.get_data().baseline == 0 and p.get_fill() for p in ax.patches)
    only_worse = per_query([("base", "q1", 0.5), ("run", "q1", 0.2)])
    assert [p.get_facecolor() for p in per_query_difference_plot(only_worse, "run", "base", "AP").axes[0].patches] == [
        to_rgba("#c92a2a")
    ]


def test_difference_plot_looks_like_one_bar_per_query():
    """The step patches paint the pixels one 1-wide bar per query paints."""
    import io

    from matplotlib.image import imread

    def pixels(fig) -> np.ndarray:
        return imread(io.BytesIO(figure_to_png_bytes(fig)), format="png")

    mine = per_query_difference_plot(TABLE, "run", "base", "AP")
    bars = per_query_difference_plot(TABLE, "run", "base", "AP")
    ax = bars.axes[0]
    for patch in list(ax.patches):
        patch.remove()
    ax.bar(
        np.arange(4), [0.2, 0.1, 0.0, -0.3], width=1.0, linewidth=0, color=["#2b8a3e", "#2b8a3e", "#868e96", "#c92a2a"]
    )
    different = np.abs(pixels(mine) - pixels(bars)).max(axis=2) > 0.03
    assert different.mean() < 0.002  # at most anti-aliased edge pixels


def test_difference_plot_refuses_an_unknown_run():
    with pytest.raises(ValueError, match="run 'bert' has no AP values"):
        per_query_difference_plot(TABLE, "bert", "base", "AP")


def test_recall_curves_draw_one_line_per_run_on_a_log_axis():
    curves = pl.DataFrame(
        {"run_name": ["a"] * 3 + ["b"] * 3, "k": [1, 2, 3] * 2, "recall": [0.1, 0.5, 1.0, 0.0, 0.2, 0.3]}
    )
    ax = recall_curve_plot(curves).axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), [0.0, 0.2, 0.3])
    assert ax.get_xscale() == "log"


def test_figures_render_to_png_bytes():
    png = figure_to_png_bytes(per_query_difference_plot(TABLE, "run", "base", "AP"), dpi=50)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert b"Matplotlib version" not in png
