"""AnyFlow FAR (``mobius/diffusers/far_chunks.py``, ``overrides/anyflow_far.py``): the dense
chunk-causal mask is diffusers' ``mask_mod``; a chunk's denoising step reads the cache its
pipeline writes (compressed and full, from buffers longer than what is read) as PyTorch does; a
cache step's outputs are the next step's cache inputs. The whole class, every graph at both size
sets, is the sweep's (``benchmarks/results/diffusers_coverage_anyflow_far.json``)."""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch
from diffusers import AnyFlowFARTransformer3DModel
from diffusers.models.transformers import transformer_anyflow_far as far
from torch.nn.attention.flex_attention import create_mask

from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from mobius.diffusers.overrides.anyflow_far import far_dense_mask
from mobius.diffusers.pipeline import _model_package
from mobius.testing.diffusers_configs import randomize_scaled
from mobius.testing.diffusers_configs_anyflow_far import FAR
from mobius.testing.diffusers_tiny import save_pretrained
from tests.mobius.diffusers.parity import ATOL

NAME = "AnyFlowFARTransformer3DModel"
PATCH, COMPRESSED = (1, 2, 2), (1, 4, 4)


@pytest.mark.parametrize(
    ("chunks", "limit", "mode", "clean"),
    [
        ([1, 2, 2, 1], 2, "train", False),
        ([1, 2, 2, 1], 2, "cache", False),
        ([2, 1, 3], 3, "train", True),
        ([1, 3, 1, 2], 2, "train", True),
    ],
)
def test_dense_mask_is_mask_mod(monkeypatch, chunks, limit, mode, clean):
    """Every real token's row and column of the ``BlockMask``'s mask (8 x 12 latents)."""
    dense = {}

    def capture(far_cfg, has_clean, device):
        dense["mask"] = far_dense_mask(far_cfg, has_clean, device)
        return original(far_cfg, has_clean, device)

    original = far._build_far_block_mask_from_far_cfg
    monkeypatch.setattr(far, "_build_far_block_mask_from_far_cfg", capture)
    block_mask = far._build_anyflow_far_causal_block_mask(
        chunks, 8, 12, PATCH, COMPRESSED, limit, mode=mode, has_clean_context=clean
    )
    tokens = dense["mask"].shape[0]
    length = block_mask.seq_lengths[0]
    expected = create_mask(block_mask.mask_mod, None, None, length, length, device="cpu")
    assert torch.equal(dense["mask"], expected[0, 0, :tokens, :tokens])
    assert not expected[0, 0, tokens:].any()  # the rest is the padding, masked out


# three one-frame chunks, full_chunk_limit 2: the cache step over two chunks writes a compressed
# and a full cache, and the third chunk's step reads both
CONFIG = FAR | {"chunk_partition": (1, 1, 1), "num_layers": 1}
STEP = "transformer_chunk_2"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("anyflow_far")
    model = randomize_scaled(AnyFlowFARTransformer3DModel(**CONFIG), 0).eval()
    save_pretrained(model, root / "model")
    package = _model_package(root / "model", torch.float32, "f32", True, None, (STEP,))
    package.save(root / "onnx")
    return model, ort.InferenceSession(str(root / "onnx" / "model.onnx"))


def test_cache_step_outputs_are_the_next_steps_cache_inputs():
    arch = architecture({"_class_name": NAME, **CONFIG})
    graphs = {t.name: t for t in component_tasks(NAME) if t.supports(arch)}
    assert list(graphs) == ["transformer", *(f"transformer_chunk_{k}" for k in range(3)),
                            "transformer_cache_1", "transformer_cache_2"]  # fmt: skip
    written = graphs["transformer_cache_2"].outputs(arch)
    assert written == ["out_kv_cache.0.full_cache", "out_kv_cache.0.compressed_cache"]
    read = [s.name for s in graphs[STEP].inputs(arch, None) if s.name.startswith("kv_cache.")]
    assert read == [name.removeprefix("out_") for name in written]


def test_chunk_step_reading_the_pipelines_cache_is_pytorchs(converted):
    """diffusers' cache step over chunks 0 and 1 (in place, on buffers sized as its pipeline
    sizes them), then chunk 2's step in PyTorch and on the graph, at 16 x 24 latents and batch 2
    (the pipeline's classifier-free guidance)."""
    model, session = converted
    gen = torch.Generator().manual_seed(0)
    batch, height, width = 2, 16, 24
    clean = torch.randn(batch, 2, 4, height, width, generator=gen)
    noisy = torch.randn(batch, 1, 4, height, width, generator=gen)
    text = torch.randn(batch, 5, 12, generator=gen)
    t, r = torch.full((batch, 1), 700.0), torch.full((batch, 1), 300.0)
    lengths = {"full_cache": 2 * 1 * 96, "compressed_cache": 2 * 1 * 24}  # as its pipeline's
    cache = {0: {k: torch.zeros(2, batch, 2, n, 8) for k, n in lengths.items()}}
    with torch.no_grad():
        zeros = torch.zeros(batch, 2)
        model(clean, zeros, zeros, text, [1, 1], kv_cache=cache,
              kv_cache_flag={"num_cached_chunks": 1, "is_cache_step": True})  # fmt: skip
        expected = model(noisy, t, r, text, [1, 1, 1], kv_cache=cache,
                         kv_cache_flag={"num_cached_chunks": 2, "is_cache_step": False}).sample  # fmt: skip
    feed = {"hidden_states": noisy, "timestep": t, "r_timestep": r, "encoder_hidden_states": text}
    feed |= {f"kv_cache.0.{kind}": value for kind, value in cache[0].items()}
    (got,) = session.run(None, {k: v.numpy() for k, v in feed.items()})
    assert got.shape == tuple(expected.shape) == (batch, 1, 4, height, width)
    assert abs(got - expected.numpy()).max() < ATOL
