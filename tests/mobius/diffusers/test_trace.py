"""Which guards on a video or image size the diffusers trace accepts: one that rules out only
sizes pipelines never give (a height no multiple of 8) leaves the axis dynamic; a Python loop
over frame chunks, which the trace unrolls at the traced count (CogVideoX's VAE), is refused
with the frame axis named, so that the component is retraced with the frame count fixed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mobius.diffusers.tasks import DiffusersTask, vae_decoder_inputs
from mobius.diffusers.trace import export
from mobius.synth.trace import SpecialisedShapeError, _TaskWrapper

TASK = DiffusersTask(
    "vae_decoder",
    lambda cfg: vae_decoder_inputs(cfg, video=True),
    lambda model, x: (model(x["latent_sample"]),),
    ("sample",),
)
ARCH = SimpleNamespace(model_type="Toy", hf_config={"latent_channels": 2})


class ChunkedFrames(torch.nn.Module):
    """Frames two at a time in a Python loop (the odd one with the first pair), each chunk
    scaled by its index, as CogVideoX's VAE decodes with its causal cache."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[2]
        first = 2 + frames % 2
        chunks = [x[:, :, :first]]
        for i in range(1, max(frames // 2, 1)):
            chunks.append(x[:, :, first + 2 * (i - 1) : first + 2 * i] * (i + 1))
        return torch.cat(chunks, 2)


class AlignedOrNot(torch.nn.Module):
    """Another computation for a height or width no multiple of 8, as UNets up-sample."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[3] % 8 != 0 or x.shape[4] % 8 != 0:
            return x * 2
        return x + 1


def _export(model: torch.nn.Module) -> torch.export.ExportedProgram:
    specs = TASK.inputs(ARCH, model)
    wrapper = _TaskWrapper(model, TASK, [s.name for s in specs], None)
    return export(wrapper, specs, ARCH, TASK, torch.float32, "cpu")


def test_frame_chunk_loop_is_refused_with_the_frame_axis():
    with pytest.raises(SpecialisedShapeError, match=r"latent_sample\[2\] != ") as caught:
        _export(ChunkedFrames())
    assert caught.value.axes == {"num_frames"}


def test_height_and_width_guards_off_multiples_of_8_are_accepted():
    program = _export(AlignedOrNot())
    x = torch.randn(1, 2, 3, 16, 48)  # another batch, frame count and resolution
    torch.testing.assert_close(program.module()(x)[0], x + 1, rtol=0, atol=0)


class TiledPast256(torch.nn.Module):
    """Another computation for a width above 256, as MiniMax-H3's VAE tiles larger frames."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[4] > 256:
            return x * 2
        return x + 1


def test_a_bound_at_the_trace_limit_is_kept():
    """A width bounded at 256, the trace's own limit, is kept and checked in the graph
    (``wrapper.length_guards``), not taken for the limit."""
    specs = TASK.inputs(ARCH, None)
    wrapper = _TaskWrapper(TiledPast256(), TASK, [s.name for s in specs], None)
    export(wrapper, specs, ARCH, TASK, torch.float32, "cpu")
    assert [(b.input, b.axis, b.upper) for b in wrapper.length_guards] == [
        ("latent_sample", 4, 256)
    ]
