"""A failed run's summary line and Dagster's console output with and without failure traces (in process)."""

import dagster as dg

from assets.lib.staleness import failure_message, without_failure_events


class BadPage(ValueError):
    pass


@dg.asset
def parsed() -> None:
    """Fails the way a dump reader does: our error, naming the file and page, over the parser's."""
    try:
        raise SyntaxError("mismatched tag: line 13195, column 68")
    except SyntaxError as inner:
        raise BadPage("dump.xml: malformed XML at line 13195, after page 'Good' (id 7)") from inner


def _run(capfd, quiet: bool):
    config = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if quiet:
        with without_failure_events():
            result = dg.materialize([parsed], raise_on_error=False, run_config=config)
    else:
        result = dg.materialize([parsed], raise_on_error=False, run_config=config)
    return result, capfd.readouterr().err


def test_the_summary_names_our_error_not_its_deepest_cause(capfd):
    result, _ = _run(capfd, quiet=True)
    message = failure_message(result)
    assert message.startswith("parsed: ") and "\n" not in message and "mismatched tag" not in message
    assert message.endswith("BadPage: dump.xml: malformed XML at line 13195, after page 'Good' (id 7)")


def test_failure_events_stay_out_of_the_console_only_when_asked(capfd):
    _, loud = _run(capfd, quiet=False)
    assert "STEP_FAILURE" in loud and "Stack Trace" in loud
    _, quiet = _run(capfd, quiet=True)
    assert "STEP_FAILURE" not in quiet and "RUN_FAILURE" not in quiet and "Stack Trace" not in quiet
    import logging

    assert logging.getLoggerClass() is logging.Logger  # the swap is undone
