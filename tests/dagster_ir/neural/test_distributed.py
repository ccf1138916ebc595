"""torchrun across processes and nodes: a worker lost mid-run, torchrun restarts the group, training
resumes from the newest checkpoint and ends exactly where an uninterrupted run ends."""

import json
import os
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.distributed import LaunchConfig, MetricsLog, launch, metrics_logger, torchrun_command

SCRIPT = str(Path(__file__).with_name("torchrun_script.py"))
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }


def _args(tiny: str, run: Path, *extra: str) -> list[str]:
    return ["--backbone", tiny, "--checkpoints", str(run / "checkpoints"), "--out", str(run / "out"), *extra]


def _train(config: LaunchConfig, tiny: str, run: Path, *extra: str):
    lines: list[str] = []
    result = launch(
        torchrun_command(config, SCRIPT, _args(tiny, run, *extra)),
        run / "metrics.jsonl",
        relaunches=config.relaunches,
        env=_env(),
        on_output=lines.append,
        timeout=400,
    )
    assert result.ok, "\n".join(lines[-60:])
    out = run / "out"
    return result, json.loads((out / "result.json").read_text()), load_file(str(out / "weights.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tiny, tmp_path_factory):
    return _train(LaunchConfig(nproc_per_node=2, max_restarts=0, relaunches=0), tiny, tmp_path_factory.mktemp("whole"))


def _assert_same_run(resumed, expected) -> None:
    (_, result, weights), (_, expected_result, expected_weights) = resumed, expected
    assert result["world_size"] == expected_result["world_size"] == 2
    assert result["loss_curve"] == expected_result["loss_curve"]
    assert weights.keys() == expected_weights.keys()
    for key, value in expected_weights.items():
        assert torch.equal(value, weights[key]), key


@pytest.mark.slow
def test_lost_worker_is_restarted_by_torchrun_and_resumes_to_the_same_weights(tiny, uninterrupted, tmp_path):
    config = LaunchConfig(nproc_per_node=2, max_restarts=1, relaunches=0, monitor_interval=0.5)
    run = _train(config, tiny, tmp_path, "--lose-worker-at", "6", "--marker", str(tmp_path / "lost"))
    launched, result, _ = run
    assert (tmp_path / "lost").read_text() == "lost at step 6\n"  # the worker was lost, once
    assert launched.returncodes == [0]  # torchrun restarted the workers itself
    assert result["resumed_from"] == 4  # the newest checkpoint before step 6 (every 2 steps)
    steps = [r["step"] for r in launched.metrics]
    assert steps == [1, 2, 3, 4, 5, 5, 6, 7, 8]  # step 5 logged, then redone after the restart
    _assert_same_run(run, uninterrupted)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_rendezvous_and_a_relaunch_after_torchrun_fails(tiny, uninterrupted, tmp_path):
    """Two torchrun agents (nodes) of one process each meet at a c10d endpoint; with no restarts
    left torchrun fails when the worker is lost, and `launch` starts both nodes again."""
    import threading

    config = LaunchConfig(
        nnodes="2",
        nproc_per_node=1,
        rdzv_endpoint=f"127.0.0.1:{_free_port()}",
        rdzv_id="test-two-nodes",
        max_restarts=0,
        relaunches=1,
        monitor_interval=0.5,
    )
    extra = ("--lose-worker-at", "6", "--marker", str(tmp_path / "lost"))
    outcomes: dict[int, object] = {}

    def node(index: int) -> None:
        lines: list[str] = []
        result = launch(
            torchrun_command(config, SCRIPT, _args(tiny, tmp_path, *extra)),
            tmp_path / f"metrics-{index}.jsonl",
            relaunches=config.relaunches,
            env=_env(),
            on_output=lines.append,
            timeout=400,
        )
        outcomes[index] = (result, lines)

    threads = [threading.Thread(target=node, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result, lines in outcomes.values():
        assert result.ok, "\n".join(lines[-60:])
        assert len(result.returncodes) == 2 and result.returncodes[0] != 0  # failed once, then relaunched
    out = tmp_path / "out"
    resumed = (None, json.loads((out / "result.json").read_text()), load_file(str(out / "weights.safetensors")))
    assert resumed[1]["resumed_from"] == 4
    _assert_same_run(resumed, uninterrupted)


def test_torchrun_command_for_one_host_and_for_several_nodes():
    alone = torchrun_command(LaunchConfig(nproc_per_node=2), "pkg.train", ["--x", "1"], python="py")
    assert alone == [
        "py",
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--monitor-interval=1.0",
        "--standalone",
        "-m",
        "pkg.train",
        "--x",
        "1",
    ]
    nodes = torchrun_command(
        LaunchConfig(nnodes="2:4", nproc_per_node=8, rdzv_endpoint="head:29400", rdzv_id="job-7"),
        "pkg.train",
        [],
        python="py",
    )
    assert "--nnodes=2:4" in nodes and "--rdzv-endpoint=head:29400" in nodes and "--rdzv-id=job-7" in nodes
    assert "--rdzv-backend=c10d" in nodes and "--standalone" not in nodes


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"nnodes": "two"}, "nnodes"),
        ({"nnodes": "4:2"}, "MIN > MAX"),
        ({"nnodes": "2"}, "needs rdzv_endpoint"),
        ({"rdzv_endpoint": "head"}, "host:port"),
        ({"nproc_per_node": 0}, "nproc_per_node"),
    ],
)
def test_bad_launch_config_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        LaunchConfig(**fields)


def test_metrics_log_reads_only_whole_new_lines(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    log, reader = MetricsLog(path), MetricsLog(path)
    assert reader.read_new() == []
    log.append({"step": 1, "loss": 0.5})
    with path.open("a") as handle:
        handle.write('{"step": 2, "lo')  # a line still being written
    assert reader.read_new() == [{"step": 1, "loss": 0.5}]
    with path.open("a") as handle:
        handle.write('ss": 0.25}\n')
    assert reader.read_new() == [{"step": 2, "loss": 0.25}]
    monkeypatch.delenv("DAGSTER_IR_METRICS", raising=False)
    assert metrics_logger(None) is None  # not launched by `launch`: no metrics file, nothing logged
    on_log = metrics_logger(tmp_path / "other.jsonl")
    on_log(3, {"loss": 1.0, "lr": 0.1})
    assert MetricsLog(tmp_path / "other.jsonl").read_new() == [{"step": 3, "loss": 1.0, "lr": 0.1}]


@pytest.mark.slow
def test_nodes_without_a_shared_checkpoint_folder_fail_with_a_clear_error(tiny, tmp_path):
    import threading

    config = LaunchConfig(
        nnodes="2",
        nproc_per_node=1,
        rdzv_endpoint=f"127.0.0.1:{_free_port()}",
        rdzv_id="test-not-shared",
        max_restarts=0,
        relaunches=0,
        monitor_interval=0.5,
    )
    outputs: dict[int, tuple] = {}

    def node(index: int) -> None:  # each "node" its own checkpoint folder, as two local disks would be
        lines: list[str] = []
        result = launch(
            torchrun_command(config, SCRIPT, _args(tiny, tmp_path / f"node-{index}")),
            tmp_path / f"metrics-{index}.jsonl",
            env=_env(),
            on_output=lines.append,
            timeout=300,
        )
        outputs[index] = (result, lines)

    threads = [threading.Thread(target=node, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(not result.ok for result, _ in outputs.values())
    text = "\n".join(line for _, lines in outputs.values() for line in lines)
    assert "1 of 2 processes do not see rank 0's files there" in text
    assert not list(tmp_path.glob("node-*/checkpoints/step-*"))  # nothing trained
