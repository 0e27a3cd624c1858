"""Image features placed by ``image_embeds_position_mask`` (``tasks/vlm_position_mask.py``):
Kosmos-2.5, whose config names no image token, whose text model numbers positions from
``padding_idx + 1`` and adds a segment embedding chosen by the mask at every position.

The embedding graph takes the mask under its HF name and places the features at its positions;
the decoder takes it too (the segments) and adds the position offset itself; against HF's forward
on a left-padded batch of two with two images in the first row (``testing/vlm_position_mask``)."""

from __future__ import annotations

import json

import pytest

import mobius
from mobius.tasks.vlm_position_mask import NAME
from mobius.testing.vlm import tiny_vlm, vlm_parity

ATOL = 1e-4


@pytest.fixture(scope="module")
def kosmos(tmp_path_factory):
    work = tmp_path_factory.mktemp("kosmos")
    model, _ = tiny_vlm("kosmos-2.5", work / "hf")
    return model, mobius.build(work / "hf").save(work / "onnx")


def test_graphs_take_the_mask_by_its_hf_name(kosmos):
    _, out = kosmos
    manifest = json.loads((out / "mobius.json").read_text())
    graphs = {name.removesuffix(".onnx"): io for name, io in manifest["graphs"].items()}
    assert NAME in graphs["embedding"]["inputs"]
    assert NAME in graphs["decoder_model"]["inputs"]  # its segment embedding
    assert manifest["image_token_id"] is None
    assert manifest["image_placement"] == "position-mask"


def test_matches_hf(kosmos):
    model, out = kosmos
    result = vlm_parity(model, out, new_tokens=4, images=2)
    diffs = [result[k] for k in result if k.endswith("_diff")]
    assert max(diffs) <= ATOL, result
    assert result["tokens_equal"]
