"""The vision graph's inputs beyond ``pixel_values``: by the HF names of ``get_image_features``'
required arguments; Pixtral and anyres towers take the processor's padded batch and
``image_sizes``; OneVision one image at a fixed resolution, with ``image_sizes`` checked; a config HF's own vision path
cannot run is refused as the config's fault. (The sweep, benchmarks/vlm_coverage.py, checks
each family's parity end to end.)"""

from __future__ import annotations

import pytest
import torch

from mobius.errors import UnsupportedError
from mobius.sources.config import from_hf
from mobius.tasks.vlm import IMAGE_TEXT_TO_TEXT, VisionGraph, vision_inputs, vision_outputs
from mobius.tasks.vlm_inputs import extra_vision_inputs
from mobius.testing.configs import tiny_config_for


def _inputs(model_type: str, **overrides) -> dict[str, tuple]:
    specs = vision_inputs(from_hf(tiny_config_for(model_type, **overrides)))
    return {s.name: (s.dtype, s.dims) for s in specs}


def test_extra_inputs_by_their_hf_names():
    hybrid = _inputs("deepseek_vl_hybrid", high_res_vision_config={"image_size": 64})
    assert hybrid == {
        "pixel_values": (None, ("num_images", 3, 32, 32)),
        "high_res_pixel_values": (None, ("num_images", 3, 64, 64)),  # its own sub-config's size
    }
    assert _inputs("instructblip")["qformer_input_ids"] == (
        torch.int64,
        ("num_images", "qformer_sequence_length"),
    )
    # Pixtral: the processor's batch, images padded to the largest, and each image's size
    assert _inputs("mistral3") == {
        "pixel_values": (None, ("num_images", 3, "image_height", "image_width")),
        "image_sizes": (torch.int64, ("num_images", 2)),
    }
    # no vision tower: Fuyu embeds the flattened 8 x 8 x 3 patches itself
    assert _inputs("fuyu") == {"pixel_values": (None, ("num_images", "num_patches", 192))}
    # Siglip2's NaFlex rows of patches, their grids and real patches (LFM2-VL)
    assert _inputs("lfm2_vl") == {
        "pixel_values": (None, ("num_images", "num_patches", 192)),
        "spatial_shapes": (torch.int64, ("num_images", 2)),
        "pixel_attention_mask": (torch.int32, ("num_images", "num_patches")),
    }
    # towers in sequence: the image size of the first, which reads the pixels (Unlimited-OCR)
    ocr = _inputs("unlimited_ocr", vision_config={"sam_config": {"image_size": 64}})
    assert ocr == {"pixel_values": (None, ("num_images", 3, 64, 64))}
    # anyres: the processor's tiles of any images, padded to the most, and their sizes
    tiled = _inputs("llava_next", image_grid_pinpoints=[[32, 64], [64, 64]])
    assert tiled == {
        "pixel_values": (None, ("num_images", "num_tiles", 3, 32, 32)),
        "image_sizes": (torch.int64, ("num_images", 2)),
    }
    # ... except where the tiling depends on the prompt's image count (OneVision): one image at
    # the first tiling (32 x 64: the whole image and two tiles)
    fixed = _inputs("llava_onevision", image_grid_pinpoints=[[32, 64], [64, 64]])
    assert fixed == {
        "pixel_values": (None, (1, 3, 3, 32, 32)),
        "image_sizes": (torch.int64, (1, 2)),
    }


def test_models_outside_get_image_features():
    # InstructBLIP-Video has get_video_features only: clips of frames, the video token placed
    from mobius.errors import ConfigError
    from mobius.tasks.detect import get_task
    from mobius.tasks.vlm_inputs import image_token_id

    config = from_hf(tiny_config_for("instructblipvideo", video_token_index=250))
    assert IMAGE_TEXT_TO_TEXT.supports(config)
    assert {s.name: s.dims for s in vision_inputs(config)} == {
        "pixel_values": ("num_images", "num_frames", 3, 32, 32),
        "qformer_input_ids": ("num_images", "qformer_sequence_length"),
    }
    assert image_token_id(config.hf_config) == 250
    # a model with an image token keeps it (Qwen2-VL also has a video token)
    qwen = tiny_config_for("qwen2_vl")
    assert image_token_id(qwen) == qwen.image_token_id != qwen.video_token_id
    # Mllama cross-attends to the image: --task image-text-to-text says why, and the way out
    with pytest.raises(ConfigError, match="cross-attends.*--task text-generation"):
        get_task("image-text-to-text", from_hf(tiny_config_for("mllama")))


def test_an_argument_without_an_input_is_named():
    def get_image_features(self, pixel_values, crop_boxes, scale=1.0, **kwargs): ...

    config = from_hf(tiny_config_for("llava"))
    with pytest.raises(UnsupportedError, match="'crop_boxes'"):
        extra_vision_inputs(config, get_image_features)


def test_fixed_resolution_checks_image_sizes():
    from transformers import AutoModelForImageTextToText

    config = tiny_config_for("llava_onevision", image_grid_pinpoints=[[32, 64], [64, 64]])
    model = AutoModelForImageTextToText.from_config(config).eval()
    pixels = torch.randn(1, 3, 3, 32, 32)
    sizes = torch.tensor([[32, 64]])
    graph = VisionGraph(IMAGE_TEXT_TO_TEXT)
    with torch.no_grad():
        ours = graph.call(model, {"pixel_values": pixels, "image_sizes": sizes})[0]
        theirs = vision_outputs(model, {"pixel_values": pixels, "image_sizes": sizes})[0]
        assert ours.shape == theirs.shape and torch.equal(ours, theirs)
        with pytest.raises(IndexError):  # ONNX Gather fails the same way
            graph.call(model, {"pixel_values": pixels, "image_sizes": torch.tensor([[40, 64]])})


def test_grid_patches_take_the_processors_rank():
    # the processor flattens each patch (VideoLLaMA3: 3 x 8 x 8, no frames) or keeps it an image
    # (PaddleOCR-VL); the tower reads either
    assert _inputs("video_llama_3")["pixel_values"] == (None, ("num_patches", 192))
    assert _inputs("paddleocr_vl")["pixel_values"] == (None, ("num_patches", 3, 8, 8))
    assert _inputs("qwen2_vl")["pixel_values"] == (None, ("num_patches", 384))  # 2 frames


def test_a_grid_too_small_to_pool_is_the_configs_fault():
    # Gemma 3 pools the tower's 4 x 4 patches to sqrt(mm_tokens_per_image) per side: 256 tokens
    # would need a pooling kernel of 0, which HF's own vision path cannot run either
    from mobius.errors import ConfigError

    with pytest.raises(ConfigError, match="mm_tokens_per_image=256.*at most 16"):
        vision_inputs(from_hf(tiny_config_for("gemma3", mm_tokens_per_image=256)))
    assert _inputs("gemma3", mm_tokens_per_image=4)["pixel_values"][1] == ("num_images", 3, 32, 32)
