"""Tiny speech LLMs and their parity against HF (``tasks/audio_llm.py``): audio features,
prefill logits of a padded batch of two clips of different lengths, one cached step, and greedy
tokens against HF ``generate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mobius.testing.tiny import randomize

# per type: what the shrunk config needs beyond tiny_config_for, each with its reason
AUDIO_OVERRIDES: dict[str, dict[str, Any]] = {
    # Whisper-style towers check for exactly 2 * max_source_positions frames (3000 for 30 s);
    # 32 positions keep the tiny window at 64 frames
    "qwen2_audio": {"audio_config": {"max_source_positions": 32, "num_mel_bins": 16}},
    "audioflamingo3": {"audio_config": {"max_source_positions": 32, "num_mel_bins": 16}},
    # MusicFlamingo's audio-boundary ids (151670, 151671) lie past the shrunk vocabulary
    "musicflamingo": {"audio_bos_token_id": 251, "audio_eos_token_id": 252},
    # Fun-ASR-Nano's adaptor checks intermediate_size == text hidden_size // 4 (64 // 4)
    "fun_asr_nano": {
        "adaptor_config": {"intermediate_size": 16},
        "audio_config": {"num_mel_bins": 16},
    },
    # Nemotron 3.5 Transcribe's head checks its audio width against the shrunk tower's; its
    # ASR, diarization and word-timestamp encoders' value projections have num_attention_heads
    # heads (no grouped key/values: 10/10, 8/8, 16/16 in the real config), so the shrunk 2
    # key/value heads must stay the 4 query heads
    "nemo_speechlm": {
        "audio_config": {
            "diarization_config": {
                "head_config": {"audio_hidden_size": 64},
                "audio_config": {"num_key_value_heads": 4},
            },
            "asr_config": {"num_key_value_heads": 4},
        },
        "word_timestamp_config": {"num_key_value_heads": 4},
    },
    # Voxtral's config class leaves audio_token_id unset; every checkpoint sets it (24)
    "voxtral": {
        "audio_config": {"max_source_positions": 32, "num_mel_bins": 16},
        "audio_token_id": 250,
    },
    "voxtral_realtime": {"audio_token_id": 250},
    # MOSS Transcribe's windows: 64 frames of 160 samples (30 s of 480000 in the real config)
    "moss_transcribe_diarize": {
        "audio_config": {"max_source_positions": 32, "num_mel_bins": 16},
        "audio_chunk_size": 64 * 160,
    },
    "glmasr": {"audio_config": {"num_mel_bins": 16}},
    # Granite Speech's Q-Former projector reads the tower's hidden_dim as encoder_hidden_size
    # (1024 and 1024 in the real config; the shrink leaves 1024 and 1408): both 64
    "granite_speech": {
        "encoder_config": {"hidden_dim": 64, "dim_head": 16, "input_dim": 32},
        "projector_config": {"encoder_hidden_size": 64},
    },
    "granite_speech_plus": {
        "encoder_config": {"hidden_dim": 64, "dim_head": 16, "input_dim": 32},
        "projector_config": {"encoder_hidden_size": 64},
    },
    # n_window_infer 100: attention windows of one chunk (13 frames), so a clip spans several
    # and its projector writes output_dim features (3584), which must be the shrunk text width
    "qwen3_asr": {"audio_config": {"num_mel_bins": 16, "n_window_infer": 100, "output_dim": 64}},
}


NATIVE_LAYOUT = {"nemo_speechlm"}
# MusicFlamingo's config reads its audio config's model_type, which the shrunk config drops
# where it equals the default (AudioFlamingo 3's encoder): its towers are AudioFlamingo 3's
SAME_TOWERS = {"musicflamingo": "audioflamingo3"}


def _with_towers_of(model_type: str, other: str, overrides: dict[str, Any]) -> Any:
    from transformers import CONFIG_MAPPING

    from mobius.testing.configs import tiny_config_for

    base = tiny_config_for(other, **AUDIO_OVERRIDES.get(other, {}))
    values = {**base.to_dict(), **AUDIO_OVERRIDES.get(model_type, {}), **overrides}
    for key in ("model_type", "architectures", "transformers_version"):
        values.pop(key, None)
    return CONFIG_MAPPING[model_type](**values)


def tiny_audio_llm(model_type: str, directory: Path, *, seed: int = 0, **overrides: Any):
    """A tiny random-weight speech LLM saved in ``directory``: (HF model, config)."""
    from mobius.tasks.audio_llm import _Auto
    from mobius.testing.configs import tiny_config_for

    if model_type in SAME_TOWERS:  # built from the tiny config of the type it shares towers with
        config = _with_towers_of(model_type, SAME_TOWERS[model_type], overrides)
    else:
        config = tiny_config_for(model_type, **{**AUDIO_OVERRIDES.get(model_type, {}), **overrides})
    text = config.get_text_config()
    if text.num_key_value_heads > text.num_attention_heads:  # Nemotron-H keeps 8 key/value heads
        text.num_key_value_heads = text.num_attention_heads // 2  # for the 4 shrunk query heads
    torch.manual_seed(seed)
    model = _Auto.from_config(config, attn_implementation="eager").eval()
    randomize(model, seed)
    # HF's original-format writer splits Nemotron 3.5 Transcribe's fused projections into shapes
    # its own loader does not read back: the tiny checkpoint keeps the model's own names
    model.save_pretrained(directory, save_original_format=model_type not in NATIVE_LAYOUT)
    loaded = _Auto.from_pretrained(directory, attn_implementation="eager")
    return loaded.eval(), config


NEW_TOKENS = 12


def audio_batch(model: Any, lengths: tuple[int, ...] = (1.0, 0.625), seed: int = 3) -> dict:
    """Random log-mel clips in the audio graph's layout, one per entry of ``lengths`` (each a
    fraction of the window), with the mask the processor gives: real frames 1, padding 0."""
    from mobius.sources.config import from_hf
    from mobius.tasks.audio_inputs import (
        AUDIO_ROWS,
        MASKS,
        _mel_first,
        audio_config,
        audio_inputs,
        chunked,
    )

    specs = audio_inputs(from_hf(model.config))
    gen = torch.Generator().manual_seed(seed)
    if any(s.name == "input_values" for s in specs):
        return _waveforms(specs, lengths, gen)
    if chunked(model.config):
        return _windows(model, specs, CHUNKED_LENGTHS, gen)
    feature = next(s for s in specs if s.name == "input_features")
    mel_first = _mel_first(audio_config(model.config))
    width, frames = feature.dims[1:] if mel_first else feature.dims[:0:-1]
    unit = feature.multiple_of  # chunked towers take whole chunks
    frames = frames if isinstance(frames, int) else unit * max(2, -(-80 // unit))
    batch = len(lengths)
    shape = (batch, width, frames) if mel_first else (batch, frames, width)
    values = torch.randn(shape, generator=gen)
    mask = torch.zeros(batch, frames, dtype=torch.int64)
    for row, fraction in enumerate(lengths):
        real = int(frames * fraction)
        mask[row, :real] = 1
        if mel_first:
            values[row, :, real:] = 0
        else:
            values[row, real:] = 0
    out = {"input_features": values}
    for s in specs:
        if s.dims[1:] == (AUDIO_ROWS,):
            out[s.name] = _row_mask(model, values, mask.sum(-1).tolist())
        elif s.name in MASKS:
            out[s.name] = mask
        elif s.name == SAMPLES_PER_CHUNK:  # dots.ocr-3: the waveform samples of the real frames
            out[s.name] = mask.sum(-1) * audio_config(model.config).hop_length
    return out


SAMPLES_PER_CHUNK = "chunk_sample_lengths"
# clips of one and a half windows and of five eighths of one: 2 + 1 windows
CHUNKED_LENGTHS = (1.5, 0.625)


def _windows(model: Any, specs: list, lengths: tuple[float, ...], gen: torch.Generator) -> dict:
    """MOSS Transcribe's processor layout: each clip (its length in windows) cut into windows of
    ``audio_chunk_size`` samples, one row of log-mel features per window, zero past the clip's
    end, with each window's frame mask (``input_features_mask``) and each clip's sample mask
    (``padding_mask``)."""
    from mobius.tasks.audio_inputs import SAMPLE_MASK

    feature = next(s for s in specs if s.name == "input_features")
    mel, frames = feature.dims[1:]
    hop = model.config.audio_chunk_size // frames
    clip_frames = [int(frames * fraction) for fraction in lengths]
    rows, masks = [], []
    for real in clip_frames:
        for start in range(0, real, frames):
            row = torch.randn((mel, frames), generator=gen)
            mask = (torch.arange(frames) < real - start).to(torch.int64)
            rows.append(row * mask)
            masks.append(mask)
    samples = torch.zeros((len(lengths), max(clip_frames) * hop), dtype=torch.int64)
    for clip, real in enumerate(clip_frames):
        samples[clip, : real * hop] = 1
    return {
        "input_features": torch.stack(rows),
        "input_features_mask": torch.stack(masks),
        SAMPLE_MASK: samples,
    }


def clip_inputs(model: Any, audio: dict) -> list[dict]:
    """The audio inputs of each clip alone: its row of every input, or where the processor cuts
    clips into windows (``chunked``), its windows' rows and its row of ``padding_mask``."""
    from mobius.tasks.audio_inputs import SAMPLE_MASK, chunked

    main = audio.get("input_features", audio.get("input_values"))
    if not chunked(model.config):
        return [{k: v[row : row + 1] for k, v in audio.items()} for row in range(len(main))]
    size = model.config.audio_chunk_size
    windows = [-(-int(n) // size) for n in audio[SAMPLE_MASK].sum(-1)]
    clips, start = [], 0
    for clip, count in enumerate(windows):
        one = {k: v[start : start + count] for k, v in audio.items() if k != SAMPLE_MASK}
        clips.append({**one, SAMPLE_MASK: audio[SAMPLE_MASK][clip : clip + 1]})
        start += count
    return clips


def real_frames(model: Any, audio: dict) -> torch.Tensor:
    """``[batch, frames]``: 1 on each clip's real frames, by its mask (or, for dots.ocr-3, its
    ``chunk_sample_lengths``)."""
    from mobius.tasks.audio_inputs import MASKS, audio_config

    mask = next((audio[n] for n in MASKS if n in audio), None)
    if mask is not None:
        return mask
    frames = audio["input_features"].shape[-1]
    real = audio[SAMPLES_PER_CHUNK] // audio_config(model.config).hop_length
    return (torch.arange(frames)[None, :] < real[:, None]).to(torch.int64)


def _row_mask(model: Any, values: torch.Tensor, real_frames: list[int]) -> torch.Tensor:
    """The mask of the features' rows the processor gives (Granite Speech's
    ``input_features_mask``, boolean as HF indexes with it): per clip, as many rows as its real
    frames alone make, out of the rows of the padded length."""
    from mobius.tasks.audio_llm import audio_features

    with torch.no_grad():
        width = int(audio_features(model, {"input_features": values[:1]}).shape[0])
        counts = [
            int(audio_features(model, {"input_features": values[i : i + 1, :real]}).shape[0])
            for i, real in enumerate(real_frames)
        ]
    return torch.arange(width)[None, :] < torch.tensor(counts)[:, None]


def _waveforms(specs: list, lengths: tuple[float, ...], gen: torch.Generator) -> dict:
    """Raw clips ``[batch, 1, samples]`` (0.2 s at 16 kHz), zero past each clip's length, and
    the mask the feature extractor gives (``padding_mask``: 1 on real samples)."""
    from mobius.tasks.audio_inputs import MASKS

    samples = 3200
    values = torch.randn((len(lengths), 1, samples), generator=gen) * 0.3
    mask = torch.zeros(len(lengths), samples, dtype=torch.int64)
    for row, fraction in enumerate(lengths):
        real = int(samples * fraction)
        mask[row, :real] = 1
        values[row, :, real:] = 0
    out = {"input_values": values}
    out.update({s.name: mask for s in specs if s.name in MASKS})
    return out


def features_per_clip(model: Any, audio: dict) -> list[int]:
    """How many audio tokens each clip makes: HF's features of each clip alone (for a tower that
    reads the prompt, which needs these counts first, its own output-length rule on the mask)."""
    from mobius.tasks.audio_inputs import MASKS
    from mobius.tasks.audio_llm import audio_features

    if _reads_prompt(model):  # MusicFlamingo: (frames after the convolutions, after pooling)
        mask = next(audio[n] for n in MASKS if n in audio)
        lengths = model.model.audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
        return [int(n) for n in lengths[-1]]
    counts = []
    for one in clip_inputs(model, audio):
        with torch.no_grad():
            counts.append(int(audio_features(model, one).shape[0]))
    return counts


def _reads_prompt(model: Any) -> bool:
    """The audio features method takes the prompts (``input_ids``) beside the clips."""
    from mobius.sources.config import from_hf
    from mobius.tasks.audio_inputs import audio_inputs

    return any(s.name == "input_ids" for s in audio_inputs(from_hf(model.config)))


def audio_prompt(model: Any, counts: list[int], seed: int = 1):
    """One row per clip: text, the clip's audio tokens, text; left-padded to the longest."""
    from mobius.tasks.audio_llm import audio_token_id

    token = audio_token_id(model.config)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for count in counts:
        before, after = (
            torch.randint(3, 200, (3,), generator=gen),
            torch.randint(3, 200, (2,), generator=gen),
        )
        rows.append(torch.cat([before, torch.full((count,), token), after]))
    width = max(len(r) for r in rows)
    pad = getattr(model.config.get_text_config(), "pad_token_id", None) or 0
    ids = torch.full((len(rows), width), pad, dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :], mask[i, width - len(r) :] = r, 1
    return ids, mask


def audio_parity(model: Any, package: Path, new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """Max abs differences (audio features, prefill, cached step, generation logits) and whether
    the greedy tokens equal HF ``generate``'s, on a padded batch of two clips."""
    from mobius.runtime.audio_llm import OnnxAudioLanguageModel
    from mobius.runtime.vlm import next_positions, sequence_positions
    from mobius.tasks.audio_llm import audio_features
    from mobius.testing.vlm import _cache_of, hf_generate
    from mobius.verification.pairs import to_numpy

    runner = OnnxAudioLanguageModel(package)
    audio = audio_batch(model)
    ids, mask = audio_prompt(model, features_per_clip(model, audio))
    if _reads_prompt(model):
        audio["input_ids"] = ids
    with torch.no_grad():
        expected = audio_features(model, audio)
    features = runner.audio_features(**{k: v.numpy() for k, v in audio.items()})
    positions = torch.from_numpy(sequence_positions(mask.numpy()))
    hf_inputs = {"input_ids": ids, "attention_mask": mask, **audio}
    gen = torch.Generator().manual_seed(2)
    step = torch.randint(3, 200, (2, 1), generator=gen)
    step_mask = torch.cat([mask, torch.ones_like(step)], 1)
    step_positions = torch.from_numpy(next_positions(positions.numpy()))
    with torch.no_grad():
        first = model(**hf_inputs, position_ids=positions, use_cache=True)
        second = model(
            input_ids=step,
            attention_mask=step_mask,
            position_ids=step_positions,
            past_key_values=_cache_of(first),
            use_cache=True,
        )
    logits, cache = runner.decode(
        runner.embed(ids.numpy(), features), mask.numpy(), positions.numpy(), runner.empty_cache(2)
    )
    step_logits, _ = runner.decode(
        runner.embed(step.numpy(), None), step_mask.numpy(), step_positions.numpy(), cache
    )
    tokens, hf_logits = hf_generate(model, hf_inputs, new_tokens)
    ours, our_logits = runner.generate(ids.numpy(), mask.numpy(), features, new_tokens)
    return {
        "audio_tokens": int(expected.shape[0]),
        "features_diff": float(np.abs(np.asarray(features) - to_numpy(expected)).max()),
        **decoder_results(
            mask, (logits, first), (step_logits, second), (ours, our_logits), (tokens, hf_logits)
        ),  # fmt: skip
    }


def decoder_results(mask: torch.Tensor, prefill: tuple, step: tuple, ours: tuple,
                    hf: tuple) -> dict[str, Any]:  # fmt: skip
    """The decoder's keys of a speech-LLM parity result: ``prefill`` and ``step`` are (our
    logits, HF's output), ``ours`` and ``hf`` (greedy tokens, their logits); prefill logits are
    compared on the rows' real positions only."""
    from mobius.verification.pairs import to_numpy

    real = mask.numpy().astype(bool)
    (logits, first), (step_logits, second) = prefill, step
    (our_tokens, our_logits), (tokens, hf_logits) = ours, hf
    return {
        "prefill_diff": float(np.abs(logits[real] - to_numpy(first.logits)[real]).max()),
        "decode_diff": float(np.abs(np.asarray(step_logits) - to_numpy(second.logits)).max()),
        "generate_logits_diff": float(np.abs(our_logits - hf_logits).max()),
        "tokens_equal": bool(np.array_equal(our_tokens, tokens)),
        "tokens": our_tokens.tolist(),
        "hf_tokens": tokens.tolist(),
    }


def tiny_glmasr_with_processor(directory: Path, *, seed: int = 0):
    """A tiny GLM-ASR with a processor made locally (the bundled tiny-llama tokenizer plus its
    ``<|pad|>`` audio token, a 16-mel Whisper feature extractor), saved in ``directory``:
    (HF model, processor)."""
    from transformers import GlmAsrProcessor, PreTrainedTokenizerFast, WhisperFeatureExtractor

    root = Path(__file__).resolve().parents[2]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(root / "examples" / "tiny-llama")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|pad|>"]})
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    features = WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, chunk_length=30)
    processor = GlmAsrProcessor(features, tokenizer, audio_token="<|pad|>")
    model, _ = tiny_audio_llm(
        "glmasr",
        directory,
        seed=seed,
        audio_token_id=tokenizer.convert_tokens_to_ids("<|pad|>"),
        text_config={"vocab_size": len(tokenizer)},
        eos_token_id=tokenizer.eos_token_id,
    )
    processor.save_pretrained(directory)
    return model, processor
