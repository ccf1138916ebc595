import sys
import types

import pytest

from dagster_ir.lazy import inference_mode, lazy_module


def test_a_lazy_module_imports_at_the_first_attribute_read(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    stand_in = lazy_module("colorsys")
    assert "colorsys" not in sys.modules
    assert "not loaded" in repr(stand_in)
    assert stand_in.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules
    assert stand_in.rgb_to_hsv is sys.modules["colorsys"].rgb_to_hsv
    assert "loaded" in repr(stand_in) and "not loaded" not in repr(stand_in)


def test_a_lazy_submodule_and_a_missing_attribute():
    functional = lazy_module("json.decoder")
    assert functional.JSONDecodeError.__name__ == "JSONDecodeError"
    with pytest.raises(AttributeError, match="no_such_name"):
        functional.no_such_name  # noqa: B018


def test_a_missing_module_fails_at_first_use_naming_it():
    stand_in = lazy_module("no_such_module_dagster_ir")
    assert isinstance(stand_in, types.ModuleType)
    with pytest.raises(ModuleNotFoundError, match="no_such_module_dagster_ir"):
        stand_in.anything  # noqa: B018


def test_inference_mode_runs_the_function_without_autograd():
    import torch

    weight = torch.ones(2, requires_grad=True)

    @inference_mode
    def double(x):
        """doc"""
        return weight * x

    out = double(torch.ones(2))
    assert out.is_inference() and not out.requires_grad
    assert double.__doc__ == "doc" and double.__name__ == "double"
    assert (weight * torch.ones(2)).requires_grad  # outside, autograd as before
