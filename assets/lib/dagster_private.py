"""Every use of a Dagster name that is not public API, in one place.

Dagster offers no public entry point for what the UI's "stale" badges show (the stale status of an
asset partition and its causes), for observing a source asset in process, for the step an IO
manager's `load_input` runs in, for whether a sensor is on (the retraining schedules step aside while
the automation sensor runs), or for the data version an observation recorded (the run-wide profile
the sources were last observed with). The rest of `assets/` uses only `import dagster as dg`; this
module wraps the few private names behind small functions, and tests/assets/test_dagster_private.py
fails loudly, naming the missing one, when a Dagster upgrade moves or removes one of them.

Checked against the Dagster minor versions named in pyproject.toml (`[tool.dagster-ir]`).
"""

from __future__ import annotations

import signal
import subprocess
from datetime import UTC, datetime

import dagster as dg

# The private names, imported once; `PRIVATE_NAMES` lists them for the upgrade test.
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.definitions.observe import observe as _observe
from dagster._core.execution import compute_logs as _compute_logs
from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType

PRIVATE_NAMES = {
    "dagster._core.asset_graph_view.asset_graph_view": ("AssetGraphView", "TemporalContext"),
    "dagster._core.definitions.data_version": ("CachingStaleStatusResolver", "StaleStatus", "StaleCause"),
    "dagster._core.definitions.observe": ("observe",),
    "dagster._core.execution.compute_logs": ("subprocess", "watch_orphans", "execute_posix_tail"),
    "dagster._core.scheduler.instigation": ("InstigatorStatus", "InstigatorType"),
}
# Attributes used on public objects that are not themselves public.
PRIVATE_ATTRIBUTES = {
    "InputContext.step_context": "the run id and step key of the step loading an input",
    "OutputContext.step_context": "the op config of the step writing an output",
    "AssetExecutionContext.get_step_execution_context": "the step key of the running asset step",
    "AssetObservation.data_version": "the data version an observation recorded",
}

FRESH, STALE, MISSING = StaleStatus.FRESH, StaleStatus.STALE, StaleStatus.MISSING


class StaleResolver:
    """Dagster's stale status (FRESH / STALE / MISSING) and its causes, as the UI computes them."""

    def __init__(self, instance: dg.DagsterInstance, graph) -> None:
        view = AssetGraphView(
            temporal_context=TemporalContext(effective_dt=datetime.now(UTC), last_event_id=None),
            instance=instance,
            asset_graph=graph,
        )
        self._resolver = CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)

    def status(self, key: dg.AssetKey, partition: str | None) -> StaleStatus:
        return self._resolver.get_status(key, partition) if partition is not None else self._resolver.get_status(key)

    def causes(self, key: dg.AssetKey, partition: str | None) -> list[str]:
        """Why `(key, partition)` is stale, one short line per cause: what changed upstream, or the code."""
        causes = (
            self._resolver.get_stale_causes(key, partition)
            if partition is not None
            else self._resolver.get_stale_causes(key)
        )
        lines = []
        for cause in causes:
            text = f"{_name(cause.dependency or cause.key)}: {cause.reason}"
            if text not in lines:
                lines.append(text)
        return lines


def _name(key_partition) -> str:
    """`asset[partition]` of an AssetKeyPartitionKey."""
    partition = key_partition.partition_key
    return key_partition.asset_key.to_user_string() + (f"[{partition}]" if partition else "")


def observe(sources, *, instance: dg.DagsterInstance, resources: dict, run_config: dict):
    """Observe observable source assets of one partitions definition in one run, in this process (Dagster's
    `observe`, not exported); `sources` is one of them or a list."""
    sources = list(sources) if isinstance(sources, list | tuple) else [sources]
    return _observe(sources, instance=instance, resources=resources, raise_on_error=False, run_config=run_config)


def input_step(context: dg.InputContext) -> tuple[str, str] | None:
    """(run id, step key) of the step loading an input; None outside a run (InputContext has no public run id)."""
    try:
        step = context.step_context
    except (AttributeError, dg.DagsterInvariantViolationError):
        return None
    return (step.run_id, step.step.key) if step is not None else None


def output_op_config(context: dg.OutputContext) -> dict:
    """The op config of the step writing an output (OutputContext.config is the output's config)."""
    try:
        step = context.step_context
    except (AttributeError, dg.DagsterInvariantViolationError):
        return {}
    return (step.op_config or {}) if step is not None else {}


def asset_step(context: dg.AssetExecutionContext) -> tuple[str, str]:
    """(run id, step key) of the running asset step (the same key `input_step` gives its inputs)."""
    step = context.get_step_execution_context()
    return step.run_id, step.step.key


def sensor_running(instance: dg.DagsterInstance, name: str) -> bool:
    """Whether a sensor called `name` was turned on (in the UI or `dagster sensor start`) in this instance."""
    states = instance.all_instigator_state(
        instigator_type=InstigatorType.SENSOR, instigator_statuses={InstigatorStatus.RUNNING}
    )
    return any(state.instigator_name == name for state in states)


def latest_observed_version(instance: dg.DagsterInstance, key: dg.AssetKey) -> str | None:
    """The data version of the latest observation of unpartitioned source `key` (None: never observed)."""
    records = instance.fetch_observations(key, limit=1).records
    observation = records[0].asset_observation if records else None
    return observation.data_version if observation is not None else None


class _WatcherIgnoresCtrlC:
    """`subprocess` as Dagster's compute-log module sees it: its orphan watcher starts ignoring SIGINT."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs):  # noqa: N802 (subprocess's name)
        watcher = _compute_logs.watch_orphans.__file__
        if isinstance(args, list) and len(args) > 1 and str(args[1]).endswith(watcher.rsplit("/", 1)[-1]):
            kwargs.setdefault("preexec_fn", lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        return subprocess.Popen(args, **kwargs)


def quiet_log_watchers() -> None:
    """Ctrl-C in a terminal reaches every process of its foreground group, and so the Python script that
    Dagster starts beside each step's `tail` (it ends the `tail` if the step's process dies): each printed a
    KeyboardInterrupt traceback. Started ignoring SIGINT (a Python child keeps an ignored SIGINT), the
    watcher stays quiet; the step still stops it (SIGTERM) when it ends. Idempotent."""
    if not isinstance(_compute_logs.subprocess, _WatcherIgnoresCtrlC):
        _compute_logs.subprocess = _WatcherIgnoresCtrlC()  # type: ignore[assignment]
