"""Shape rules for forward arguments the generic contract's table (``generic.argument_spec``)
does not size: arguments named after one class's own keys, or sized by another input.

Each rule maps (class name, argument) to a function of the config giving the graph input, with
the reason it has that shape. A rule is consulted before the generic table, so a class's own
meaning of a common name (``x``, ``fps``) wins; a class with rules takes the generic contract
(``components.component_tasks``). ``DERIVED`` computes, in the graph, arguments a pipeline
builds from the other inputs' sizes (position ranges); ``NEEDED`` lists arguments optional in a
signature that the forward reads all the same. Axes that follow others (a joint text-and-image
sequence, frames folded into the batch, ...) are named in ``tasks.related_sizes``. The audio
classes' rules sit beside their VAEs in ``audio_args.py`` and join these tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from mobius.diffusers import (
    audio_args,
    cosmos3_args,
    far_chunks,
    latent_grid,
    list_args,
    protein_args,
)
from mobius.diffusers.folded_frames import frame_count
from mobius.diffusers.structured_args import UNION_IMAGES
from mobius.diffusers.tasks import (
    BATCH_FRAMES,
    FACE_FRAMES,
    FRAMES,
    HEIGHT,
    IMAGE_SEQUENCE,
    LENGTH,
    NOISE_LEVELS,
    PACKED,
    PATCHES,
    POSE_FRAMES,
    SEQUENCE_2,
    TEXT_AND_IMAGE,
    WIDTH,
)
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
Rule = Callable[[Any], TensorSpec]


def _features(name: str, key: str, default: int) -> Rule:
    """One feature vector per row, as wide as config key ``key``."""
    return lambda cfg: TensorSpec(name, FLOAT, (BATCH, cfg.get(key) or default))


def _tokens(name: str, key: str, default: int) -> Rule:
    """A sequence of tokens per row, each as wide as config key ``key``."""
    return lambda cfg: TensorSpec(name, FLOAT, (BATCH, SEQUENCE, cfg.get(key) or default))


def _per_row(name: str) -> Rule:
    """One scalar per row (a second timestep, a frame rate): embedded like a timestep."""
    return lambda _cfg: TensorSpec(name, torch.float32, (BATCH,))


def _per_frame(name: str) -> Rule:
    """One scalar per row and frame (a timestep per frame)."""
    return lambda _cfg: TensorSpec(name, torch.float32, (BATCH, FRAMES))


def _video(name: str, frames_first: bool = False, channels_key: str = "in_channels") -> Rule:
    """Video latents, ``[batch, channels, frames, height, width]`` or frames first, with
    ``channels_key``'s channels."""

    def rule(cfg: Any) -> TensorSpec:
        channels = cfg.get(channels_key) or 4
        axes = (FRAMES, channels) if frames_first else (channels, FRAMES)
        return TensorSpec(name, FLOAT, (BATCH, *axes, HEIGHT, WIDTH))

    return rule


def _channels_last_video(cfg: Any) -> TensorSpec:
    """Kandinsky 5 and 6's latents, ``[batch, frames, height, width, channels]``: under visual_cond the
    conditioning frames and their mask are concatenated on the channels (2 * in_visual_dim + 1)."""
    channels = cfg.get("in_visual_dim", 4)
    channels = 2 * channels + 1 if cfg.get("visual_cond") else channels
    return TensorSpec("hidden_states", FLOAT, (BATCH, FRAMES, HEIGHT, WIDTH, channels))


