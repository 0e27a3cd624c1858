"""Tiny models that take images and audio (Qwen-Omni thinkers: ``tasks/audio_llm.py`` with both
modalities) and their parity against HF: image and audio features, prefill logits of a padded
batch of two prompts (one image and one clip in the first, another clip in the second), one
cached step, and greedy tokens against HF ``generate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mobius.testing.config_tables import HIDDEN

NEW_TOKENS = 12
# per type, the audio tower beyond tiny_config_for, each with its reason. Both towers take
# 2 * max_source_positions frames (a fixed window, as Whisper-style towers do: audio_inputs),
# cut into chunks of 2 * n_window; their projections write output_dim features, which must be the
# shrunk text width (3584 and 2048 in the real configs).
OMNI_OVERRIDES: dict[str, dict[str, Any]] = {
    # 84 frames in chunks of 14: 7 frames per chunk after the stride-2 convolution, so the
    # average pooling pairs frames across chunk boundaries; the shorter clip (52 frames) ends in
    # a partial chunk
    "qwen2_5_omni_thinker": {
        "audio_config": {
            "num_mel_bins": 16,
            "max_source_positions": 42,
            "n_window": 7,
            "output_dim": HIDDEN,
        }
    },
    # HF's output-length rule counts 13 rows per full chunk (of 100 frames: n_window 50, kept);
    # 200 frames, and attention windows of one chunk (n_window_infer 100), so a clip spans two
    "qwen3_omni_moe_thinker": {
        "audio_config": {
            "num_mel_bins": 16,
            "max_source_positions": 100,
            "n_window_infer": 100,
            "output_dim": HIDDEN,
        }
    },
    # built as the VLM sweep builds it (distinct image, video and audio tokens); 16 mel bins
    # (feature_size), and the tower's sample counts: 160 per frame, 8 frames per token
    "dots3_note": {"audio_config": {"feature_size": 16}},
}
# the types swept with both modalities (benchmarks/speech_coverage.py): the thinkers and
# dots.ocr-3; Phi-4-multimodal, whose features methods mobius writes (testing.phi4_multimodal)
BOTH = (*OMNI_OVERRIDES, "phi4_multimodal")


def tiny_omni(model_type: str, directory: Path, *, seed: int = 0, **overrides: Any):
    """A tiny random-weight model with a vision and an audio tower saved in ``directory``:
    (HF model, config). The thinkers are built as the VLM sweep builds them (``tiny_vlm``), with
    the audio tower of ``OMNI_OVERRIDES``; other types as their multimodal-LM class."""
    from mobius.testing.vlm import tiny_vlm

    if model_type not in OMNI_OVERRIDES:
        if model_type == "phi4_multimodal":
            from mobius.testing.phi4_multimodal import OVERRIDES

            overrides = {**OVERRIDES, **overrides}
        return _tiny_multimodal_lm(model_type, directory, seed, overrides)
    return tiny_vlm(model_type, directory, seed=seed, **{**OMNI_OVERRIDES[model_type], **overrides})


def _tiny_multimodal_lm(model_type: str, directory: Path, seed: int, overrides: dict) -> tuple:
    """``model_type`` built tiny as transformers' multimodal-LM mapping's class, every parameter
    random, saved and loaded back."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MULTIMODAL_LM_MAPPING

    from mobius.testing.configs import tiny_config_for
    from mobius.testing.tiny import randomize

    config = tiny_config_for(model_type, **overrides)
    cls = MODEL_FOR_MULTIMODAL_LM_MAPPING[type(config)]
    torch.manual_seed(seed)
    model = cls._from_config(config, attn_implementation="eager").eval()
    randomize(model, seed)
    model.save_pretrained(directory)
    return cls.from_pretrained(directory, attn_implementation="eager").eval(), config


def _special_ids(config: Any) -> set[int]:
    """Every special token id the config names, its sub-configs' too (none may appear as
    prompt text)."""

    def named(values: dict) -> set[int]:
        ids = set()
        for key, value in values.items():
            if isinstance(value, dict):
                ids |= named(value)
            elif ("token_id" in str(key) or "token_index" in str(key)) and isinstance(value, int):
                ids.add(value)
        return ids

    return named(config.to_dict())


