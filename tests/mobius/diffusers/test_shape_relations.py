"""Guards that relate two input sizes: one the contract does not declare (Python's ``max`` of
three axes picks one at trace) is found, named by the contract's inputs, and checked in the graph;
one the contract declares (a joint sequence is the prompt then the patches) is not reported."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mobius.diffusers.shape_relations import relations, undeclared_relations
from mobius.diffusers.tasks import (
    IMAGE_SEQUENCE,
    TEXT_AND_IMAGE,
    DiffusersTask,
    vae_decoder_inputs,
)
from mobius.diffusers.trace import export
from mobius.synth.chain import length_bound_fallback
from mobius.synth.trace import _TaskWrapper
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

ARCH = SimpleNamespace(model_type="Toy", hf_config={"latent_channels": 2})
VIDEO = DiffusersTask(
    "vae_decoder",
    lambda cfg: vae_decoder_inputs(cfg, video=True),
    lambda model, x: (model(x["latent_sample"]),),
    ("sample",),
)


class TableOfTheLongestAxis(torch.nn.Module):
    """One position table over ``max(frames, rows, cols)`` cut for each axis, as diffusers'
    ``sliding_tile_mask``: the trace keeps the table as long as the frames."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames, rows, cols = x.shape[2], x.shape[3] // 8, x.shape[4] // 8
        table = torch.arange(max(frames, rows, cols), dtype=x.dtype)
        return x + table[:frames].sum() + table[:rows].sum() + table[:cols].sum()


class JointSequence(torch.nn.Module):
    """The prompt's tokens then the patches, added to a joint sequence of their total length."""

    def forward(self, text: torch.Tensor, image: torch.Tensor, joint: torch.Tensor) -> torch.Tensor:
        return torch.cat([text, image], 1) + joint


JOINT = DiffusersTask(
    "transformer",
    lambda cfg: [
        TensorSpec("encoder_hidden_states", None, (BATCH, SEQUENCE, 4)),
        TensorSpec("hidden_states", None, (BATCH, IMAGE_SEQUENCE, 4)),
        TensorSpec("joint", None, (BATCH, TEXT_AND_IMAGE, 4)),
    ],
    lambda model, x: (model(x["encoder_hidden_states"], x["hidden_states"], x["joint"]),),
    ("out",),
)


def _wrapped(model: torch.nn.Module, task: DiffusersTask) -> tuple[_TaskWrapper, list]:
    specs = task.inputs(ARCH, model)
    return _TaskWrapper(model, task, [s.name for s in specs], None), specs


def test_a_relation_from_max_is_named_and_checked_in_the_graph():
    wrapper, specs = _wrapped(TableOfTheLongestAxis(), VIDEO)
    export(wrapper, specs, ARCH, VIDEO, torch.float32, "cpu")
    assert [str(g) for g in wrapper.length_guards] == [
        "(latent_sample[3]//8) <= latent_sample[2]",
        "(latent_sample[4]//8) <= latent_sample[2]",
    ]
    inside = torch.randn(1, 2, 6, 32, 40)  # 6 frames, 4 x 5 blocks
    torch.testing.assert_close(wrapper(inside)[0], TableOfTheLongestAxis()(inside))
    with pytest.raises(IndexError):  # 2 frames of 4 x 5 blocks: the table is too short
        wrapper(torch.randn(1, 2, 2, 32, 40))
    reason = length_bound_fallback(SimpleNamespace(length_bounds=wrapper.length_guards)).reason
    assert "relation between input sizes" in reason
    assert "(latent_sample[3]//8) <= latent_sample[2]" in reason


def test_a_relation_the_contract_declares_is_not_reported():
    wrapper, specs = _wrapped(JointSequence(), JOINT)
    program = export(wrapper, specs, ARCH, JOINT, torch.float32, "cpu")
    assert "Eq(joint[1], encoder_hidden_states[1] + hidden_states[1])" in [
        str(expr) for expr, _ in relations(program, specs)
    ]
    assert undeclared_relations(program, specs, ARCH.hf_config) == []
    assert wrapper.length_guards == []


class FramesThroughUpsampler(torch.nn.Module):
    """Frames folded into the batch through diffusers' ``Upsample2D``, as video UNets run it:
    its ``contiguous()`` from a batch of 64 on bounds batch times frames, a layout choice."""

    def __init__(self) -> None:
        super().__init__()
        from diffusers.models.upsampling import Upsample2D

        self.up = Upsample2D(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, frames, height, width = x.shape
        folded = x.permute(0, 2, 1, 3, 4).reshape(batch * frames, channels, height, width)
        return self.up(folded)


def test_the_upsamplers_folded_batch_bound_is_no_restriction():
    wrapper, specs = _wrapped(FramesThroughUpsampler(), VIDEO)
    program = export(wrapper, specs, ARCH, VIDEO, torch.float32, "cpu")
    assert "latent_sample[0]*latent_sample[2] < 64" in [
        str(expr) for expr, _ in relations(program, specs)
    ]
    assert wrapper.length_guards == []
