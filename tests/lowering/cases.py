"""What the lowering tests share: wrap a function as a module, build parametrized cases."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from mobius.testing.lowering import check_lowering

BS = {0: "b", 1: "s"}  # the usual dynamic axes: batch and sequence


class Fn(torch.nn.Module):
    """A module whose forward is ``fn``."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def case(
    name: str,
    fn: Callable | torch.nn.Module,
    args: Sequence[torch.Tensor],
    dynamic: Sequence[dict[int, str]] | None = None,
    other: Sequence[torch.Tensor] | None = None,
    marks=(),
):
    """One ``pytest.param``: ``fn`` run on ``args`` (then on ``other``) with ``dynamic`` axes."""
    return pytest.param(fn, list(args), dynamic, other, id=name, marks=marks)


def run(fn, args, dynamic, other, atol: float = 1e-5) -> None:
    module = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    check_lowering(module.eval(), args, dynamic, other, atol=atol)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def randint(low: int, high: int, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, dtype=dtype)
