"""Audio classes: VAEs over waveforms, and the forward arguments of audio models whose sizes the
config gives under keys of their own.

Audio latents are one-dimensional, ``[batch, channels, sample_length]`` (``LENGTH``, the axis
UNet1D's latents have): a waveform VAE's ``vae_encoder`` takes ``sample`` ``[batch,
audio_channels, sample_length]`` and its ``vae_decoder`` takes ``latent_sample`` ``[batch,
latent_channels, sample_length]``, the length axis named alike on both sides as image VAEs name
height and width alike. A VAE over mel spectrograms (LTX-2's) adds a last axis of mel bins
that its config fixes: ``[batch, channels, sample_length, mel_bins]``. Each class is a row of a table: where its config keeps the channel
counts, and how its encoder gives the latent distribution's parameters (CONTRACTS.md: mean and
log-variance concatenated on channels) or its latents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mobius.diffusers.tasks import (
    LENGTH,
    REFERENCES,
    SEQUENCE_2,
    DiffusersTask,
    call_vae_decoder,
    call_vae_encoder,
    reference_counts,
)
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
Encode = Callable[[torch.nn.Module, dict[str, torch.Tensor]], tuple]


def _mean_latents(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    """LongCat's encoder samples its posterior unless told not to: the mean, scaled as the
    encoder scales its latents."""
    return (model.encode(x["sample"], sample_posterior=False).latents,)


def _mean_and_log_std(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    """MiniMax-H3's posterior keeps the mean and the log standard deviation: the log-variance
    is twice the latter."""
    dist = model.encode(x["sample"]).latent_dist
    return (torch.cat([dist.mean, 2 * dist.logs], dim=1),)


@dataclass(frozen=True)
class AudioVae:
    """Where an audio VAE's config keeps its audio and latent channel counts, and its
    encoder's call (the generic one by default). A VAE over mel spectrograms has a last axis
    of mel bins, fixed by the config, in its audio and in its latents."""

    audio_channels: Callable[[Any], int | None]  # None: mono audio without a channel axis
    latent_channels: Callable[[Any], int]
    encode: Encode = call_vae_encoder
    latent_output: str = "latent_parameters"
    mel_bins: Callable[[Any], tuple[int, int]] | None = None  # (audio's, latents')


def _key(name: str, default: int) -> Callable[[Any], int]:
    return lambda cfg: cfg.get(name, default)


def _ltx2_mel_bins(cfg: Any) -> tuple[int, int]:
    """LTX-2's audio VAE halves the mel bins at each level but the last."""
    bins = cfg.get("mel_bins") or 64
    return bins, bins // 2 ** (len(cfg.get("ch_mult", (1, 2, 4))) - 1)


AUDIO_VAES = {
    "AutoencoderOobleck": AudioVae(_key("audio_channels", 2), _key("decoder_input_channels", 64)),
    "AutoencoderKLKVAEAudio": AudioVae(_key("num_channels", 1), _key("codebook_dim", 64)),
    "LongCatAudioDiTVae": AudioVae(
        _key("in_channels", 1), _key("latent_dim", 64), _mean_latents, "latents"
    ),
    "AutoencoderKLMiniMaxH3Audio": AudioVae(
        lambda cfg: 1, _key("latent_channels", 32), _mean_and_log_std
    ),
    "AutoencoderSAME": AudioVae(
        _key("audio_channels", 2), _key("latent_dim", 256), latent_output="latents"
    ),
    # mel spectrograms [batch, channels, sample_length, mel_bins], time on the length axis
    "AutoencoderKLLTX2Audio": AudioVae(
        _key("in_channels", 2), _key("latent_channels", 8), mel_bins=_ltx2_mel_bins
    ),
    # STFT front ends (overrides/stft.py): Cosmos3 takes each stereo channel apart, MMAudio a
    # mono waveform [batch, sample_length] and gives back a mel spectrogram
    "Cosmos3AVAEAudioTokenizer": AudioVae(
        lambda cfg: cfg.get("input_channels", 1) * (2 if cfg.get("stereo", True) else 1),
        _key("vocoder_input_dim", 64),
    ),
    "MMAudioVAE": AudioVae(lambda cfg: None, _key("latent_channels", 40)),
}


