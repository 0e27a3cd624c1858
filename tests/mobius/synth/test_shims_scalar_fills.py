"""A 0-dim CPU tensor as ``masked_fill``'s value (SEW-D's ``XSoftmax``) works on meta tensors."""

from __future__ import annotations

import pytest
import torch

from mobius.synth.shims import ScalarFillsOnMeta

FILL = torch.finfo(torch.float32).min


def _fill(x: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(x > 0, torch.tensor(FILL))


def test_the_meta_kernel_refuses_the_cpu_value():
    with pytest.raises(RuntimeError, match="same device"):
        _fill(torch.zeros(2, 3, device="meta"))


def test_the_value_is_used_as_its_number():
    with ScalarFillsOnMeta():
        assert _fill(torch.zeros(2, 3, device="meta")).shape == (2, 3)
        on_cpu = _fill(torch.tensor([1.0, -1.0]))  # CPU tensors are left alone
    assert on_cpu.tolist() == [FILL, -1.0]
