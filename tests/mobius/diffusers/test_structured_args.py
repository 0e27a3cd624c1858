"""Forward arguments that are Python structures of tensors (``mobius/diffusers/structured_args.py``)
and bare list outputs: member ``i`` of a list is the input ``name.{i}`` (a pair's members
``name.{i}.{j}``), a dict's entries are inputs under their keys, a bare list output's members are
``output.{i}``. Converted with the CLI and matching PyTorch at atol 1e-4 at two size sets."""

from __future__ import annotations

import json

import torch

from mobius.diffusers import structured_args
from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture, model_class
from mobius.testing.diffusers_configs import ALL_CONFIGS
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def _graph(out):
    return next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))


def _config(label: str) -> dict:
    _, name, kwargs = next(c for c in ALL_CONFIGS if c[0] == label)
    return {"_class_name": name, **kwargs}


def test_list_members_are_inputs_by_index(tmp_path):
    """Bria FIBO: one text-encoder tensor per transformer block (1 double + 1 single here)."""
    model, out = convert("BriaFiboTransformer2DModel", tmp_path)
    inputs = _graph(out)["inputs"]
    assert [n for n in inputs if n.startswith("text_encoder_layers")] == [
        "text_encoder_layers.0", "text_encoder_layers.1",
    ]  # fmt: skip
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs


def test_index_inputs_and_dict_entries(tmp_path):
    """ControlNet Union: one control image (a list of one), its mode index and scale, SDXL's
    added conditions (a dict) under their keys; the ControlNet's outputs."""
    model, out = convert("ControlNetUnionModel", tmp_path)
    graph = _graph(out)
    assert graph["inputs"] == [
        "sample", "timestep", "encoder_hidden_states", "controlnet_cond.0", "control_type",
        "control_type_idx", "conditioning_scale", "text_embeds", "time_ids",
    ]  # fmt: skip
    assert graph["outputs"][-1] == "mid_block_res_sample"
    diffs = max_diffs(model, out)
    assert max(diffs.values()) < ATOL, diffs


def test_pairs_are_named_and_rebuilt():
    """T5FilmDecoder's (encoding, mask) pairs: named name.{i}.{j}, each encoding a length of its
    own, and rebuilt as the list of tuples the forward takes."""
    arch = architecture(_config("T5FilmDecoder"))
    (task,) = component_tasks("T5FilmDecoder")
    specs = {s.name: s for s in task.inputs(arch, None)}
    pairs = [n for n in specs if n.startswith("encodings_and_masks")]
    assert pairs == [f"encodings_and_masks.{i}.{j}" for i in (0, 1) for j in (0, 1)]
    assert specs["encodings_and_masks.0.1"].dtype == torch.bool
    assert specs["encodings_and_masks.0.0"].dims[1] != specs["encodings_and_masks.1.0"].dims[1]
    x = {name: torch.zeros(1) for name in specs}
    built = structured_args.assemble(model_class("T5FilmDecoder"), x)
    assert set(built) == {"encodings_and_masks", "decoder_input_tokens", "decoder_noise_time"}
    assert [len(pair) for pair in built["encodings_and_masks"]] == [2, 2]
    assert built["encodings_and_masks"][1][0] is x["encodings_and_masks.1.0"]


def test_bare_list_output_is_named_by_index(tmp_path):
    """T2I-Adapter returns a bare list of features, one per level: output.{i}."""
    model, out = convert("T2IAdapter", tmp_path)
    graph = _graph(out)
    assert graph["inputs"] == ["x"]
    assert graph["outputs"] == ["output.0", "output.1", "output.2"]
    diffs = max_diffs(model, out)
    assert max(diffs.values()) < ATOL, diffs
