"""mobius.weights: the non-finite check and the byte-copy path for checkpoint tensors."""

from __future__ import annotations

import pytest
import torch

from mobius.weights import _all_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_all_finite_finds_nan_and_inf_anywhere(dtype):
    data = torch.randn(3, 1000).to(dtype)
    assert _all_finite(data)
    for bad in (float("nan"), float("inf"), float("-inf")):
        for index in (0, 1234, 2999):
            poisoned = data.clone().reshape(-1)
            poisoned[index] = bad
            assert not _all_finite(poisoned.reshape(3, 1000), chunk=100)


def test_all_finite_when_the_sum_overflows_but_every_value_is_finite():
    big = torch.full((8,), torch.finfo(torch.float16).max, dtype=torch.float16)
    assert not bool(torch.isfinite(big.sum()))  # the fast path cannot decide: falls back
    assert _all_finite(big, chunk=3)
    big[5] = float("inf")
    assert not _all_finite(big, chunk=3)


def test_all_finite_on_empty_and_scalar():
    assert _all_finite(torch.empty(0))
    assert _all_finite(torch.tensor(1.5))
    assert not _all_finite(torch.tensor(float("nan")))
