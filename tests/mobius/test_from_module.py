"""``mobius.build_module``: plain ``nn.Module``s through the same trace, patterns, lowering and
packaging as checkpoints, checked against PyTorch; ``examples/build_module.py`` end to end."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import PretrainedConfig

import mobius
from mobius.errors import StrictError, UnsupportedError
from mobius.testing.parity import causal_lm_parity
from mobius.testing.tiny import randomize

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "build_module.py"


def example_module():
    spec = importlib.util.spec_from_file_location("build_module_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Net(torch.nn.Module):
    """A convolution, a norm and a head; a dict out, a 1-D input that keeps its size."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, 5)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, image: torch.Tensor, bias: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.norm(torch.relu(self.conv(image)).mean((2, 3)))
        return {"logits": self.head(x) * self.scale + bias, "features": x}


def test_example_decodes_the_same_tokens_as_pytorch(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "tiny-lm")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    assert json.loads(lines["onnxruntime"]) == json.loads(lines["pytorch"])
    meta = json.loads((tmp_path / "tiny-lm" / "mobius.json").read_text())
    assert meta["task"] == "text-generation" and meta["kv_cache"] is True


def test_example_model_matches_pytorch_with_a_cache(tmp_path):
    example = example_module()
    model = randomize(example.TinyLM().eval())  # every parameter, biases and norm weights too
    out = example.convert(model, tmp_path / "onnx")
    graph = json.loads((out / "mobius.json").read_text())["graphs"]["model.onnx"]
    assert graph["inputs"][3:] == [
        f"past_key_values.{i}.{k}" for i in (0, 1) for k in ("key", "value")
    ]
    assert graph["outputs"][1:] == [f"present.{i}.{k}" for i in (0, 1) for k in ("key", "value")]
    diffs = causal_lm_parity(model, out, PretrainedConfig(vocab_size=256))
    assert diffs["cache"] and diffs["max_diff"] < 1e-4, diffs
    assert "RMSNormalization" in {n.op_type for n in mobius_graph(out)}  # the same components


def mobius_graph(directory: Path):
    import onnx

    return onnx.load(directory / "model.onnx", load_external_data=False).graph.node


def test_own_inputs_and_outputs_with_any_batch(tmp_path):
    torch.manual_seed(0)
    net = randomize(Net().eval())
    before = {k: v.clone() for k, v in net.state_dict().items()}
    package = mobius.build_module(net, (torch.randn(2, 3, 16, 16), torch.randn(5)))
    assert isinstance(package, mobius.ModelPackage)
    out = package.save(tmp_path / "onnx")
    meta = json.loads((out / "mobius.json").read_text())
    assert meta["task"] == "module"
    assert meta["graphs"]["model.onnx"] == {
        "inputs": ["image", "bias"],
        "outputs": ["logits", "features"],
    }
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    image, bias = torch.randn(3, 3, 16, 16), torch.randn(5)  # another batch than traced
    got = session.run(None, {"image": image.numpy(), "bias": bias.numpy()})
    with torch.no_grad():
        expected = net(image, bias)
    for actual, wanted in zip(got, expected.values(), strict=True):
        assert np.abs(actual - wanted.numpy()).max() < 1e-5
    after = net.state_dict()  # the module itself is untouched
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_named_dynamic_axes(tmp_path):
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0).eval()
    axes = {"src": {0: "batch", 1: "sequence_length"}}
    out = mobius.build_module(layer, (torch.randn(2, 6, 16),), dynamic_axes=axes).save(
        tmp_path / "onnx"
    )
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    src = torch.randn(3, 9, 16)
    with torch.no_grad():
        expected = layer(src).numpy()
    assert np.abs(session.run(None, {"src": src.numpy()})[0] - expected).max() < 1e-5


def test_an_op_with_no_lowering_is_refused_as_for_a_checkpoint():
    class Cholesky(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.cholesky(x @ x.transpose(-1, -2) + torch.eye(4))

    with pytest.raises(UnsupportedError) as raised:
        mobius.build_module(Cholesky(), torch.randn(2, 4, 4))
    message = str(raised.value)
    assert message.startswith("no lowering for: aten.linalg_cholesky_ex")
    assert "mobius.explain_module(module, example_inputs)" in message
    report = mobius.explain_module(Cholesky(), torch.randn(2, 4, 4))
    assert report.exit_code == 2


def test_strict_refuses_a_fallback():
    model = example_module().TinyLM().eval()
    ids = torch.zeros(2, 7, dtype=torch.long)
    with pytest.raises(StrictError, match="--strict"):
        mobius.build_module(model, {"input_ids": ids}, task="text-generation", strict=True)


def test_multi_graph_tasks_are_refused():
    with pytest.raises(mobius.MobiusError, match="single-graph task"):
        mobius.build_module(Net(), (torch.randn(2, 3, 8, 8),), task="text2text-generation")


def test_a_task_gives_its_contract(tmp_path):
    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16)
            self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)

        def forward(self, input_ids, attention_mask):
            return self.layer(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)

    encoder = randomize(Encoder().eval())
    ids = torch.randint(0, 50, (2, 6))
    example = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    out = mobius.build_module(encoder, example, task="feature-extraction").save(tmp_path / "o")
    graph = json.loads((out / "mobius.json").read_text())["graphs"]["model.onnx"]
    assert graph == {"inputs": ["input_ids", "attention_mask"], "outputs": ["last_hidden_state"]}
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 50, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0  # a padded batch
    with torch.no_grad():
        expected = encoder(ids, mask).numpy()
    actual = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    keep = mask.bool().numpy()
    assert np.abs(actual - expected)[keep].max() < 1e-4