def audio_ruled(name: str) -> bool:
    """A class with an argument rule below: the generic contract's one graph, its latents read
    as audio (``components.component_tasks``)."""
    return any(owner == name for owner, _ in ARGUMENT_RULES)


def audio_tasks(name: str, cls: type) -> list[DiffusersTask] | None:
    """The graphs of audio VAE ``name``, ``vae_encoder`` and ``vae_decoder``; None for any other
    class."""
    vae = AUDIO_VAES.get(name)
    if vae is None:
        return None

    def bins(cfg: Any, side: int) -> tuple[int, ...]:
        return (vae.mel_bins(cfg)[side],) if vae.mel_bins else ()

    def encoder_inputs(cfg: Any) -> list[TensorSpec]:
        channels = vae.audio_channels(cfg)
        dims = (BATCH, *(() if channels is None else (channels,)), LENGTH, *bins(cfg, 0))
        return [TensorSpec("sample", FLOAT, dims)]

    def decoder_inputs(cfg: Any) -> list[TensorSpec]:
        dims = (BATCH, vae.latent_channels(cfg), LENGTH, *bins(cfg, 1))
        return [TensorSpec("latent_sample", FLOAT, dims)]

    return [
        DiffusersTask("vae_encoder", encoder_inputs, vae.encode, (vae.latent_output,)),
        DiffusersTask("vae_decoder", decoder_inputs, call_vae_decoder, ("sample",)),
    ]


# --- forward arguments the config sizes under keys of its own ---------------------------------

Rule = Callable[[Any], TensorSpec]


def _channels_by_length(name: str, key: str, default: int) -> Rule:
    """``[batch, cfg[key], sample_length]``: audio latents or a mel spectrogram."""
    return lambda cfg: TensorSpec(name, FLOAT, (BATCH, cfg.get(key, default), LENGTH))


def _frames_by_width(name: str, width: Callable[[Any], int]) -> Rule:
    """``[batch, sample_length, width]``: one feature vector per latent frame."""
    return lambda cfg: TensorSpec(name, FLOAT, (BATCH, LENGTH, width(cfg)))


def _text(key: str, default: int) -> Rule:
    """``[batch, sequence_length, cfg[key]]``: a text encoder's states."""
    return lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get(key, default))
    )


def _qwen_states(name: str, length: str) -> Rule:
    """``[batch, length, text_hidden_dim]``: ACE-Step's Qwen3 states of a prompt or lyrics."""
    return lambda cfg: TensorSpec(name, FLOAT, (BATCH, length, cfg.get("text_hidden_dim", 1024)))


def _padding(name: str, length: str) -> Rule:
    """``[batch, length]``: a tokenizer's padding mask, as a pipeline passes it (bool)."""
    return lambda _cfg: TensorSpec(name, torch.bool, (BATCH, length))


