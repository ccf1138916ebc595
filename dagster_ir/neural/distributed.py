"""Training across machines: the shared loop (`training.train`) under `torchrun`, several nodes.

`LaunchConfig` holds what torchrun needs (nodes, processes per node, the rendezvous endpoint,
restarts); `torchrun_command` turns it and a training module into the command line every node runs
(the same line on each node: c10d rendezvous assigns the ranks). `launch` runs it on this node,
streams its output and the metrics rank 0 writes, and relaunches it when it fails:

- a lost worker process: torchrun itself stops the worker group and restarts it, up to
  `max_restarts` times (`--max-restarts`); the restarted workers resume from the newest complete
  checkpoint (`train` does, from `checkpoint_dir`);
- a lost node, or torchrun giving up: `launch` starts torchrun again, up to `relaunches` times; the
  rendezvous waits for the nodes, and training resumes from the checkpoint again.

Every node must see the same `checkpoint_dir` (a folder on the shared data directory): rank 0 writes
the weights and optimizer, every rank its RNG state into one folder (`training._save_checkpoint`).

Metrics: rank 0 appends one JSON line per optimizer step to a file on the shared directory
(`MetricsLog`), whichever node it runs on; `launch` forwards new lines to `on_metrics` (the asset
logs them to the Dagster UI); a training module passes `metrics_logger()` as `train`'s `on_log`.
`tests/dagster_ir/neural/torchrun_script.py` is one such module.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dagster_ir.storage.atomic import atomic_path

METRICS_ENV = "DAGSTER_IR_METRICS"  # the metrics file rank 0 appends to (set by `launch`)
# The workers' process group gets a store of its own (hosted by rank 0) instead of sharing the
# torchrun agent's: with the shared store, gloo workers restarted after a lost worker read their
# peers' addresses of the previous attempt and fail ("connectFullMesh failed ... Connection
# refused", torch 2.13). Every node's torchrun needs it; `launch` sets it.
TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


@dataclass(frozen=True)
class LaunchConfig:
    """How torchrun starts the training processes (defaults: one process on this host alone)."""

    nnodes: str = "1"  # "N", or "MIN:MAX" for an elastic job that goes on with MIN nodes
    nproc_per_node: int = 1  # processes per node (GPUs per node on GPU hosts)
    rdzv_endpoint: str = ""  # "host:port" every node reaches; "" = this host alone (--standalone)
    rdzv_id: str = "dagster-ir"  # one id per training job: nodes with the same id train together
    rdzv_backend: str = "c10d"
    max_restarts: int = 1  # worker-group restarts after a lost worker (each resumes from the checkpoint)
    relaunches: int = 1  # torchrun starts again after it fails (a lost node)
    monitor_interval: float = 1.0  # seconds between torchrun's worker health checks

    def __post_init__(self) -> None:
        parts = self.nnodes.split(":")
        if not (1 <= len(parts) <= 2 and all(p.isdigit() and int(p) >= 1 for p in parts)):
            raise ValueError(f"LaunchConfig.nnodes: expected 'N' or 'MIN:MAX' (N >= 1), got {self.nnodes!r}")
        if len(parts) == 2 and int(parts[0]) > int(parts[1]):
            raise ValueError(f"LaunchConfig.nnodes: MIN > MAX in {self.nnodes!r}")
        if self.nproc_per_node < 1 or self.max_restarts < 0 or self.relaunches < 0:
            raise ValueError("LaunchConfig: nproc_per_node must be >= 1, max_restarts and relaunches >= 0")
        if self.rdzv_endpoint and ":" not in self.rdzv_endpoint:
            raise ValueError(f"LaunchConfig.rdzv_endpoint: expected 'host:port', got {self.rdzv_endpoint!r}")
        if self.multi_node and not self.rdzv_endpoint:
            raise ValueError(f"LaunchConfig: nnodes={self.nnodes!r} needs rdzv_endpoint (host:port every node reaches)")

    @property
    def multi_node(self) -> bool:
        return self.nnodes.split(":")[-1] != "1"


def torchrun_command(config: LaunchConfig, module: str, args: Sequence[str], python: str = sys.executable) -> list[str]:
    """The torchrun command line that runs `python -m module args` (or a `.py` file) in every training process."""
    command = [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={config.nnodes}",
        f"--nproc-per-node={config.nproc_per_node}",
        f"--max-restarts={config.max_restarts}",
        f"--monitor-interval={config.monitor_interval}",
    ]
    if config.rdzv_endpoint:
        command += [
            f"--rdzv-backend={config.rdzv_backend}",
            f"--rdzv-endpoint={config.rdzv_endpoint}",
            f"--rdzv-id={config.rdzv_id}",
        ]
    else:
        command.append("--standalone")
    target = [module] if module.endswith(".py") else ["-m", module]
    return [*command, *target, *args]


# --- metrics ------------------------------------------------------------------------------------


class MetricsLog:
    """JSON lines of training metrics: rank 0 appends, the launcher reads what is new."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._offset = 0

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()

    def read_new(self) -> list[dict]:
        """Whole lines appended since the last call (a line still being written waits)."""
        if not self.path.is_file():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        return [json.loads(line) for line in chunk[:end].decode("utf-8").splitlines() if line.strip()]


