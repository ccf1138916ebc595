"""Heavy modules imported on first use, so that importing the project stays fast.

`lazy_module("torch")` returns a stand-in for the module: the first attribute read imports it
(`importlib.import_module`, the ordinary import) and every read after that is the module's own
attribute. A module that needs torch only inside its functions writes

    torch = lazy_module("torch")
    F = lazy_module("torch.nn.functional")

in place of `import torch` / `import torch.nn.functional as F`, and importing it costs nothing
until a function runs. `dagster-ir` imports every asset module to build the definitions (each
command, each run): torch, SciPy, gensim and matplotlib there cost about 5 CPU-seconds at every start.
A module that subclasses a torch class at its top level cannot be lazy; its importers import it
where they use it; `@inference_mode` stands for `@torch.inference_mode()` in a lazy module.
`tests/assets/test_import_time.py` checks that the definitions import none of them.
"""

from __future__ import annotations

import functools
import importlib
import types


class LazyModule(types.ModuleType):
    """A module imported at the first read of one of its attributes."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = None

    def _load(self) -> types.ModuleType:
        module = self.__dict__["_lazy_target"]
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__["_lazy_target"] = module
        return module

    def __getattr__(self, name: str):
        return getattr(self._load(), name)

    def __dir__(self) -> list[str]:
        return dir(self._load())

    def __repr__(self) -> str:
        state = "loaded" if self.__dict__["_lazy_target"] is not None else "not loaded"
        return f"<lazy module {self.__name__!r} ({state})>"


def lazy_module(name: str) -> types.ModuleType:
    """A stand-in for module `name` that imports it at the first attribute read."""
    return LazyModule(name)


def inference_mode(fn):
    """`@torch.inference_mode()` for a module that imports torch lazily: torch is imported at the first call."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import torch

        with torch.inference_mode():
            return fn(*args, **kwargs)

    return wrapper