ARGUMENT_RULES: dict[tuple[str, str], Rule] = {
    ("MMAudioVocoder", "mel"): _channels_by_length("mel", "num_mels", 128),
    ("MiniMaxMusic3Vocoder", "latents"): _channels_by_length("latents", "latent_channels", 128),
    # conditioning aligned frame by frame with the latents
    ("MiniMaxMusic3Transformer1DModel", "encoder_hidden_states"): _frames_by_width(
        "encoder_hidden_states", lambda cfg: cfg.get("condition_dim", 2048)
    ),
    # the autoregressive stage's hidden states of every condition layer, concatenated
    ("MiniMaxMusic3ConditionEncoder", "hidden_states"): _frames_by_width(
        "hidden_states",
        lambda cfg: cfg.get("num_condition_layers", 8) * cfg.get("condition_hidden_dim", 4096),
    ),
    ("StableAudio3DurationEmbedder", "seconds"): lambda cfg: TensorSpec(
        "seconds", torch.float32, (BATCH,)
    ),
    ("StableAudio3DiTModel", "hidden_states"): _channels_by_length(
        "hidden_states", "io_channels", 256
    ),
    ("StableAudio3DiTModel", "encoder_hidden_states"): _text("cond_token_dim", 768),
    ("StableAudio3DiTModel", "global_hidden_states"): lambda cfg: TensorSpec(
        "global_hidden_states", FLOAT, (BATCH, cfg.get("global_cond_dim", 768))
    ),
    # LongCat's latents run frame by frame: [batch, sample_length, latent_dim]
    ("LongCatAudioDiTTransformer", "hidden_states"): _frames_by_width(
        "hidden_states", lambda cfg: cfg.get("latent_dim", 64)
    ),
    ("LongCatAudioDiTTransformer", "latent_cond"): _frames_by_width(
        "latent_cond", lambda cfg: cfg.get("latent_dim", 64)
    ),
    ("LongCatAudioDiTTransformer", "attention_mask"): lambda cfg: TensorSpec(
        "attention_mask", torch.bool, (BATCH, LENGTH)
    ),
    ("LongCatAudioDiTTransformer", "encoder_hidden_states"): _text("dit_text_dim", 768),
    # ACE-Step: latents frame by frame beside the context latents (source latents and chunk
    # masks) that fill the rest of in_channels; timestep_r is the flow's reference time
    ("AceStepTransformer1DModel", "hidden_states"): _frames_by_width(
        "hidden_states", lambda cfg: cfg.get("audio_acoustic_hidden_dim", 64)
    ),
    ("AceStepTransformer1DModel", "context_latents"): _frames_by_width(
        "context_latents",
        lambda cfg: cfg.get("in_channels", 192) - cfg.get("audio_acoustic_hidden_dim", 64),
    ),
    ("AceStepTransformer1DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states",
        FLOAT,
        (BATCH, SEQUENCE, cfg.get("encoder_hidden_size") or cfg.get("hidden_size", 2048)),
    ),
    ("AceStepTransformer1DModel", "timestep_r"): lambda cfg: TensorSpec(
        "timestep_r", torch.float32, (BATCH,)
    ),
    # ACE-Step's tokenizer takes the latents already cut into windows of pool_window_size
    # frames, one token per window; its detokenizer takes the tokens
    ("AceStepAudioTokenizer", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states",
        FLOAT,
        (BATCH, LENGTH, cfg.get("pool_window_size", 5), cfg.get("audio_acoustic_hidden_dim", 64)),
    ),
    ("AceStepAudioTokenDetokenizer", "hidden_states"): _frames_by_width(
        "hidden_states", lambda cfg: cfg.get("hidden_size", 2048)
    ),
    # ACE-Step's condition encoder: the prompt's and the lyrics' Qwen3 states (text_hidden_dim
    # wide, each with its padding mask, the lyrics of another length), and the reference
    # audios' latents packed along a first axis of their own, each tagged with its batch row
    ("AceStepConditionEncoder", "text_hidden_states"): _qwen_states("text_hidden_states", SEQUENCE),
    ("AceStepConditionEncoder", "text_attention_mask"): _padding("text_attention_mask", SEQUENCE),
    ("AceStepConditionEncoder", "lyric_hidden_states"): _qwen_states(
        "lyric_hidden_states", SEQUENCE_2
    ),
    ("AceStepConditionEncoder", "lyric_attention_mask"): _padding(
        "lyric_attention_mask", SEQUENCE_2
    ),
    ("AceStepConditionEncoder", "refer_audio_acoustic_hidden_states_packed"): lambda cfg: (
        TensorSpec(
            "refer_audio_acoustic_hidden_states_packed",
            FLOAT,
            (REFERENCES, LENGTH, cfg.get("timbre_hidden_dim", 64)),
        )
    ),
    ("AceStepConditionEncoder", "refer_audio_order_mask"): lambda _cfg: TensorSpec(
        "refer_audio_order_mask", torch.int64, (REFERENCES,)
    ),
    # Stable Audio's conditioning: the T5 states and the clip's start and end in seconds
    ("StableAudioProjectionModel", "text_hidden_states"): lambda cfg: TensorSpec(
        "text_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get("text_encoder_dim"))
    ),
    ("StableAudioProjectionModel", "start_seconds"): lambda cfg: TensorSpec(
        "start_seconds", FLOAT, (BATCH,)
    ),
    ("StableAudioProjectionModel", "end_seconds"): lambda cfg: TensorSpec(
        "end_seconds", FLOAT, (BATCH,)
    ),
    # AudioLDM2: CLAP's one embedding and T5's states, each with its padding mask
    ("AudioLDM2ProjectionModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, 1, cfg.get("text_encoder_dim"))
    ),
    ("AudioLDM2ProjectionModel", "hidden_states_1"): lambda cfg: TensorSpec(
        "hidden_states_1", FLOAT, (BATCH, SEQUENCE, cfg.get("text_encoder_1_dim"))
    ),
    ("AudioLDM2ProjectionModel", "attention_mask"): lambda cfg: TensorSpec(
        "attention_mask", torch.int64, (BATCH, 1)
    ),
    ("AudioLDM2ProjectionModel", "attention_mask_1"): lambda cfg: TensorSpec(
        "attention_mask_1", torch.int64, (BATCH, SEQUENCE)
    ),
    # MiniMax Music 3's depth decoder: one step per codebook, at most max_position_embeddings
    ("MiniMaxMusic3RVQDepthDecoder", "inputs_embeds"): lambda cfg: TensorSpec(
        "inputs_embeds", FLOAT, (BATCH, SEQUENCE, cfg.get("hidden_size", 4096))
    ),
    ("StableAudioDiTModel", "hidden_states"): _channels_by_length(
        "hidden_states", "in_channels", 64
    ),
    ("StableAudioDiTModel", "encoder_hidden_states"): _text("cross_attention_input_dim", 768),
    # the seconds' embedding as one token
    ("StableAudioDiTModel", "global_hidden_states"): lambda cfg: TensorSpec(
        "global_hidden_states", FLOAT, (BATCH, 1, cfg.get("global_states_input_dim", 1536))
    ),
}