def omni_prompt(model: Any, image_tokens: int, audio_tokens: list[int], seed: int = 1):
    """Two rows, as the processor lays them out: the first text, one image's tokens between
    the vision start and end tokens, text, the first clip's tokens between the audio start and
    end tokens, text; the second text, the second clip's tokens, text, left-padded.
    (input_ids, attention_mask)."""
    from mobius.tasks.audio_llm import audio_token_id
    from mobius.tasks.vlm_inputs import image_token_id

    config = model.config
    special = _special_ids(config)
    vocab = model.get_input_embeddings().num_embeddings
    plain = next(t for t in range(3, vocab) if t not in special)
    gen = torch.Generator().manual_seed(seed)
    text = torch.randint(3, vocab - 3, (12,), generator=gen)
    text[torch.isin(text, torch.tensor(sorted(special)))] = plain

    def run(token: int, count: int, start: str, end: str) -> list[int]:
        """``count`` placeholders between the start and end tokens the config names."""
        opened = [getattr(config, start, None), *[token] * count, getattr(config, end, None)]
        return [t for t in opened if t is not None]

    image = run(
        image_token_id(config), image_tokens, "vision_start_token_id", "vision_end_token_id"
    )
    audio = [
        run(audio_token_id(config), n, "audio_start_token_id", "audio_end_token_id")
        for n in audio_tokens
    ]
    words = text.tolist()
    rows = [
        words[:2] + image + words[2:3] + audio[0] + words[3:5],
        words[5:7] + audio[1] + words[7:8],
    ]
    width = max(len(r) for r in rows)
    pad = getattr(config.get_text_config(), "pad_token_id", None) or 0
    ids = torch.full((2, width), pad, dtype=torch.int64)
    mask = torch.zeros((2, width), dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :], mask[i, width - len(r) :] = torch.tensor(r), 1
    return ids, mask


