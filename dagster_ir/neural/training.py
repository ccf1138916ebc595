"""The one training loop every model shares: AdamW with linear warm-up and decay, checkpoints that
resume bit-identically, model selection on a dev score, DDP under `torchrun`, bf16 autocast on GPU.

API
---
`TrainConfig`  frozen settings: lr, warmup_ratio, schedule ("linear" decay to 0, or "constant"
    after the warm-up), weight_decay, epochs, batch_size (the *global*
    batch: examples per optimizer step over all processes), grad_accumulation, max_steps (optional
    cap), seed, checkpoint_every (steps; 0 = at epoch ends only), keep_checkpoints, max_grad_norm,
    bf16 (autocast), device ("cpu", "cuda", "auto": CUDA when available; under torchrun "cuda" and
    "auto" mean this process's GPU, see `dagster_ir.neural.device`),
    find_unused_parameters (passed to DDP).

`train(model, make_batches, loss_fn, config, checkpoint_dir, *, on_log=None, evaluate=None,
resume=True) -> TrainResult`
  - `make_batches(epoch, rng)` returns a sized iterable (`len()` works) of global batches for that
    epoch; each batch is a list of examples or a dict of tensors with the examples along dim 0.
    `rng` is `numpy.random.default_rng([seed, epoch])`, the same on every process, so every process
    sees the same global batches. Put all data randomness (shuffling, negatives, MLM masks) here:
    then resuming, and running on 1 or N processes, see the same examples.
  - `loss_fn(model, micro_batch) -> (loss, logs)`: the MEAN loss over the micro-batch's examples
    (a 0-d tensor) and a dict of floats to log (also means over the examples). Each process takes
    its shard of the global batch (examples rank::world_size, as DistributedSampler does) and splits
    it into `grad_accumulation` micro-batches; the loop weights each micro-batch by its share of the
    global batch, so the gradient is the global batch's mean gradient whatever the split. Under DDP
    `model` is the DDP wrapper: call `model(...)` (its forward) so gradients are all-reduced, and
    reach the module itself with `unwrap(model)`. Move tensors to `next(model.parameters()).device`.
  - `evaluate(model) -> float` (higher is better) runs after every epoch on the dev split, on rank
    0 with the bare module in eval mode; the best epoch's weights are restored at the end.
  - `on_log(step, logs)` runs on rank 0 after every optimizer step with the global mean loss ("loss"),
    the logs of `loss_fn` and the learning rate ("lr").

`TrainResult`: loss_curve, log_curves, dev_scores, best_epoch, steps, seconds, examples_per_s,
resumed_from.

`against_start(model, evaluate, run, keep_start=True, checkpoint_dir=None) -> (TrainResult, start
score, kept)`: score the starting weights with `evaluate` (in eval mode), run the training `run()`,
and, with `keep_start`, put the starting weights back when no epoch scored above them (a pretrained
or freshly initialised start is a checkpoint to choose too); with `checkpoint_dir` (the folder `run`
trains into), the kept start also replaces `checkpoint_dir/best/`, so what loads the best weights
from disk loads the start. Without `evaluate`, only `run()`. `kept_record(run_name, result, start
score, kept)` is the row a manifest keeps of that choice.

Checkpoints: `checkpoint_dir/step-00000040/` holds `model.safetensors` (the module's weights),
`optimizer.safetensors` (Adam moments, twice the weights' bytes; left out of the last checkpoint of
a finished run, which nothing resumes training from), `rng-<rank>.safetensors` (torch/numpy/python
RNG states of each process) and `state.json` (step, position in the epoch, curves, optimizer and scheduler
scalars, the config, and a sha256 of every file). Each folder is written beside its final name,
under a temporary name of its own (`.step-N.<host>-<pid>-<random>.tmp`, the same on every rank),
fsynced and swapped into place, so a folder that exists is complete; a damaged newest folder raises
`CheckpointError` naming the file instead of silently restarting. `checkpoint_dir/best/` holds the
weights of the best dev epoch. Nothing is read with pickle. While `train` runs, rank 0 holds the
folder's lock (`checkpoint_dir/.lock`): a second process training into the same folder waits, then
resumes from the first one's checkpoints, and `remove_unlocked_siblings` leaves the folder alone.

`on_rank_zero(write, ...)`: a write after training (a model's folder) done by rank 0 alone, the
other processes waiting for it; code that runs whole on every process of a torchrun job
(`dagster_ir.neural.train_job`) writes through it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError

from dagster_ir.lazy import lazy_module
from dagster_ir.neural.device import resolve_device
from dagster_ir.storage.atomic import atomic_path, replace_directory, sync_tree, temp_name, umask
from dagster_ir.storage.locks import folder_lock

if TYPE_CHECKING:
    import safetensors.torch as safetensors_torch
    import torch
else:
    torch = lazy_module("torch")
    safetensors_torch = lazy_module("safetensors.torch")  # imports torch


def load_file(*args, **kwargs):
    return safetensors_torch.load_file(*args, **kwargs)


def load_model(*args, **kwargs):
    return safetensors_torch.load_model(*args, **kwargs)


def save_file(*args, **kwargs):
    return safetensors_torch.save_file(*args, **kwargs)


def save_model(*args, **kwargs):
    return safetensors_torch.save_model(*args, **kwargs)


if TYPE_CHECKING:
    Batch = Sequence[Any] | Mapping[str, torch.Tensor]
    LossFn = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, Mapping[str, float]]]
    MakeBatches = Callable[[int, np.random.Generator], Iterable[Batch]]

STATE_FILE = "state.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
BEST_DIR = "best"
# Fields that may change between a run and its resumption without changing what is computed.
# (find_unused_parameters: DDP's bookkeeping of which gradients to wait for, not what they are)
_RESUMABLE_CHANGES = frozenset({"device", "checkpoint_every", "keep_checkpoints", "find_unused_parameters"})


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and checkpoint settings (defaults: the paper's PHP pre-training)."""

    lr: float = 1e-5
    warmup_ratio: float = 0.1
    schedule: str = "linear"  # after the warm-up: "linear" decay to 0 at the last step, or "constant"
    weight_decay: float = 0.01
    epochs: int = 1
    batch_size: int = 24  # global: examples per optimizer step over all processes
    grad_accumulation: int = 1  # micro-batches per process and step (memory, not maths)
    max_steps: int | None = None  # stop after this many optimizer steps
    seed: int = 42
    checkpoint_every: int = 0  # optimizer steps; 0: only at the end of each epoch
    keep_checkpoints: int = 2  # newest step folders kept
    max_grad_norm: float | None = 1.0
    bf16: bool = False  # torch.autocast(bfloat16) around loss_fn
    device: str = "cpu"
    find_unused_parameters: bool = False  # DDP setting, for models with parameters a step may skip
    # the learning rate is multiplied by this after every epoch, on top of the schedule (1.0: never)
    epoch_decay: float = 1.0
    # (parameter-name prefix, lr): a parameter whose name starts with a prefix (the first that matches)
    # gets that base rate instead of `lr`, e.g. (("layer.", 2e-3),) for a head over a pre-trained encoder
    lr_groups: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "grad_accumulation", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise ValueError(f"TrainConfig.warmup_ratio must lie in [0, 1], got {self.warmup_ratio}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError(f"TrainConfig: lr must be > 0 and weight_decay >= 0 (got {self.lr}, {self.weight_decay})")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainConfig.schedule must be one of {sorted(SCHEDULES)}, got {self.schedule!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"TrainConfig.max_steps must be >= 1 or None, got {self.max_steps}")
        if self.checkpoint_every < 0:
            raise ValueError(f"TrainConfig.checkpoint_every must be >= 0, got {self.checkpoint_every}")
        if not 0.0 < self.epoch_decay <= 1.0:
            raise ValueError(f"TrainConfig.epoch_decay must lie in (0, 1], got {self.epoch_decay}")
        groups = tuple((str(prefix), float(lr)) for prefix, lr in self.lr_groups)  # JSON gives lists
        if any(not prefix or lr <= 0 for prefix, lr in groups):
            raise ValueError(f"TrainConfig.lr_groups: each needs a non-empty prefix and lr > 0, got {self.lr_groups}")
        object.__setattr__(self, "lr_groups", groups)


@dataclass(frozen=True)
class TrainResult:
    """What a training run did; curves cover the whole run, resumed parts included."""

    loss_curve: list[float]  # global mean loss per optimizer step
    log_curves: dict[str, list[float]]  # every value loss_fn logged, per step
    dev_scores: list[float]  # evaluate() per epoch; empty without evaluate
    best_epoch: int  # 0-based; the last epoch without evaluate
    steps: int
    seconds: float  # wall time of this call
    examples_per_s: float  # examples this call trained on per second (global)
    resumed_from: int = 0  # the step this call resumed from


class CheckpointError(RuntimeError):
    """A checkpoint folder cannot be resumed from; the message names the file."""


# --- distributed --------------------------------------------------------------------------


def world() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless a process group is initialised."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def init_distributed(device: str = "cpu") -> tuple[int, int]:
    """Join the process group torchrun describes (env WORLD_SIZE > 1); gloo on CPU, nccl on CUDA."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        cuda = resolve_device(device).startswith("cuda")
        if cuda:  # plain "cuda" then means this process's GPU in the scoring after training too
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    return world()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DDP wrapper (or the module itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _barrier() -> None:
    if world()[1] > 1:
        torch.distributed.barrier()


def on_rank_zero(write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`write(*args, **kwargs)` on rank 0 alone (every process holds the same weights after `train`),
    then a barrier, so the other processes read what it wrote. Returns what `write` returns on rank 0,
    None on the others. In one process: just `write`."""
    result = write(*args, **kwargs) if world()[0] == 0 else None
    _barrier()
    return result


def _device(config: TrainConfig) -> torch.device:
    device = resolve_device(config.device)
    if device == "cuda" and world()[1] > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(device)


# --- batches --------------------------------------------------------------------------------


def shuffled_batches(examples: Sequence[Any], batch_size: int, rng: np.random.Generator) -> list[list[Any]]:
    """`examples` in an order drawn from `rng`, cut into batches of `batch_size` (the last may be short)."""
    order = rng.permutation(len(examples))
    return [[examples[i] for i in order[start : start + batch_size]] for start in range(0, len(order), batch_size)]


def batch_size_of(batch: Batch) -> int:
    """Number of examples in a batch (list of examples, or dict of tensors along dim 0)."""
    if isinstance(batch, Mapping):
        sizes = {len(value) for value in batch.values()}
        if len(sizes) != 1:
            raise ValueError(f"batch tensors disagree on the number of examples: {sorted(sizes)}")
        return sizes.pop()
    return len(batch)


def _take(batch: Batch, index: Sequence[int]) -> Batch:
    if isinstance(batch, Mapping):
        picked = torch.as_tensor(list(index), dtype=torch.long)
        return {key: value[picked] for key, value in batch.items()}
    return [batch[i] for i in index]


def micro_batches(batch: Batch, rank: int, world_size: int, accumulation: int) -> list[Batch]:
    """This process's share of a global batch (examples rank::world_size) split into <= accumulation parts."""
    mine = list(range(rank, batch_size_of(batch), world_size))
    if not mine:
        raise ValueError(
            f"a global batch of {batch_size_of(batch)} examples leaves process {rank} of {world_size} "
            "nothing; make every batch hold at least one example per process"
        )
    parts = np.array_split(np.asarray(mine), min(accumulation, len(mine)))
    return [_take(batch, part.tolist()) for part in parts]


# --- optimiser ------------------------------------------------------------------------------


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW; biases and normalisation weights (parameters with < 2 dims) get no weight decay;
    parameters named by `config.lr_groups` prefixes get their group's base rate. A model on the CPU
    gets torch's fused AdamW (the same update, equal within float rounding, several times faster)."""

    def rate(name: str) -> float:
        return next((lr for prefix, lr in config.lr_groups if name.startswith(prefix)), config.lr)

    buckets: dict[tuple[float, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            buckets.setdefault((rate(name), p.ndim >= 2), []).append(p)
    if not config.lr_groups:  # the two groups as before (their order is part of a checkpoint)
        buckets = {
            (config.lr, True): buckets.get((config.lr, True), []),
            (config.lr, False): buckets.get((config.lr, False), []),
        }
    groups = [
        {"params": params, "lr": lr, "weight_decay": config.weight_decay if decays else 0.0}
        for (lr, decays), params in buckets.items()
    ]
    # on a CPU, torch's fused kernel: the same update in one pass per tensor, where its default
    # (one op at a time per tensor) cost 0.7 s a step on MiniLM, 15% of the step (fused: 0.14 s)
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    return torch.optim.AdamW(groups, lr=config.lr, fused=True if on_cpu else None)


def epoch_decayed(factor: Callable[[int], float], steps_per_epoch: int, decay: float) -> Callable[[int], float]:
    """`factor` times decay ** (epochs completed): the learning rate shrinks by `decay` after each epoch."""
    if decay == 1.0:
        return factor
    return lambda step: factor(step) * decay ** (step // max(1, steps_per_epoch))


def linear_schedule(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    """LR factor: linear warm-up over ceil(ratio * total) steps, then linear decay to 0 at total."""
    warmup = math.ceil(total_steps * warmup_ratio)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return factor


def constant_schedule(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    """LR factor: linear warm-up over ceil(ratio * total) steps, then 1."""
    warmup = math.ceil(total_steps * warmup_ratio)
    return lambda step: (step + 1) / warmup if step < warmup else 1.0


SCHEDULES = {"linear": linear_schedule, "constant": constant_schedule}


# --- checkpoints ----------------------------------------------------------------------------


def checkpoint_folders(checkpoint_dir: str | os.PathLike[str]) -> list[Path]:
    """Complete step folders, oldest first."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit())


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str]) -> Path | None:
    """The newest complete step folder, or None."""
    folders = checkpoint_folders(checkpoint_dir)
    return folders[-1] if folders else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state dict into tensors (for safetensors) and JSON scalars."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], saved: dict) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *saved["scalars"].items()]:
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    groups = [
        {**group, "betas": tuple(group["betas"])} if "betas" in group else group for group in saved["param_groups"]
    ]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    version, python_state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    tensors = {
        "torch": torch.get_rng_state(),
        "python": torch.tensor(python_state, dtype=torch.int64),
        "numpy": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
    }
    if torch.cuda.is_available():
        for i, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = cuda_state
    meta = {
        "python": json.dumps([version, gauss]),
        "numpy": json.dumps([kind, int(pos), int(has_gauss), float(cached)]),
    }
    return tensors, meta


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    version, gauss = json.loads(meta["python"])
    random.setstate((version, tuple(int(v) for v in tensors["python"].tolist()), gauss))
    kind, pos, has_gauss, cached = json.loads(meta["numpy"])
    np.random.set_state((kind, tensors["numpy"].numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class _Progress:
    """Where a run stands; serialised into state.json."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    examples: int = 0
    loss_curve: list[float] = field(default_factory=list)
    log_curves: dict[str, list[float]] = field(default_factory=dict)
    dev_scores: list[float] = field(default_factory=list)
    best_epoch: int = -1
    done: bool = False


def _save_checkpoint(
    root: Path, model: torch.nn.Module, optimizer, scheduler, progress: _Progress, config: TrainConfig
) -> Path:
    """Write step folder atomically (every rank its RNG file, rank 0 the rest); prune old folders."""
    rank, world_size = world()
    final = root / f"step-{progress.step:08d}"
    tmp = _shared_temp_name(final)
    if rank == 0:
        tmp.mkdir(parents=True, mode=0o777 & ~umask())
    _barrier()
    rng_tensors, rng_meta = _rng_state()
    save_file(rng_tensors, str(tmp / f"rng-{rank}.safetensors"), metadata=rng_meta)
    _barrier()
    if rank == 0:
        save_model(unwrap(model), str(tmp / MODEL_FILE))
        opt_tensors, opt_scalars = _optimizer_tensors(optimizer)
        if not progress.done:  # a finished run is never resumed into more steps: its moments are not needed
            save_file(opt_tensors, str(tmp / OPTIMIZER_FILE))
        state = {
            "progress": asdict(progress),
            "optimizer": opt_scalars,
            "scheduler": scheduler.state_dict(),
            "config": asdict(config),
            "world_size": world_size,
            "files": {p.name: _sha256(p) for p in sorted(tmp.iterdir())},
        }
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=1), encoding="utf-8")
        sync_tree(tmp)
        replace_directory(tmp, final)  # an existing folder of that step is swapped out, never missing
        for old in checkpoint_folders(root)[: -config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def _shared_temp_name(final: Path) -> Path:
    """A temporary name unique to this run, chosen by rank 0 and the same on every rank."""
    name = [temp_name(final).name if world()[0] == 0 else None]
    if world()[1] > 1:
        torch.distributed.broadcast_object_list(name, src=0)
    return final.with_name(name[0])


def _read_state(folder: Path) -> dict:
    path = folder / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"{path}: cannot read the checkpoint state ({error}); remove {folder} to resume from an older checkpoint"
        ) from error
    for name, digest in state.get("files", {}).items():
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing from the checkpoint; remove {folder} to resume from an older one")
        if _sha256(file) != digest:
            raise CheckpointError(
                f"{file}: corrupt (sha256 differs from {path}); remove {folder} to resume from an older checkpoint"
            )
    return state


def _check_config(state: dict, config: TrainConfig, folder: Path) -> None:
    saved = state.get("config", {})

    # a field added since the checkpoint was written counts as its default
    def as_saved(value):  # JSON turns tuples (lr_groups) into lists
        return json.loads(json.dumps(value))

    changed = [
        f.name
        for f in fields(config)
        if f.name not in _RESUMABLE_CHANGES
        and as_saved(saved.get(f.name, f.default)) != as_saved(getattr(config, f.name))
    ]
    if changed:
        raise CheckpointError(
            f"{folder / STATE_FILE}: the checkpoint was trained with other settings "
            f"({', '.join(f'{n}={saved.get(n)!r}' for n in changed)}); use a fresh checkpoint_dir"
        )


def _load_checkpoint(folder: Path, model: torch.nn.Module, optimizer, scheduler, config: TrainConfig) -> _Progress:
    state = _read_state(folder)
    _check_config(state, config, folder)
    rank, world_size = world()
    try:
        load_model(unwrap(model), str(folder / MODEL_FILE), device=str(next(model.parameters()).device))
        if not state["progress"].get("done"):
            _restore_optimizer(optimizer, load_file(str(folder / OPTIMIZER_FILE)), state["optimizer"])
    except (SafetensorError, RuntimeError, KeyError, ValueError) as error:
        raise CheckpointError(f"{folder}: cannot restore the model or optimizer ({error})") from error
    scheduler.load_state_dict(state["scheduler"])
    rng_file = folder / f"rng-{rank}.safetensors"
    if rng_file.is_file():
        from safetensors import safe_open

        with safe_open(str(rng_file), "pt") as handle:
            meta = handle.metadata()
        _set_rng_state(load_file(str(rng_file)), meta)
    else:
        warnings.warn(
            f"{rng_file}: no RNG state for rank {rank} (saved with {state['world_size']} processes); "
            "reseeding, so the resumed run is not bit-identical",
            stacklevel=2,
        )
        _seed_everything(config.seed + 1000 * rank + state["progress"]["step"])
    return _Progress(**state["progress"])


def _save_best(root: Path, model: torch.nn.Module) -> None:
    if world()[0] == 0:
        with atomic_path(root / BEST_DIR / MODEL_FILE) as tmp:
            save_model(unwrap(model), str(tmp))
    _barrier()


def _load_best(root: Path, model: torch.nn.Module) -> None:
    path = root / BEST_DIR / MODEL_FILE
    try:
        load_model(unwrap(model), str(path), device=str(next(model.parameters()).device))
    except (OSError, SafetensorError, RuntimeError) as error:
        raise CheckpointError(f"{path}: cannot load the best epoch's weights ({error})") from error


# --- the loop -------------------------------------------------------------------------------


def _reduce_logs(values: dict[str, float]) -> dict[str, float]:
    """Sum per-process weighted values over processes (they are shares of the global mean)."""
    if world()[1] == 1:
        return values
    keys = sorted(values)
    tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64)
    torch.distributed.all_reduce(tensor)
    return dict(zip(keys, tensor.tolist(), strict=True))


def _run_step(model, optimizer, scheduler, batch: Batch, loss_fn: LossFn, config: TrainConfig) -> dict[str, float]:
    """One optimizer step over one global batch; returns the global mean loss and logs."""
    rank, world_size = world()
    total = batch_size_of(batch)
    parts = micro_batches(batch, rank, world_size, config.grad_accumulation)
    device = _device(config)
    logged: dict[str, float] = {}
    for i, part in enumerate(parts):
        share = batch_size_of(part) / total
        # Gradients are all-reduced only after the last micro-batch.
        with nullcontext() if i == len(parts) - 1 or world_size == 1 else model.no_sync():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.bf16):
                loss, logs = loss_fn(model, part)
            # DDP averages gradients over processes; scale so that the result is the global mean.
            (loss.float() * share * world_size).backward()
        for key, value in {"loss": float(loss.detach()), **{k: float(v) for k, v in logs.items()}}.items():
            logged[key] = logged.get(key, 0.0) + value * share
    if config.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return {**_reduce_logs(logged), "lr": scheduler.get_last_lr()[0]}


def _evaluate(model, evaluate: Callable[[torch.nn.Module], float]) -> float:
    rank, world_size = world()
    score = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        bare = unwrap(model)
        bare.eval()
        score[0] = float(evaluate(bare))
        bare.train()
    if world_size > 1:
        torch.distributed.broadcast(score, src=0)
    return float(score[0])


def _epoch_batches(make_batches: MakeBatches, config: TrainConfig, epoch: int) -> Sized:
    batches = make_batches(epoch, np.random.default_rng([config.seed, epoch]))
    if not isinstance(batches, Sized):
        raise TypeError("make_batches must return a sized iterable (len() must work) to schedule the learning rate")
    if len(batches) == 0:
        raise ValueError(f"make_batches({epoch}, rng) returned no batches: nothing to train on")
    return batches


def train(
    model: torch.nn.Module,
    make_batches: MakeBatches,
    loss_fn: LossFn,
    config: TrainConfig,
    checkpoint_dir: str | os.PathLike[str],
    *,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    evaluate: Callable[[torch.nn.Module], float] | None = None,
    resume: bool = True,
) -> TrainResult:
    """Train `model` in place (see the module docstring); resume from `checkpoint_dir` when it holds a run."""
    rank, _ = init_distributed(config.device)
    _check_shared_folder(Path(checkpoint_dir))
    with folder_lock(checkpoint_dir) if rank == 0 else nullcontext():
        return _train(model, make_batches, loss_fn, config, Path(checkpoint_dir), on_log, evaluate, resume)


def against_start(
    model: torch.nn.Module,
    evaluate: Callable[[torch.nn.Module], float] | None,
    run: Callable[[], TrainResult],
    keep_start: bool = True,
    checkpoint_dir: str | os.PathLike[str] | None = None,
) -> tuple[TrainResult, float | None, bool]:
    """(the training's result, the start's score or None, whether the start was kept): see the module docstring."""
    if evaluate is None:
        return run(), None, False
    was_training = model.training
    model.eval()
    start_score = float(evaluate(model))
    model.train(was_training)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()} if keep_start else None
    result = run()
    kept = start is not None and bool(result.dev_scores) and start_score > max(result.dev_scores)
    if kept:
        model.load_state_dict(start)
        if checkpoint_dir is not None:
            _save_best(Path(checkpoint_dir), model)
    return result, start_score, kept


def kept_record(run_name: str, result: TrainResult, start_score: float | None, kept: bool) -> dict[str, object]:
    """Which weights a training kept, as a manifest row: run_name, chosen_epoch (0: the start, else
    the 1-based epoch), start_score (None: the start was not scored) and dev_score (the kept weights')."""
    best = result.dev_scores[result.best_epoch] if result.dev_scores else None
    return {
        "run_name": run_name,
        "chosen_epoch": 0 if kept else result.best_epoch + 1,
        "start_score": None if start_score is None else float(start_score),
        "dev_score": float(start_score)
        if kept and start_score is not None
        else (None if best is None else float(best)),
    }


def _check_shared_folder(root: Path) -> None:
    """Under several processes (nodes), every rank must see rank 0's files in `root` (one shared folder)."""
    rank, world_size = world()
    if world_size == 1:
        return
    name = [temp_name(root / "shared-probe").name if rank == 0 else None]
    torch.distributed.broadcast_object_list(name, src=0)
    probe = root / name[0]
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        probe.touch()
    _barrier()
    blind = torch.tensor([0 if probe.exists() else 1])
    torch.distributed.all_reduce(blind)
    if rank == 0:
        probe.unlink(missing_ok=True)
    if blind.item():
        raise CheckpointError(
            f"{root}: {blind.item()} of {world_size} processes do not see rank 0's files there; "
            "put checkpoint_dir on the data directory every node mounts"
        )


def _train(model, make_batches, loss_fn, config: TrainConfig, root: Path, on_log, evaluate, resume) -> TrainResult:
    started = time.monotonic()
    rank = world()[0]
    device = _device(config)
    model.to(device)
    model.train()
    optimizer = make_optimizer(model, config)
    first = _epoch_batches(make_batches, config, 0)
    per_epoch = len(first)
    total = min(per_epoch * config.epochs, config.max_steps or per_epoch * config.epochs)
    schedule = epoch_decayed(SCHEDULES[config.schedule](total, config.warmup_ratio), per_epoch, config.epoch_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    _seed_everything(config.seed + 1000 * rank)
    newest = latest_checkpoint(root) if resume else None
    progress = _load_checkpoint(newest, model, optimizer, scheduler, config) if newest else _Progress()
    resumed_from, examples_before = progress.step, progress.examples
    if progress.done:
        if progress.dev_scores:
            _load_best(root, model)
        return _result(progress, started, resumed_from, examples_before)
    wrapped = _wrap(model, device, config)
    while not progress.done:
        batches = first if progress.epoch == 0 else _epoch_batches(make_batches, config, progress.epoch)
        _run_epoch(wrapped, optimizer, scheduler, batches, loss_fn, config, root, progress, total, on_log)
        _end_epoch(wrapped, optimizer, scheduler, config, root, progress, total, evaluate)
    if evaluate is not None and progress.best_epoch != progress.epoch - 1:
        _load_best(root, model)
    return _result(progress, started, resumed_from, examples_before)


def _wrap(model: torch.nn.Module, device: torch.device, config: TrainConfig) -> torch.nn.Module:
    if world()[1] == 1:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=ids, find_unused_parameters=config.find_unused_parameters
    )


def _run_epoch(model, optimizer, scheduler, batches, loss_fn, config, root, progress, total, on_log) -> None:
    """Train from the current position to the end of the epoch (or the step cap)."""
    for batch in itertools.islice(iter(batches), progress.batch_in_epoch, None):
        logs = _run_step(model, optimizer, scheduler, batch, loss_fn, config)
        progress.step += 1
        progress.batch_in_epoch += 1
        progress.examples += batch_size_of(batch)
        progress.loss_curve.append(logs["loss"])
        for key, value in logs.items():
            if key not in ("loss", "lr"):
                progress.log_curves.setdefault(key, []).append(value)
        if on_log is not None and world()[0] == 0:
            on_log(progress.step, logs)
        if progress.step >= total:
            return
        at_epoch_end = progress.batch_in_epoch == len(batches)  # _end_epoch checkpoints then
        if config.checkpoint_every and progress.step % config.checkpoint_every == 0 and not at_epoch_end:
            _save_checkpoint(root, model, optimizer, scheduler, progress, config)


def _end_epoch(model, optimizer, scheduler, config, root, progress, total, evaluate) -> None:
    """Evaluate on dev, keep the best weights, and checkpoint the start of the next epoch."""
    if evaluate is not None:
        score = _evaluate(model, evaluate)
        progress.dev_scores.append(score)
        if progress.best_epoch < 0 or score > progress.dev_scores[progress.best_epoch]:
            progress.best_epoch = progress.epoch
            _save_best(root, model)
    else:
        progress.best_epoch = progress.epoch
    progress.epoch += 1
    progress.batch_in_epoch = 0
    progress.done = progress.step >= total or progress.epoch >= config.epochs
    _save_checkpoint(root, model, optimizer, scheduler, progress, config)


def _result(progress: _Progress, started: float, resumed_from: int, examples_before: int) -> TrainResult:
    seconds = time.monotonic() - started
    return TrainResult(
        loss_curve=list(progress.loss_curve),
        log_curves={k: list(v) for k, v in progress.log_curves.items()},
        dev_scores=list(progress.dev_scores),
        best_epoch=progress.best_epoch,
        steps=progress.step,
        seconds=seconds,
        examples_per_s=(progress.examples - examples_before) / max(seconds, 1e-9),
        resumed_from=resumed_from,
    )
