"""SmolLM2-135M with PEFT LoRA adapters, the checks too long for the test suite: the int4 base
(``--lora-inputs --precision int4``: MatMulNBits, the LoRA path float) with a float adapter,
top-1 agreement with HF PEFT's ``PeftModel`` against that of the int4 base alone with HF, on two
left-padded English texts; and the plain build's own error (no adapter) beside the
``--lora-inputs`` graph's. Writes benchmarks/results/lora_smollm2.json.

    python benchmarks/lora_smollm2.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results" / "lora_smollm2.json"
ADAPTERS = {
    # a fine-tune-sized delta: a small fraction of the weights
    "mild": {"target_modules": ["q_proj", "v_proj"], "r": 8, "lora_alpha": 16, "std": 0.02},
    "first": {
        "target_modules": ["q_proj", "v_proj", "down_proj"],
        "r": 8,
        "lora_alpha": 16,
        "std": 0.05,
    },
    "all_linear_rslora": {
        "target_modules": "all-linear",
        "r": 16,
        "lora_alpha": 16,
        "use_rslora": True,
        "std": 0.02,
    },
}
TEXTS = [
    "The capital of France is Paris, and the capital of Germany is Berlin. Both cities are "
    "known for their museums, their food and their long history. Millions of visitors come "
    "every year to see the old buildings, walk along the rivers and sit in the cafes. In the "
    "evening the streets fill with people who eat late and talk about art, music and politics.",
    "Once upon a time, a little girl lived in a village near the forest. Every morning she "
    "walked to the river to fetch water for her grandmother. One day she met a fox who asked "
    "her where she was going. She told him about her grandmother, who was old and ill, and the "
    "fox promised to show her a shorter path through the trees.",
]


def text_inputs(tokenizer) -> dict[str, torch.Tensor]:
    """The two texts, the shorter left-padded: ids, mask and positions."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    mask = batch["attention_mask"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": batch["input_ids"], "attention_mask": mask, "position_ids": positions}


def main() -> None:
    from transformers import AutoTokenizer

    from mobius.cli import main as mobius
    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.gguf import hf_from_gguf, smollm2_gguf
    from mobius.testing.lora import onnx_adapter_feeds, save_float_checkpoint
    from mobius.testing.parity import causal_lm_parity
    from mobius.testing.peft_adapters import PeftAdapters, peft_adapter

    torch.set_num_threads(1)
    gguf = smollm2_gguf()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf = hf_from_gguf(gguf, attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        base = save_float_checkpoint(hf, root / "base")
        adapters = {
            name: peft_adapter(hf, root / name, seed=31 + i, **config)
            for i, (name, config) in enumerate(ADAPTERS.items())
        }
        args = ["build", "--model", str(base), "-q", "--output"]
        assert mobius([*args, str(root / "plain")]) == 0
        assert mobius([*args, str(root / "served"), "--lora-inputs"]) == 0
        assert mobius([*args, str(root / "int4"), "--lora-inputs", "--precision", "int4"]) == 0
        for adapter in adapters.values():
            assert mobius(["adapter", str(adapter), "--model", str(root / "int4"), "-q"]) == 0
        errors = {
            "plain build": causal_lm_parity(hf, root / "plain", hf.config)["max_diff"],
            "--lora-inputs build, no adapter": causal_lm_parity(hf, root / "served", hf.config)[
                "max_diff"
            ],
        }
        peft = PeftAdapters(hf, adapters)
        lm = OnnxCausalLM(root / "int4")
        inputs = text_inputs(tokenizer)
        ids, mask, pos = (
            inputs[k].numpy() for k in ("input_ids", "attention_mask", "position_ids")
        )
        keep = mask.astype(bool)

        def top1(name: str | None) -> float:
            feeds = (
                {} if name is None else onnx_adapter_feeds(root / "int4" / f"{name}.onnx_adapter")
            )
            logits, _ = lm.run(ids, mask, pos, {**lm.empty_cache(2), **feeds})
            with peft.use(name) as model, torch.no_grad():
                expected = model(**inputs).logits.numpy()
            return float((logits.argmax(-1) == expected.argmax(-1))[keep].mean())

        agreement = {"int4 base alone vs HF": top1(None)} | {
            f"int4 base + {name} vs PeftModel": top1(name) for name in adapters
        }
    result = {
        "model": "SmolLM2-135M (f32 weights from the Q4_1 GGUF)",
        "adapters": ADAPTERS,
        "tokens_compared": int(keep.sum()),
        "top1_agreement": agreement,
        "f32_max_abs_error_without_adapter": errors,
        "int4": "MatMulNBits, block 32, asymmetric, accuracy level 0; LoRA path f32",
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