def omni_parity(model: Any, package: Path, new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """Max abs differences (image and audio features, prefill, cached step, generation logits)
    and whether the greedy tokens equal HF ``generate``'s, on one image and two clips of
    different lengths in a padded batch of two prompts."""
    from mobius.runtime.audio_llm import OnnxAudioLanguageModel
    from mobius.runtime.vlm import DEEPSTACK, DEEPSTACK_FEATURES, next_positions
    from mobius.tasks.audio_llm import audio_features
    from mobius.tasks.vlm import language_model, vision_outputs
    from mobius.testing.audio_llm import (
        audio_batch,
        decoder_results,
        features_per_clip,
        real_frames,
    )
    from mobius.testing.vlm import _cache_of, hf_generate
    from mobius.testing.vlm_pixels import image_runs, pixel_inputs
    from mobius.verification.pairs import for_session, for_torch, to_numpy

    runner = OnnxAudioLanguageModel(package)
    if model.config.model_type == "phi4_multimodal":
        pixels, audio, ids, mask, hf_image, hf_deepstack, hf_audio, hf_audio_in = _phi4_inputs(
            model
        )
    else:
        pixels = pixel_inputs(model, 1)
        audio = audio_batch(model)
        # noise in the clips' padding: HF drops those frames, so the graph must not read them
        real = real_frames(model, audio)[:, None, :] > 0
        noise = torch.randn(
            audio["input_features"].shape, generator=torch.Generator().manual_seed(5)
        )
        audio["input_features"] = torch.where(real, audio["input_features"], noise)
        clips = features_per_clip(model, audio)
        ids, mask = omni_prompt(model, sum(image_runs(model, pixels)), clips)
        with torch.no_grad():
            hf_image, hf_deepstack = vision_outputs(model, for_torch(model, pixels))
            hf_audio = audio_features(model, audio)
        hf_audio_in = audio
    vision = runner.vision(**for_session(runner.sessions["vision_encoder"], pixels))
    image, deepstack = vision["image_features"], vision.get(DEEPSTACK_FEATURES)
    rows = runner.audio_features(**{k: v.numpy() for k, v in audio.items()})
    grid = pixels.get("image_grid_thw")
    positions = runner.positions(ids.numpy(), mask.numpy(), None if grid is None else grid.numpy())
    hf_inputs = {
        "input_ids": ids,
        "attention_mask": mask,
        **for_torch(model, pixels),
        **hf_audio_in,
    }
    given = {}  # HF's positions where the model takes plain ones: as generate makes them
    if runner.manifest.get("position_ids") == "sequence":
        given = {"position_ids": torch.from_numpy(positions)}
    step = torch.randint(3, 100, (2, 1), generator=torch.Generator().manual_seed(2))
    step_mask = torch.cat([mask, torch.ones_like(step)], 1)
    step_positions = next_positions(positions)
    with torch.no_grad():  # the prompt's multi-axis positions are HF's own (get_rope_index)
        first = model(**hf_inputs, **given, use_cache=True)
        second = language_model(model)(
            input_ids=step,
            attention_mask=step_mask,
            position_ids=torch.from_numpy(step_positions),
            past_key_values=_cache_of(first),
            use_cache=True,
        )
    images = {"image_features": image}
    embedded = runner.embedding(ids.numpy(), rows, deepstack, more=images)
    logits, cache = runner.decode(
        embedded["inputs_embeds"],
        mask.numpy(),
        positions,
        runner.empty_cache(2),
        None,
        embedded.get(DEEPSTACK),
    )
    embedded = runner.embedding(step.numpy(), None)
    step_logits, _ = runner.decode(
        embedded["inputs_embeds"],
        step_mask.numpy(),
        step_positions,
        cache,
        None,
        embedded.get(DEEPSTACK),
    )
    tokens, hf_logits = hf_generate(model, hf_inputs, new_tokens)
    ours, our_logits = runner.generate(
        ids.numpy(),
        mask.numpy(),
        rows,
        new_tokens,
        positions=positions,
        deepstack=deepstack,
        more=images,
    )
    diff = lambda a, b: float(np.abs(np.asarray(a) - to_numpy(b)).max())  # noqa: E731
    image_diff = diff(image, hf_image)
    if hf_deepstack is not None:
        image_diff = max(image_diff, diff(deepstack, hf_deepstack))
    audio_diff = diff(rows, hf_audio)
    more = _phi4_audio_cases(model, runner) if model.config.model_type == "phi4_multimodal" else {}
    audio_diff = max([audio_diff, *more.values()])
    return {
        **more,
        "images": 1,
        "image_tokens": int(hf_image.shape[0]),
        "audio_tokens": int(hf_audio.shape[0]),
        "image_features_diff": image_diff,
        "audio_features_diff": audio_diff,
        "features_diff": max(image_diff, audio_diff),
        **decoder_results(
            mask, (logits, first), (step_logits, second), (ours, our_logits), (tokens, hf_logits)
        ),  # fmt: skip
    }


def _phi4_inputs(model: Any) -> tuple:
    """Phi-4-multimodal's image, clips, prompt and HF's rows for them (``testing.phi4_multimodal``):
    (pixels, audio graph inputs, ids, mask, image rows, None, audio rows, HF's audio inputs)."""
    from mobius.testing.phi4_multimodal import (
        hf_audio_inputs,
        hf_audio_rows,
        hf_image_rows,
        image_tokens,
        phi4_audio,
        phi4_pixels,
    )

    pixels, audio = phi4_pixels(model), phi4_audio(model)
    clips = [int(n) for n in audio["audio_embed_sizes"]]
    ids, mask = omni_prompt(model, image_tokens(model), clips)
    hf_image, hf_audio = hf_image_rows(model, pixels), hf_audio_rows(model, audio)
    return pixels, audio, ids, mask, hf_image, None, hf_audio, hf_audio_inputs(audio)


def _phi4_audio_cases(model: Any, runner: Any) -> dict[str, float]:
    """Phi-4-multimodal's other audio paths against HF's rows: one clip as its processor gives
    it (no mask, and no projection mode: the runner's defaults, a call without images, HF's
    ``speech`` projection), and a clip of more than the conformer's 500 steps (HF runs it in
    windows of 500; one clip: HF's windowing raises on a batch of such clips, its
    ``unfold_tensor`` views a permuted tensor)."""
    from mobius.testing.phi4_multimodal import hf_audio_rows, phi4_audio

    speech = {**phi4_audio(model, lengths=(1.0,)), "audio_projection_mode": torch.zeros(1)}
    given = ("audio_input_features", "audio_embed_sizes")  # what the processor gives
    long = phi4_audio(model, frames=4100, lengths=(1.0,))
    out = {}
    for name, audio, names in (
        ("speech_features_diff", speech, given),
        ("long_audio_features_diff", long, tuple(long)),
    ):
        rows = runner.audio_features(**{k: audio[k].numpy() for k in names})
        out[name] = float(np.abs(rows - hf_audio_rows(model, audio).numpy()).max())
    return out