# optional forward arguments each class's pipeline always passes: graph inputs all the same
PIPELINE_ARGUMENTS = {
    "StableAudio3DiTModel": {"encoder_attention_mask"},
    "LongCatAudioDiTTransformer": {"latent_cond", "attention_mask"},
    "StableAudioProjectionModel": {"text_hidden_states", "start_seconds", "end_seconds"},
    "StableAudioDiTModel": {"global_hidden_states"},
    "AudioLDM2ProjectionModel": {
        "hidden_states",
        "hidden_states_1",
        "attention_mask",
        "attention_mask_1",
    },
}


def _stable_audio_rotary(cfg: Any, x: dict[str, torch.Tensor]) -> Any:
    """Stable Audio's pipeline builds the rotary table over the latents and the global token,
    from their lengths alone: the graph builds it the same way."""
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    length = x["hidden_states"].shape[2] + x["global_hidden_states"].shape[1]
    dim = cfg.get("attention_head_dim") // 2
    positions = torch.arange(length, device=x["hidden_states"].device)  # as for an int length
    return get_1d_rotary_pos_embed(dim, positions, use_real=True, repeat_interleave_real=False)


# forward arguments each class's pipeline computes from the inputs' sizes: computed in the graph
# (argument_rules.DERIVED)
DERIVED = {("StableAudioDiTModel", "rotary_embedding"): _stable_audio_rotary}


def reference_tags(sizes: dict[str, int]) -> dict[str, torch.Tensor]:
    """ACE-Step's ``refer_audio_order_mask`` as its callers pack references: sorted batch rows,
    every row at least once, rows holding different counts (``tasks.reference_counts``)."""
    counts = torch.tensor(reference_counts(sizes[BATCH]))
    return {"refer_audio_order_mask": torch.repeat_interleave(torch.arange(len(counts)), counts)}
