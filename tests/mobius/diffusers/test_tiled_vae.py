"""AutoencoderKLAllegro's tiled decoding (``mobius/diffusers/tiled_vae.py``,
``overrides/allegro.py``): the decoder graph, made for two tiles along the columns with the
batch dynamic, matches PyTorch with tiling on at batch 2 (diffusers decodes a batch row by
row: slicing on). One graph, traced and emitted once: the encoder's tiled loop is the
same one (the sweep checks both graphs at batches 3 and 1 against PyTorch)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch

from mobius.diffusers.components import diffusers_architecture, emit_graph, prepare_graph
from mobius.diffusers.tiled_vae import tile_grid_sizes, tiled_vae_tasks
from mobius.sources.resolve import resolve
from mobius.testing.diffusers_configs import randomize_scaled
from mobius.testing.diffusers_configs_allegro import ALLEGRO
from mobius.testing.diffusers_tiny import save_pretrained
from mobius.verification.diffusers_feeds import SIZE_SETS, feeds, torch_outputs

NAME = "AutoencoderKLAllegro"


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    import diffusers

    root = tmp_path_factory.mktemp("allegro")
    model = randomize_scaled(getattr(diffusers, NAME)(**ALLEGRO), 0).eval()
    save_pretrained(model, root / "model")
    source = resolve(str(root / "model"))
    arch = diffusers_architecture(source)
    task = tiled_vae_tasks(type(model))[1]
    graph, _ = emit_graph(prepare_graph(source, arch, task, torch.float32), weights=True, src="")
    ir.save(graph, root / "model.onnx")
    return model, arch, task, ort.InferenceSession(str(root / "model.onnx"))


def test_grid_is_two_column_tiles():
    video, latent = tile_grid_sizes({"_class_name": NAME, **ALLEGRO})
    # kernel 24 x 128 x 128, column stride 128 - 80: two tiles overlap by 80 columns
    assert video == {"num_frames": 24, "height": 128, "width": 176}
    assert latent == {"num_frames": 6, "height": 64, "width": 88}


def test_tiled_decoder_matches_pytorch_row_by_row(decoder):
    model, arch, task, session = decoder
    assert session.get_inputs()[0].shape[1:] == [4, 6, 64, 88]
    assert isinstance(session.get_inputs()[0].shape[0], str)  # the batch stays dynamic
    inputs = feeds(task, arch, session, seed=1, run_sizes=SIZE_SETS[1] | {"batch": 2})
    with torch.no_grad():  # diffusers' tiled decoding, each row alone (slicing)
        (expected,) = (t.numpy() for t in torch_outputs(task, model, inputs))
    (got,) = session.run(None, {k: v.numpy() for k, v in inputs.items()})
    assert got.shape == expected.shape == (2, 24, 3, 128, 176)  # frames before channels
    assert float(np.abs(got - expected).max()) < 1e-4
    assert model.use_tiling and model.use_slicing  # untiled, diffusers raises
