"""Caption an image with a vision–language model converted by mobius: onnxruntime, numpy and the
HF processor only (no torch).

    mobius build --model CHECKPOINT --output out/vlm      # vision_encoder, embedding, decoder_model
    python examples/multimodal_generation.py out/vlm [IMAGE] [--prompt "<image> A photo of"]

The three graphs of CONTRACTS.md ("Vision–language models"): ``vision_encoder`` turns the
processor's ``pixel_values`` into ``image_features`` [num_image_tokens, hidden]; ``embedding``
puts them at the prompt's image tokens; ``decoder_model`` generates from ``inputs_embeds`` with a
key/value cache, each new token embedded alone (no image features). The embedding graph's other
outputs (Qwen3-VL's ``deepstack_visual_embeds``, placed at the image tokens) go to the decoder under
their names. Without an image file a
synthetic gradient is captioned. Families with multi-axis positions (Qwen2-VL, ``mobius.json``
``"position_ids": "multi-axis"``) need their ``get_rope_index`` ids instead of the mask count used
here: ``mobius.runtime.vlm.multi_axis_positions`` is the recipe (the grid comes from the
processor's ``image_grid_thw``), and the first new token goes one past each row's largest
position.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnxruntime as ort

DEFAULT_PROMPT = "<image> A picture of"


def sessions(directory: Path) -> dict[str, ort.InferenceSession]:
    return {
        name: ort.InferenceSession(
            str(directory / f"{name}.onnx"), providers=["CPUExecutionProvider"]
        )
        for name in ("vision_encoder", "embedding", "decoder_model")
    }


def synthetic_image(height: int = 48, width: int = 64) -> np.ndarray:
    """An RGB gradient, [height, width, 3] uint8."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], -1).astype(np.uint8)


def generate(
    graphs: dict[str, ort.InferenceSession], inputs: dict[str, np.ndarray], max_new_tokens: int
) -> list[int]:
    """Greedy tokens for one prompt (a batch of one), through the three graphs."""
    vision = graphs["vision_encoder"]
    vision_names = {i.name for i in vision.get_inputs()}
    run = vision.run(None, {k: v for k, v in inputs.items() if k in vision_names})
    # image_features, and deepstack_features where the family has them: rows on axis -2
    features = dict(zip([o.name for o in vision.get_outputs()], run, strict=True))
    embedding_names = [o.name for o in graphs["embedding"].get_outputs()]
    decoder = graphs["decoder_model"]
    decoder_inputs = {i.name: i for i in decoder.get_inputs()}
    output_names = [o.name for o in decoder.get_outputs()]
    ids = inputs["input_ids"].astype(np.int64)
    mask = inputs["attention_mask"].astype(np.int64)
    positions = np.clip(mask.cumsum(-1) - 1, 0, None)
    cache = {}
    for name, spec in decoder_inputs.items():  # empty past: zero tokens long
        if name.startswith("past_key_values."):
            shape = [1 if d == "batch" else d if isinstance(d, int) else 0 for d in spec.shape]
            cache[name] = np.zeros(shape, dtype=np.float32)
    no_features = {
        name: np.zeros((*rows.shape[:-2], 0, rows.shape[-1]), dtype=rows.dtype)
        for name, rows in features.items()
    }
    tokens: list[int] = []
    for _ in range(max_new_tokens):
        embedded = graphs["embedding"].run(None, {"input_ids": ids, **features})
        # inputs_embeds, and deepstack_visual_embeds already at the image positions
        feeds = dict(zip(embedding_names, embedded, strict=True))
        feeds.update(attention_mask=mask, position_ids=positions)
        if "token_type_ids" in decoder_inputs:  # 1 marks image tokens (Gemma 3)
            image_token = inputs.get("image_token_id")
            feeds["token_type_ids"] = (ids == image_token).astype(np.int64)
        outputs = dict(zip(output_names, decoder.run(None, {**feeds, **cache}), strict=True))
        cache = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in outputs.items()
            if n.startswith("present.")
        }
        token = int(outputs["logits"][0, -1].argmax())
        tokens.append(token)
        ids, features = np.array([[token]], dtype=np.int64), no_features
        mask = np.concatenate([mask, np.ones((1, 1), dtype=np.int64)], axis=1)
        positions = positions[:, -1:] + 1
    return tokens


def caption(
    directory: str | Path, image: np.ndarray, prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 12
) -> tuple[list[int], str]:
    """Tokens and text the model writes after ``prompt`` for ``image`` ([height, width, 3])."""
    import json

    from transformers import AutoProcessor

    directory = Path(directory)
    processor = AutoProcessor.from_pretrained(directory)
    inputs = dict(processor(text=prompt, images=image, return_tensors="np"))
    manifest = json.loads((directory / "mobius.json").read_text())
    inputs["image_token_id"] = manifest["image_token_id"]
    tokens = generate(sessions(directory), inputs, max_new_tokens)
    return tokens, processor.tokenizer.decode(tokens, skip_special_tokens=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a directory written by `mobius build`")
    parser.add_argument("image", nargs="?", help="an image file (default: a synthetic gradient)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    args = parser.parse_args(argv)
    if args.image:
        from PIL import Image

        image = np.asarray(Image.open(args.image).convert("RGB"))
    else:
        image = synthetic_image()
    tokens, text = caption(args.model, image, args.prompt, args.max_new_tokens)
    print(f"{args.prompt}{text}")
    print(f"tokens: {tokens}")


if __name__ == "__main__":
    main()