RULES: dict[tuple[str, str], Rule] = {
    # a linear projection of CLIP image embeddings, hidden_size wide
    ("CLIPImageProjection", "x"): _features("x", "hidden_size", 768),
    # Flux Redux: SigLIP image tokens, redux_dim wide, projected to text tokens
    ("ReduxImageEncoder", "x"): _tokens("x", "redux_dim", 1152),
    # AnyFlow's flow map conditions on a target timestep beside the source one, both per frame
    ("AnyFlowTransformer3DModel", "timestep"): _per_frame("timestep"),
    ("AnyFlowTransformer3DModel", "r_timestep"): _per_frame("r_timestep"),
    # ... and takes its latents frames first, as its forward says
    ("AnyFlowTransformer3DModel", "hidden_states"): _video("hidden_states", frames_first=True),
    # I2VGen-XL: a video UNet (no "3D" in its name); the frame rate is embedded like the
    # timestep; the first frame's latents are repeated over the frames as the sample's shape;
    # the CLIP image embedding is cross_attention_dim wide (its context embedding projects it to
    # in_channels tokens)
    ("I2VGenXLUNet", "sample"): _video("sample"),
    ("I2VGenXLUNet", "fps"): _per_row("fps"),
    ("I2VGenXLUNet", "image_latents"): _video("image_latents"),
    ("I2VGenXLUNet", "image_embeddings"): _features("image_embeddings", "cross_attention_dim",
                                                    1024),
    # ERNIE-Image: the text states padded to the longest prompt, and each prompt's length (its
    # attention mask, and the first rotary coordinate of every image token)
    ("ErnieImageTransformer2DModel", "text_bth"): _tokens("text_bth", "text_in_dim", 2560),
    ("ErnieImageTransformer2DModel", "text_lens"): lambda _cfg: TensorSpec(
        "text_lens", torch.int64, (BATCH,)),
    # aMUSEd's U-ViT: one codebook index per latent pixel; pooled text of cond_embed_dim; the
    # micro-conditions each embedded micro_cond_encode_dim wide, micro_cond_embed_dim in all
    ("UVit2DModel", "input_ids"): lambda _cfg: TensorSpec(
        "input_ids", torch.int64, (BATCH, HEIGHT, WIDTH)),
    ("UVit2DModel", "encoder_hidden_states"): _tokens("encoder_hidden_states",
                                                      "encoder_hidden_size", 768),
    ("UVit2DModel", "pooled_text_emb"): _features("pooled_text_emb", "cond_embed_dim", 768),
    ("UVit2DModel", "micro_conds"): lambda cfg: TensorSpec("micro_conds", FLOAT, (
        BATCH, cfg.get("micro_cond_embed_dim", 1280) // cfg.get("micro_cond_encode_dim", 256))),
    # Kandinsky 5 and 6: channels-last video latents; Qwen2.5-VL text states of in_text_dim;
    # CLIP's pooled text of in_text_dim2
    **{(kandinsky, name): rule for kandinsky in ("Kandinsky5Transformer3DModel",
                                                 "Kandinsky6Transformer3DModel")
       for name, rule in (
           ("hidden_states", _channels_last_video),
           ("encoder_hidden_states", _tokens("encoder_hidden_states", "in_text_dim", 3584)),
           ("pooled_projections", _features("pooled_projections", "in_text_dim2", 768)))},
    # Kandinsky 6 SR: channels-last video latents, the noisy latent, the anchor latent and its
    # mask concatenated on the channels (2 * in_visual_dim + 1)
    ("Kandinsky6SRTransformer3DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, FRAMES, HEIGHT, WIDTH, 2 * cfg.get("in_visual_dim", 64) + 1)),
    # Wan VACE: the control video's latents (vace_in_channels), and one scale per VACE layer
    ("WanVACETransformer3DModel", "control_hidden_states"): _video(
        "control_hidden_states", channels_key="vace_in_channels"),
    ("WanVACETransformer3DModel", "control_hidden_states_scale"): lambda cfg: TensorSpec(
        "control_hidden_states_scale", FLOAT, (len(cfg.get("vace_layers")),)),
    # Stable Cascade: the noise level as a ratio in [0, 1] per row; CLIP's pooled text as one
    # token of clip_text_pooled_in_channels (mapped to clip_seq tokens)
    ("StableCascadeUNet", "timestep_ratio"): _per_row("timestep_ratio"),
    ("StableCascadeUNet", "clip_text_pooled"): lambda cfg: TensorSpec(
        "clip_text_pooled", FLOAT, (BATCH, 1, cfg.get("clip_text_pooled_in_channels", 1280))),
    # Krea 2: packed patch tokens; each text token the stack of num_text_layers tapped layers of
    # its encoder; one (t, h, w) rotary position per token of the prompt then the image
    ("Krea2Transformer2DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("in_channels", 64))),
    ("Krea2Transformer2DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, SEQUENCE, cfg.get("num_text_layers", 12),
                                         cfg.get("text_hidden_dim", 2560))),
    ("Krea2Transformer2DModel", "position_ids"): lambda _cfg: TensorSpec(
        "position_ids", FLOAT, (TEXT_AND_IMAGE, 3)),
    # Ideogram 4: one packed sequence of text and image tokens; each token's latents (zero but
    # for image tokens), LLM features (zero but for text tokens), (t, h, w) position, sample
    # id within the packed batch (attention stays within a segment) and role indicator
    ("Ideogram4Transformer2DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, TEXT_AND_IMAGE, cfg.get("in_channels", 128))),
    ("Ideogram4Transformer2DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, TEXT_AND_IMAGE,
                                         cfg.get("llm_features_dim", 53248))),
    ("Ideogram4Transformer2DModel", "position_ids"): lambda _cfg: TensorSpec(
        "position_ids", torch.int64, (BATCH, TEXT_AND_IMAGE, 3)),
    ("Ideogram4Transformer2DModel", "segment_ids"): lambda _cfg: TensorSpec(
        "segment_ids", torch.int64, (BATCH, TEXT_AND_IMAGE)),
    ("Ideogram4Transformer2DModel", "indicator"): lambda _cfg: TensorSpec(
        "indicator", torch.int64, (BATCH, TEXT_AND_IMAGE)),
    # Ideogram 4's prompt enhancer: the LM head grafted onto its Qwen3-VL text encoder, over the
    # encoder's last hidden states (hidden_size wide), one vocabulary logit row per token
    ("Ideogram4PromptEnhancerHead", "hidden_states"): _tokens("hidden_states", "hidden_size",
                                                              4096),
    # AnimateDiff's motion UNet and SparseCtrl: the prompt repeated per frame, frames folded into
    # the batch (their pipeline repeats it so)
    **{(animatediff, "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH_FRAMES, SEQUENCE, cfg.get("cross_attention_dim")))
       for animatediff in ("UNetMotionModel", "SparseControlNetModel")},
    # SparseCtrl: a video ControlNet (no "3D" in its name); under
    # use_simplified_condition_embedding its conditioning frames are embedded by one 3x3
    # convolution, so they are latent-sized, and concat_conditioning_mask adds a one-channel mask
    # of the frames that condition
    ("SparseControlNetModel", "sample"): _video("sample"),
    ("SparseControlNetModel", "controlnet_cond"): _video(
        "controlnet_cond", channels_key="conditioning_channels"),
    ("SparseControlNetModel", "conditioning_mask"): lambda _cfg: TensorSpec(
        "conditioning_mask", FLOAT, (BATCH, 1, FRAMES, HEIGHT, WIDTH)),
    # UniDiffuser's U-ViT: one position table over the CLIP image token, num_text_tokens text
    # tokens and the sample_size-square latent's patches, so those sizes are the config's; the
    # image and the text each noised to a timestep of their own
    ("UniDiffuserModel", "latent_image_embeds"): lambda cfg: TensorSpec(
        "latent_image_embeds", FLOAT, (BATCH, cfg.get("in_channels"), cfg.get("sample_size"),
                                       cfg.get("sample_size"))),
    ("UniDiffuserModel", "image_embeds"): lambda cfg: TensorSpec(
        "image_embeds", FLOAT, (BATCH, 1, cfg.get("clip_img_dim", 512))),
    ("UniDiffuserModel", "prompt_embeds"): lambda cfg: TensorSpec(
        "prompt_embeds", FLOAT, (BATCH, cfg.get("num_text_tokens", 77), cfg.get("text_dim", 768))),
    ("UniDiffuserModel", "timestep_img"): _per_row("timestep_img"),
    ("UniDiffuserModel", "timestep_text"): _per_row("timestep_text"),
    # Bria FIBO 2: per text token, the Perceiver's bundle then one per injection block, each
    # cap_feat_dim wide
    ("BriaFibo2Transformer2DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, 1 + len(cfg.get("injection_layer_ids")), SEQUENCE,
                                         cfg.get("cap_feat_dim"))),
    # LTX-Video: packed patch tokens, and each token's (frame, row, column) coordinates, which
    # its condition pipeline passes (the num_frames, height and width ints otherwise build them)
    ("LTXVideoTransformer3DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("in_channels", 128))),
    ("LTXVideoTransformer3DModel", "video_coords"): lambda _cfg: TensorSpec(
        "video_coords", FLOAT, (BATCH, 3, IMAGE_SEQUENCE)),
    # Anima's text conditioner: Qwen3's hidden states (source_dim) attended by the T5 token ids
    # of the same prompt, a text of its own length
    ("AnimaTextConditioner", "source_hidden_states"): _tokens("source_hidden_states",
                                                              "source_dim", 1024),
    ("AnimaTextConditioner", "target_input_ids"): lambda _cfg: TensorSpec(
        "target_input_ids", torch.int64, (BATCH, SEQUENCE_2)),
    # GLM-Image: one prior (vector-quantised) token per patch of the latents, and per token
    # whether its prior is dropped (classifier-free guidance's unconditional pass)
    ("GlmImageTransformer2DModel", "prior_token_id"): lambda _cfg: TensorSpec(
        "prior_token_id", torch.int64, (BATCH, PATCHES)),
    ("GlmImageTransformer2DModel", "prior_token_drop"): lambda _cfg: TensorSpec(
        "prior_token_drop", torch.bool, (BATCH, PATCHES)),
    # LTX-2: packed video tokens and packed audio tokens (sample_length of them) beside each
    # other, the prompt's states for each, and each token's coordinates as [start, end) pairs
    # (video: frame, row, column; audio: time), as its pipelines may pass them (Python ints of
    # the grid otherwise build them)
    ("LTX2VideoTransformer3DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("in_channels", 128))),
    ("LTX2VideoTransformer3DModel", "audio_hidden_states"): lambda cfg: TensorSpec(
        "audio_hidden_states", FLOAT, (BATCH, LENGTH, cfg.get("audio_in_channels", 128))),
    ("LTX2VideoTransformer3DModel", "encoder_hidden_states"): _tokens(
        "encoder_hidden_states", "caption_channels", 3840),
    ("LTX2VideoTransformer3DModel", "audio_encoder_hidden_states"): _tokens(
        "audio_encoder_hidden_states", "caption_channels", 3840),
    ("LTX2VideoTransformer3DModel", "video_coords"): lambda _cfg: TensorSpec(
        "video_coords", FLOAT, (BATCH, 3, IMAGE_SEQUENCE, 2)),
    ("LTX2VideoTransformer3DModel", "audio_coords"): lambda _cfg: TensorSpec(
        "audio_coords", FLOAT, (BATCH, 1, LENGTH, 2)),
    # SANA-WM: one timestep per frame (LTX style, [batch, 1, frames]); the prompt's states with a
    # singleton axis before the tokens, caption_channels wide
    ("SanaWMTransformer3DModel", "timestep"): lambda _cfg: TensorSpec(
        "timestep", torch.float32, (BATCH, 1, FRAMES)),
    ("SanaWMTransformer3DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, 1, SEQUENCE, cfg.get("caption_channels", 2304))),
    # MiniMax-H3: one packed sequence of the prompt's, the video's patch and the audio's frame
    # tokens, each modality's rows placed by an index tensor into it; each row's (t, h, w)
    # rotary position, modality tag and noise level (an index into timestep's distinct levels,
    # sigmas in [0, 1]), all shared by the batch
    ("MiniMaxH3Transformer3DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("in_channels", 24) * math.prod(
            cfg.get("patch_size", (1, 2, 2))))),
    ("MiniMaxH3Transformer3DModel", "audio_hidden_states"): lambda cfg: TensorSpec(
        "audio_hidden_states", FLOAT, (BATCH, LENGTH, cfg.get("audio_in_channels", 32))),
    ("MiniMaxH3Transformer3DModel", "encoder_hidden_states"): _tokens(
        "encoder_hidden_states", "text_dim", 5120),
    ("MiniMaxH3Transformer3DModel", "timestep"): lambda _cfg: TensorSpec(
        "timestep", torch.float32, (NOISE_LEVELS,)),
    ("MiniMaxH3Transformer3DModel", "timestep_indices"): lambda _cfg: TensorSpec(
        "timestep_indices", torch.int64, (PACKED,)),
    ("MiniMaxH3Transformer3DModel", "token_tags"): lambda _cfg: TensorSpec(
        "token_tags", torch.int64, (PACKED,)),
    ("MiniMaxH3Transformer3DModel", "position_ids"): lambda _cfg: TensorSpec(
        "position_ids", torch.float32, (PACKED, 3)),
    ("MiniMaxH3Transformer3DModel", "video_indices"): lambda _cfg: TensorSpec(
        "video_indices", torch.int64, (IMAGE_SEQUENCE,)),
    ("MiniMaxH3Transformer3DModel", "audio_indices"): lambda _cfg: TensorSpec(
        "audio_indices", torch.int64, (LENGTH,)),
    ("MiniMaxH3Transformer3DModel", "text_indices"): lambda _cfg: TensorSpec(
        "text_indices", torch.int64, (SEQUENCE,)),
    # ControlNet Union: which of its num_control_type modes are in use (0 or 1 each); per control
    # image (structured_args.UNION_IMAGES of them) its mode, an index into its task embedding,
    # and its scale
    ("ControlNetUnionModel", "control_type"): _features("control_type", "num_control_type", 6),
    ("ControlNetUnionModel", "control_type_idx"): lambda _cfg: TensorSpec(
        "control_type_idx", torch.int64, (UNION_IMAGES,)),
    ("ControlNetUnionModel", "conditioning_scale"): lambda _cfg: TensorSpec(
        "conditioning_scale", torch.float32, (UNION_IMAGES,)),
    # T5FilmDecoder: the noisy spectrogram frames (at most targets_length, its position table)
    # and the noise time in [0, 1) per row; its encodings are structured_args' pairs
    ("T5FilmDecoder", "decoder_input_tokens"): lambda cfg: TensorSpec(
        "decoder_input_tokens", FLOAT, (BATCH, LENGTH, cfg.get("input_dims", 128))),
    ("T5FilmDecoder", "decoder_noise_time"): _per_row("decoder_noise_time"),
    # SANA-WM's refiner: packed video tokens of one window, a timestep per token, the prompt's
    # states (caption_channels); its rotary table is structured_args' (cos, sin) pair
    ("SanaWMLTX2RefinerTransformer3DModel", "hidden_states"): lambda cfg: TensorSpec(
        "hidden_states", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("in_channels", 128))),
    ("SanaWMLTX2RefinerTransformer3DModel", "timestep"): lambda _cfg: TensorSpec(
        "timestep", torch.float32, (BATCH, IMAGE_SEQUENCE)),
    ("SanaWMLTX2RefinerTransformer3DModel", "encoder_hidden_states"): _tokens(
        "encoder_hidden_states", "caption_channels", 3840),
    # UniDiffuser's caption decoder (GPT-2 behind a prefix): the caption's token ids (below
    # vocab_size) after prefix_length prefix vectors (the CLIP text states, prefix_inner_dim
    # wide); the prefix count is the config's (its pipeline's features have that many rows)
    ("UniDiffuserTextDecoder", "input_ids"): lambda _cfg: TensorSpec(
        "input_ids", torch.int64, (BATCH, SEQUENCE)),
    ("UniDiffuserTextDecoder", "prefix_embeds"): lambda cfg: TensorSpec(
        "prefix_embeds", FLOAT, (BATCH, cfg.get("prefix_length"), cfg.get("prefix_inner_dim"))),
    # T2I-Adapter: the control image, in pixels (the latents' size times the VAE's 8)
    ("T2IAdapter", "x"): lambda cfg: TensorSpec(
        "x", FLOAT, (BATCH, cfg.get("in_channels", 3), "image_height", "image_width")),
    # HunyuanVideo 1.5: a second prompt (ByT5, text_embed_2_dim wide) of its own length with its
    # padding, and the image's SigLIP tokens (zeros for text-to-video, as its pipeline passes)
    ("HunyuanVideo15Transformer3DModel", "encoder_hidden_states"): _tokens(
        "encoder_hidden_states", "text_embed_dim", 3584),
    ("HunyuanVideo15Transformer3DModel", "encoder_hidden_states_2"): lambda cfg: TensorSpec(
        "encoder_hidden_states_2", FLOAT, (BATCH, SEQUENCE_2, cfg.get("text_embed_2_dim", 1472))),
    ("HunyuanVideo15Transformer3DModel", "encoder_attention_mask_2"): lambda _cfg: TensorSpec(
        "encoder_attention_mask_2", torch.bool, (BATCH, SEQUENCE_2)),
    ("HunyuanVideo15Transformer3DModel", "image_embeds"): lambda cfg: TensorSpec(
        "image_embeds", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("image_embed_dim", 1152))),
    # HunyuanVideo Framepack: SigLIP image tokens (image_proj_dim wide); each latent frame's
    # index (its rotary time); the history's clean latents at 1x, 2x and 4x, each with its frame
    # indices, in the frame counts its pipeline fixes (history_sizes [1, 2, 16], the 1x one after a
    # one-frame prefix)
    ("HunyuanVideoFramepackTransformer3DModel", "encoder_hidden_states"): _tokens(
        "encoder_hidden_states", "text_embed_dim", 4096),
    ("HunyuanVideoFramepackTransformer3DModel", "image_embeds"): lambda cfg: TensorSpec(
        "image_embeds", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("image_proj_dim", 1152))),
    ("HunyuanVideoFramepackTransformer3DModel", "indices_latents"): lambda _cfg: TensorSpec(
        "indices_latents", torch.int64, (FRAMES,)),
    **{("HunyuanVideoFramepackTransformer3DModel", name): rule
       for latents, indices, frames in (
           ("latents_clean", "indices_latents_clean", 2),
           ("latents_history_2x", "indices_latents_history_2x", 2),
           ("latents_history_4x", "indices_latents_history_4x", 16))
       for name, rule in (
           (latents, lambda cfg, latents=latents, frames=frames: TensorSpec(
               latents, FLOAT, (BATCH, cfg.get("in_channels", 16), frames, HEIGHT, WIDTH))),
           (indices, lambda _cfg, indices=indices, frames=frames: TensorSpec(
               indices, torch.int64, (frames,))))},
    # Wan Animate: CLIP's image tokens (image_dim wide); the pose video's latents, one frame
    # fewer than the video's (its first is the reference image's); the face video in pixels at
    # the motion encoder's size, 4 (T - 1) + 1 frames for T pose latent frames (the VAE's 4x), as
    # its pipeline passes them: both frame axes follow the video's (tasks.DERIVED_AXES). With
    # added_kv_proj_dim its attention reads the last 512 tokens of the joint context as the
    # prompt's (the rest the image's): the prompt is padded to 512 tokens, as its pipeline does
    ("WanAnimateTransformer3DModel", "encoder_hidden_states"): lambda cfg: TensorSpec(
        "encoder_hidden_states", FLOAT, (BATCH, 512 if cfg.get("added_kv_proj_dim") else SEQUENCE,
                                         cfg.get("text_dim", 4096))),
    ("WanAnimateTransformer3DModel", "encoder_hidden_states_image"): lambda cfg: TensorSpec(
        "encoder_hidden_states_image", FLOAT, (BATCH, IMAGE_SEQUENCE, cfg.get("image_dim", 1280))),
    ("WanAnimateTransformer3DModel", "pose_hidden_states"): lambda cfg: TensorSpec(
        "pose_hidden_states", FLOAT, (BATCH, cfg.get("latent_channels") or (
            cfg.get("in_channels") - 4) // 2, POSE_FRAMES, HEIGHT, WIDTH)),
    ("WanAnimateTransformer3DModel", "face_pixel_values"): lambda cfg: TensorSpec(
        "face_pixel_values", FLOAT, (BATCH, 3, FACE_FRAMES, cfg.get("motion_encoder_size", 512),
                                     cfg.get("motion_encoder_size", 512))),
}  # fmt: skip


def _kandinsky5_visual_positions(cfg: Any, x: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Each latent axis's patch positions (its pipeline's ``visual_rope_pos``)."""
    _, frames, height, width, _ = x["hidden_states"].shape
    steps = cfg.get("patch_size", (1, 2, 2))
    device = x["hidden_states"].device
    return [torch.arange(n // p, device=device) for n, p in zip((frames, height, width), steps,
                                                                strict=True)]  # fmt: skip


# arguments the pipeline computes from the other inputs' sizes (position ranges over the latent
# grid or the prompt): computed in the graph from those inputs, not graph inputs themselves
DERIVED: dict[tuple[str, str], Callable[[Any, dict[str, torch.Tensor]], Any]] = {
    ("Kandinsky5Transformer3DModel", "visual_rope_pos"): _kandinsky5_visual_positions,
    ("Kandinsky5Transformer3DModel", "text_rope_pos"): lambda _cfg, x: torch.arange(
        x["encoder_hidden_states"].shape[1], device=x["encoder_hidden_states"].device),
    # frames folded into the batch: the count is the unfolded input's frame axis
    ("TransformerTemporalModel", "num_frames"): lambda _cfg, x: frame_count(x, "hidden_states"),
}  # fmt: skip

# optional in the signature, read by the forward all the same
NEEDED: dict[str, set[str]] = {
    "I2VGenXLUNet": {"image_embeddings"},
    "LTXVideoTransformer3DModel": {"video_coords"},
    "LTX2VideoTransformer3DModel": {"video_coords", "audio_coords"},
    "SparseControlNetModel": {"conditioning_mask"},  # read under concat_conditioning_mask
    "SanaWMTransformer3DModel": {"encoder_attention_mask"},  # its cross-attention's bias
    "WanVACETransformer3DModel": {"control_hidden_states", "control_hidden_states_scale"},
    # its pipeline passes the prompts' padding: each prompt's length sets its gist-token count
    "BriaFibo2Transformer2DModel": {"encoder_attention_mask"},
    # its pipeline passes the history latents (every call; the forward reads them all)
    "HunyuanVideoFramepackTransformer3DModel": {
        "latents_clean",
        "indices_latents_clean",
        "latents_history_2x",
        "indices_latents_history_2x",
        "latents_history_4x",
        "indices_latents_history_4x",
    },
    # its pipelines pass the ByT5 prompt and the image tokens (zeros for text-to-video)
    "HunyuanVideo15Transformer3DModel": {
        "encoder_hidden_states_2",
        "encoder_attention_mask_2",
        "image_embeds",
    },
    "SanaWMLTX2RefinerTransformer3DModel": {"encoder_attention_mask"},  # its pipeline passes it
    # its pipeline passes the image tokens, the pose latents and the face video (every call)
    "WanAnimateTransformer3DModel": {
        "encoder_hidden_states_image",
        "pose_hidden_states",
        "face_pixel_values",
    },
}


# the audio classes' rules, kept beside their VAEs (audio_args.py), in the same tables
RULES |= audio_args.ARGUMENT_RULES
DERIVED |= audio_args.DERIVED
NEEDED |= audio_args.PIPELINE_ARGUMENTS
# latent grids a pipeline passes as Python ints (latent_grid.py): unpacked latents in, the ints
# derived from their size
RULES |= latent_grid.RULES
DERIVED |= latent_grid.DERIVED
NEEDED |= latent_grid.NEEDED
# the list-argument classes' stacked inputs (list_args.py)
RULES |= list_args.ARGUMENT_RULES
NEEDED |= list_args.NEEDED
# RFD4-Proteina's per-token molecular tensors (protein_args.py)
RULES |= protein_args.ARGUMENT_RULES
NEEDED |= protein_args.PIPELINE_ARGUMENTS
# AnyFlow FAR: frames fixed by the config's chunk_partition, derived as that list (far_chunks.py)
RULES |= far_chunks.ARGUMENT_RULES
DERIVED |= far_chunks.DERIVED
# Cosmos 3's omni transformer: one vision item per call, the packed layout derived (cosmos3_args.py)
RULES |= cosmos3_args.ARGUMENT_RULES
DERIVED |= cosmos3_args.DERIVED


def rule_spec(name: str, cfg: Any, cls: type) -> TensorSpec | None:
    """The graph input a rule gives ``cls.forward``'s argument ``name``, or None."""
    rule = RULES.get((cls.__name__, name))
    return rule(cfg) if rule else None


def ruled(cls: type) -> set[str]:
    """The arguments of ``cls`` a rule sizes or derives."""
    return {arg for owner, arg in [*RULES, *DERIVED] if owner == cls.__name__}


def derived(cls: type) -> set[str]:
    """The arguments of ``cls`` computed from its other inputs."""
    return {arg for owner, arg in DERIVED if owner == cls.__name__}


def derive(cls: type, cfg: Any, x: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The derived arguments of ``cls`` for the inputs ``x``."""
    return {arg: rule(cfg, x) for (owner, arg), rule in DERIVED.items() if owner == cls.__name__}
