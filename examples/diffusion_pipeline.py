"""Text to image with a converted Stable Diffusion pipeline: onnxruntime runs the text encoder,
the UNet and the VAE decoder; the pipeline's own diffusers scheduler drives the denoising loop.

    mobius build --model PIPELINE --output OUT      # a diffusers pipeline directory
    python examples/diffusion_pipeline.py OUT "a red cube" --steps 4

Without a pipeline at hand, ``--tiny DIR`` first writes a tiny random one there (and converts it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])


def encode_prompt(out: Path, prompt: str) -> np.ndarray:
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(out / "tokenizer")
    ids = tokenizer(
        prompt, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
        return_tensors="np",
    ).input_ids  # fmt: skip
    return session(out / "text_encoder").run(["last_hidden_state"], {"input_ids": ids})[0]


def generate(
    out: Path,
    prompt: str,
    latents: torch.Tensor,
    steps: int = 4,
    guidance_scale: float = 7.5,
) -> np.ndarray:
    """The image (``[batch, height, width, 3]`` in [0, 1]) for ``prompt`` from start ``latents``."""
    import diffusers
    from diffusers import SchedulerMixin  # noqa: F401  (the scheduler class comes from its config)

    config = json.loads((out / "scheduler" / "scheduler_config.json").read_text())
    scheduler = getattr(diffusers, config["_class_name"]).from_config(config)
    unet, decoder = session(out / "unet"), session(out / "vae_decoder")
    text = np.concatenate([encode_prompt(out, ""), encode_prompt(out, prompt)])
    scheduler.set_timesteps(steps)
    latents = latents * scheduler.init_noise_sigma
    for t in scheduler.timesteps:
        doubled = scheduler.scale_model_input(torch.cat([latents, latents]), t)
        noise = unet.run(
            ["out_sample"],
            {
                "sample": doubled.numpy(),
                "timestep": np.full([2], float(t), dtype=np.float32),
                "encoder_hidden_states": text,
            },
        )[0]
        uncond, cond = np.split(noise, 2)
        guided = torch.from_numpy(uncond + guidance_scale * (cond - uncond))
        latents = scheduler.step(guided, t, latents).prev_sample
    vae = json.loads((out / "vae_decoder" / "config.json").read_text())
    scaled = (latents / vae.get("scaling_factor", 0.18215)).numpy()
    image = decoder.run(["sample"], {"latent_sample": scaled})[0]
    return np.clip(image / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a directory written by mobius build")
    parser.add_argument("prompt")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", type=Path, help="write a tiny random pipeline here first")
    parser.add_argument("--save", type=Path, help="write the image as a PNG")
    args = parser.parse_args()
    if args.tiny is not None:
        import mobius
        from mobius.testing.diffusers_tiny import tiny_pipeline

        tiny_pipeline(args.tiny)
        mobius.build(args.tiny).save(args.model, overwrite=True)
    unet_config = json.loads((args.model / "unet" / "config.json").read_text())
    size = unet_config["sample_size"]
    generator = torch.Generator().manual_seed(args.seed)
    latents = torch.randn([1, unet_config["in_channels"], size, size], generator=generator)
    image = generate(args.model, args.prompt, latents, args.steps)
    print(f"image {image.shape[1]}x{image.shape[2]}, mean {image.mean():.4f}")
    if args.save is not None:
        from PIL import Image

        Image.fromarray((image[0] * 255).round().astype(np.uint8)).save(args.save)


if __name__ == "__main__":
    main()
