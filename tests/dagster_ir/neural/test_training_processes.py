"""The training loop across processes: SIGKILL mid-epoch then resume, and 2-process DDP (gloo)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.training import latest_checkpoint

SCRIPT = Path(__file__).with_name("training_script.py")
ROOT = Path(__file__).resolve().parents[3]


def _in_process(args: list[str]) -> None:
    """Run the script's main() here (saves a process start; same thread count as a subprocess)."""
    spec = importlib.util.spec_from_file_location("training_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(args)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def _command(tiny: str, run: Path, *extra: str) -> list[str]:
    return ["--backbone", tiny, "--checkpoints", str(run / "checkpoints"), "--out", str(run / "out"), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _run(args: list[str], timeout: float = 300) -> None:
    """Run a command in its own process group; on timeout kill the whole group (torchrun's workers too)."""
    process = subprocess.Popen(
        args, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    assert process.returncode == 0, stderr[-3000:]


def _result(run: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    out = run / "out"
    return json.loads((out / "result.json").read_text()), load_file(str(out / "weights.safetensors"))


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_ends_with_the_same_weights(tiny, tmp_path):
    # A subprocess like the killed and resumed runs: in the test process, settings that earlier tests left
    # (torch's threads) change the float rounding, and bit-exact equality would then fail for that reason alone.
    _run([sys.executable, str(SCRIPT), *_command(tiny, tmp_path / "whole")])
    expected, expected_weights = _result(tmp_path / "whole")

    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), *_command(tiny, killed, "--sleep", "0.4")],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        while latest_checkpoint(killed / "checkpoints") is None and process.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.05)
        time.sleep(0.2)  # into the steps after the checkpoint
    finally:
        process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL, process.stderr.read()[-3000:]
    state = json.loads((latest_checkpoint(killed / "checkpoints") / "state.json").read_text())
    assert not state["progress"]["done"] and state["progress"]["step"] < expected["steps"]

    _run([sys.executable, str(SCRIPT), *_command(tiny, killed)])
    resumed, resumed_weights = _result(killed)
    assert resumed["resumed_from"] == state["progress"]["step"] > 0
    assert resumed["loss_curve"] == expected["loss_curve"]
    assert expected_weights.keys() == resumed_weights.keys()
    for key, value in expected_weights.items():
        assert torch.equal(value, resumed_weights[key]), key


@pytest.mark.slow
def test_two_process_ddp_matches_one_process_with_the_same_global_batch(tiny, tmp_path):
    no_dropout = ("--dropout", "0.0", "--epochs", "1")
    _in_process(_command(tiny, tmp_path / "one", *no_dropout))
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(SCRIPT),
            *_command(tiny, tmp_path / "two", *no_dropout),
        ]
    )
    one, one_weights = _result(tmp_path / "one")
    two, two_weights = _result(tmp_path / "two")
    assert len(one["loss_curve"]) == len(two["loss_curve"]) == 4
    torch.testing.assert_close(torch.tensor(two["loss_curve"]), torch.tensor(one["loss_curve"]), rtol=1e-4, atol=1e-5)
    # Adam turns rounding noise in ~0 gradients into whole steps, so compare the weights as a whole:
    # the two runs end far closer to each other than to where they started.
    start = CrossEncoder.from_pretrained(tiny, max_length=32, max_query_length=8, seed=1).state_dict()
    flat = {
        name: torch.cat([w[k].flatten() for k in sorted(one_weights)])
        for name, w in [("one", one_weights), ("two", two_weights), ("start", start)]
    }
    moved = (flat["one"] - flat["start"]).norm()
    assert moved > 0 and (flat["two"] - flat["one"]).norm() < 0.01 * moved
    assert one["loss_curve"][-1] < one["loss_curve"][0]  # it did learn something
