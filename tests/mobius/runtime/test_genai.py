"""genai_config.json: written beside causal LMs whose cache genai drives, and genai generates HF's tokens.

Tiny random checkpoints get the tokenizer of ``examples/tiny-llama`` (a byte-level BPE of 512
tokens), because onnxruntime-genai loads its tokenizer from the model directory. Greedy tokens
from ``onnxruntime_genai`` and from plain onnxruntime must equal HF ``generate``'s, stopping at the
same end-of-sequence token.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx_ir as ir
import pytest
import torch

import mobius
from mobius.runtime.causal_lm import OnnxCausalLM
from mobius.runtime.genai import (
    GENAI_CONFIG_FILE,
    NotDrivable,
    cache_geometry,
    genai_files,
    genai_model_type,
)
from mobius.runtime.generate import genai_tokens
from mobius.testing.tiny import make_checkpoint

EXAMPLE = Path(__file__).parents[3] / "examples" / "tiny-llama"
TOKENS = {"vocab_size": 512, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}
PROMPT = "The quick brown fox jumps over the lazy dog, twice."  # longer than the windows below
NEW_TOKENS = 24
# model type -> (genai model.type, config overrides): named types, sliding windows (mistral, and
# gemma3_text alternating sliding and full layers), a type genai only knows as "decoder" (gpt2,
# which genai would run as its own GPT-2 model with a combined past), and a cache the trace carries
# (bloom: hand-written attention)
TYPES = {
    "llama": ("llama", {}),
    "qwen2": ("qwen2", {}),
    "mistral": ("mistral", {}),
    "gemma3_text": ("gemma3_text", {}),
    "gpt2": ("decoder", {}),
    "bloom": ("decoder", {}),
}


def tiny_with_tokenizer(model_type: str, directory: Path, **overrides):
    """A tiny random checkpoint of ``model_type`` with the example's tokenizer files."""
    model, config = make_checkpoint(model_type, directory, **TOKENS, **overrides)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(EXAMPLE / name, directory / name)
    return model, config


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """model type -> (onnx directory, HF model), built once for this module."""
    root = tmp_path_factory.mktemp("genai")
    done: dict[str, tuple[Path, torch.nn.Module]] = {}

    def get(model_type: str):
        if model_type not in done:
            checkpoint = root / model_type
            model, _ = tiny_with_tokenizer(model_type, checkpoint, **TYPES[model_type][1])
            done[model_type] = (mobius.build(checkpoint).save(root / f"{model_type}-onnx"), model)
        return done[model_type]

    return get


def prompt_ids() -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(EXAMPLE)(PROMPT)["input_ids"]


def hf_tokens(model: torch.nn.Module, ids: list[int]) -> list[int]:
    """HF greedy tokens with the checkpoint's own generation config (stops at its EOS)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=3
        )
    return out[0, len(ids) :].tolist()


@pytest.mark.parametrize("model_type", list(TYPES))
def test_genai_config_describes_the_graph(converted, model_type):
    directory, model = converted(model_type)
    config = json.loads((directory / GENAI_CONFIG_FILE).read_text())
    decoder = config["model"]["decoder"]
    text = model.config
    assert config["model"]["type"] == TYPES[model_type][0] == genai_model_type(model_type)
    assert decoder["num_hidden_layers"] == text.num_hidden_layers
    assert decoder["num_attention_heads"] == text.num_attention_heads
    kv = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    assert decoder["num_key_value_heads"] == kv
    assert decoder["inputs"]["position_ids"] == "position_ids"
    assert decoder["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert decoder["outputs"]["present_value_names"] == "present.%d.value"
    assert (config["model"]["bos_token_id"], config["model"]["eos_token_id"]) == (1, 2)
    assert config["model"]["pad_token_id"] == 3
    assert config["search"]["do_sample"] is False
    assert config["search"]["past_present_share_buffer"] is False


@pytest.mark.parametrize("model_type", list(TYPES))
def test_genai_greedy_equals_hf(converted, model_type):
    directory, model = converted(model_type)
    ids = prompt_ids()
    expected = hf_tokens(model, ids)
    assert list(genai_tokens(directory, ids, NEW_TOKENS)) == expected


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text"])
def test_onnxruntime_stream_equals_hf(converted, model_type):
    directory, model = converted(model_type)
    ids = prompt_ids()
    expected = hf_tokens(model, ids)
    assert list(OnnxCausalLM(directory).stream(ids, NEW_TOKENS, stop={2})) == expected


def test_generation_config_search_defaults(tmp_path):
    checkpoint = tmp_path / "ckpt"
    tiny_with_tokenizer("llama", checkpoint)
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    generation.update(do_sample=True, temperature=0.6, top_p=0.9, eos_token_id=[2, 5])
    (checkpoint / "generation_config.json").write_text(json.dumps(generation))
    config = json.loads(
        mobius.build(checkpoint, weights=False).texts[GENAI_CONFIG_FILE]  # graph only: fast
    )
    assert config["search"]["do_sample"] is True
    assert config["search"]["temperature"] == 0.6
    assert config["search"]["top_p"] == 0.9
    assert config["model"]["eos_token_id"] == [2, 5]
    assert config["model"]["context_length"] == config["search"]["max_length"] == 2048


def graph_with_inputs(shapes: dict[str, list]) -> ir.Model:
    """An empty graph with only these float inputs (what genai_config reads of a graph)."""
    inputs = [
        ir.Value(name=name, shape=ir.Shape(shape), type=ir.TensorType(ir.DataType.FLOAT))
        for name, shape in shapes.items()
    ]
    return ir.Model(ir.Graph(inputs=inputs, outputs=[], nodes=[], name="g"), ir_version=10)


def cache(layers: int, key: list, value: list, **extra: list) -> dict[str, list]:
    shapes = {"input_ids": ["batch", "sequence"]}
    for i in range(layers):
        shapes |= {f"past_key_values.{i}.key": key, f"past_key_values.{i}.value": value}
        shapes |= {f"past_key_values.{i}.{kind}": shape for kind, shape in extra.items()}
    return shapes


def test_cache_geometry_reads_the_graph():
    shapes = cache(3, ["batch", 2, "past", 16], ["batch", 2, "past", 16])
    assert cache_geometry(graph_with_inputs(shapes)) == (3, 2, 16)


@pytest.mark.parametrize(
    ("shapes", "reason"),
    [
        (  # mamba2-style: a recurrent state beside (or instead of) keys and values
            cache(2, ["batch", 2, "past", 16], ["batch", 2, "past", 16], recurrent_state=[1, 2]),
            "the cache also holds recurrent_state states",
        ),
        (  # MLA: keys carry the rotary part, values do not
            cache(2, ["batch", 4, "past", 24], ["batch", 4, "past", 16]),
            "differ in shape",
        ),
        ({"input_ids": ["batch", "sequence"]}, "no key/value cache"),
    ],
)
def test_caches_genai_cannot_drive_get_no_config(shapes, reason, caplog):
    with pytest.raises(NotDrivable, match=reason):
        cache_geometry(graph_with_inputs(shapes))
    with caplog.at_level("INFO", logger="mobius"):
        assert genai_files(graph_with_inputs(shapes), None, Path(".")) == {}
    assert f"no {GENAI_CONFIG_FILE}: " in caplog.text and reason in caplog.text