def metrics_logger(path: str | os.PathLike[str] | None = None) -> Callable[[int, dict], None] | None:
    """An `on_log` for `train` that appends each step's logs to $DAGSTER_IR_METRICS (None when unset)."""
    path = path or os.environ.get(METRICS_ENV)
    if not path:
        return None
    log = MetricsLog(path)
    return lambda step, logs: log.append({"step": step, **logs})


# --- launching ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchResult:
    """What `launch` did: torchrun's exit status per attempt, and the metrics records it forwarded."""

    returncodes: list[int]
    metrics: list[dict]
    seconds: float

    @property
    def ok(self) -> bool:
        return bool(self.returncodes) and self.returncodes[-1] == 0


def launch(
    command: Sequence[str],
    metrics_path: str | os.PathLike[str],
    *,
    relaunches: int = 0,
    env: dict[str, str] | None = None,
    on_output: Callable[[str], None] = lambda line: None,
    on_metrics: Callable[[dict], None] = lambda record: None,
    timeout: float | None = None,
    poll: float = 0.5,
) -> LaunchResult:
    """Run `command` (torchrun) on this node until it succeeds, at most 1 + `relaunches` times.

    Output lines go to `on_output`, new metrics records (from `metrics_path`, which the training
    processes find in $DAGSTER_IR_METRICS) to `on_metrics`. On timeout the whole process group is
    killed and TimeoutError raised.
    """
    started = time.monotonic()
    metrics_path = Path(metrics_path)
    with atomic_path(metrics_path) as tmp:  # a fresh, empty file (a relaunch appends to it)
        tmp.write_text("", encoding="utf-8")
    log, records, codes = MetricsLog(metrics_path), [], []
    environment = {**(env if env is not None else os.environ), **TORCHRUN_ENV, METRICS_ENV: str(metrics_path)}
    for _ in range(1 + relaunches):
        process = subprocess.Popen(
            list(command),
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: queue.Queue[str] = queue.Queue()  # callbacks run on this thread only (Dagster's log is not thread-safe)
        reader = threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True)
        reader.start()
        try:
            while process.poll() is None:
                _drain(lines, on_output)
                if timeout is not None and time.monotonic() - started > timeout:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    raise TimeoutError(f"{' '.join(command[:6])} ...: still running after {timeout} s; killed")
                for record in log.read_new():
                    records.append(record)
                    on_metrics(record)
                time.sleep(poll)
        except BaseException:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            raise
        reader.join(timeout=5)
        _drain(lines, on_output)
        for record in log.read_new():
            records.append(record)
            on_metrics(record)
        codes.append(process.returncode)
        if process.returncode == 0:
            break
    return LaunchResult(codes, records, time.monotonic() - started)


def _pump(stream: Iterable[str], lines: queue.Queue) -> None:
    """Put each line of `stream` on `lines` (a reader thread's loop)."""
    for line in stream:
        lines.put(line.rstrip("\n"))


def _drain(lines: queue.Queue, on_output: Callable[[str], None]) -> None:
    while True:
        try:
            on_output(lines.get_nowait())
        except queue.Empty:
            return
