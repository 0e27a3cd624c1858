"""``examples/multimodal_generation.py`` captions an image through the three graphs of a tiny
LLaVA (onnxruntime, numpy and the HF processor only) and writes HF ``generate``'s greedy tokens."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mobius.testing.vlm import hf_generate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multimodal_generation.py"


def _example():
    spec = importlib.util.spec_from_file_location("multimodal_generation", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_caption_equals_pytorch_generate(tiny_llava_vlm, capsys):
    _, model, processor, out = tiny_llava_vlm
    example = _example()
    image = example.synthetic_image()
    tokens, text = example.caption(out, image, max_new_tokens=12)
    inputs = processor(text=example.DEFAULT_PROMPT, images=image, return_tensors="pt")
    expected, _ = hf_generate(model, dict(inputs), 12)
    assert tokens == expected[0].tolist()
    assert text == processor.tokenizer.decode(tokens, skip_special_tokens=True)
    example.main([str(out), "--max-new-tokens", "3"])  # the command line prints the caption
    printed = capsys.readouterr().out
    assert printed.startswith(example.DEFAULT_PROMPT) and f"tokens: {tokens[:3]}" in printed
