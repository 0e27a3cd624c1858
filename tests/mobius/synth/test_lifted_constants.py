"""Constants from the CPU re-trace are matched to the meta trace's by place, not by name."""

from __future__ import annotations

import torch

from mobius.synth.lifted_constants import match_constants


class _Constants(torch.nn.Module):
    def __init__(self, extra_first: bool) -> None:
        super().__init__()
        self.extra_first = extra_first

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.extra_first:  # one more constant at the top shifts every later name
            x = x + torch.tensor(5.0, device=x.device)
        scale = torch.tensor([1.0, 2.0], device=x.device)
        shift = torch.tensor([3.0, 4.0, 5.0], device=x.device)
        return x[..., :2] * scale, x[..., :3] - shift


def test_constants_match_by_place_when_names_shift():
    meta = torch.export.export(_Constants(False), (torch.empty(2, 4, device="meta"),))
    cpu = torch.export.export(_Constants(True), (torch.zeros(2, 4),))
    assert len(cpu.constants) == 3 and len(meta.constants) == 2  # the names shifted
    values = match_constants(meta, cpu)
    by_shape = {tuple(v.shape): v.tolist() for v in values.values()}
    assert len(values) == 2
    assert by_shape == {(2,): [1.0, 2.0], (3,): [3.0, 4.0, 5.0]}
    for name, value in values.items():  # each meta name gets its own constant's value
        assert meta.constants[name].shape == value.shape
