"""Where a model trains or scores, and in which precision: the one resolver every asset uses.

`resolve_placement(device="auto", bf16=None) -> Placement`
  - device "auto": CUDA when `torch.cuda.is_available()`, else the CPU. Under torchrun (LOCAL_RANK
    set) "cuda" means this process's GPU, `cuda:<LOCAL_RANK>`; in one process it is "cuda" (the
    current GPU, usually 0). Any other value ("cpu", "cuda", "cuda:1", "mps") is used as given.
  - bf16 None (or "auto"): bfloat16 autocast where the device has native bfloat16 arithmetic (a
    CUDA GPU with bf16, i.e. Ampere or newer; a CPU with AVX-512 BF16 or AMX), float32 elsewhere
    (emulated bf16 on an older CPU is slower than fp32). True or False is used as given.
  - `Placement.metadata()` is what a materialization records: device, precision and the GPU's name.

`default_processes(device)`: how many training processes a host runs when the configuration leaves
it open (torchrun's nproc_per_node 0): one per GPU of the host for "cuda", else one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from dagster_ir.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")


AUTO = "auto"
PRECISIONS = ("bf16", "fp32")


@dataclass(frozen=True)
class Placement:
    """A resolved device and precision."""

    device: str  # "cpu", "cuda", "cuda:1", ...
    bf16: bool

    @property
    def precision(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    @property
    def is_cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    def gpu_name(self) -> str:
        """The GPU's name ("" on another device)."""
        if not self.is_cuda:
            return ""
        index = torch.device(self.device).index
        return torch.cuda.get_device_name(torch.cuda.current_device() if index is None else index)

    def metadata(self) -> dict[str, str]:
        """What a materialization records about where it ran."""
        return {"device": self.device, "precision": self.precision, "gpu": self.gpu_name() or "none"}


@cache
def _cpu_native_bf16() -> bool:
    """Whether this CPU has native bfloat16 arithmetic (AVX-512 BF16 or AMX) for oneDNN."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def native_bf16(device: str | torch.device) -> bool:
    """Whether `device` computes in bfloat16 natively (so autocast to it is faster, not slower, than fp32)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if kind == "cpu":
        return _cpu_native_bf16()
    return False


def resolve_device(device: str | None = AUTO) -> str:
    """`device` with "auto" (or None/"") resolved: this process's GPU when CUDA is available, else "cpu"."""
    if device not in (None, "", AUTO):
        torch.device(device)  # a bad name fails here, naming itself
        return str(device)
    if not torch.cuda.is_available():
        return "cpu"
    local_rank = os.environ.get("LOCAL_RANK")
    return f"cuda:{int(local_rank)}" if local_rank is not None else "cuda"


def resolve_bf16(bf16: bool | str | None, device: str) -> bool:
    """`bf16` with None/"auto" resolved for `device` (native bfloat16 there), True/False as given."""
    if bf16 is None or bf16 == AUTO:
        return native_bf16(device)
    if isinstance(bf16, bool):
        return bf16
    raise ValueError(f"bf16 must be true, false or auto, got {bf16!r}")


def default_processes(device: str) -> int:
    """Training processes per host by default for a resolved `device`: one per GPU for "cuda", else 1."""
    return max(1, torch.cuda.device_count()) if device == "cuda" and torch.cuda.is_available() else 1


def resolve_placement(device: str | None = AUTO, bf16: bool | str | None = None) -> Placement:
    """The device and precision a model runs with (see the module docstring)."""
    resolved = resolve_device(device)
    return Placement(resolved, resolve_bf16(bf16, resolved))
