"""Replacements for diffusers methods that torch.export cannot trace with dynamic sizes, or
traces wrongly: one entry per class, one module per family, each saying why.

Installed on the instance when a component is built (``mobius.diffusers.trace.instantiate``),
never on the class; the computation is the model's own for every input. May import
``mobius.synth.overrides`` (its installer) only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mobius.diffusers.overrides import (
    ace_step_condition,
    allegro,
    anyflow,
    anyflow_far,
    audio_padding,
    bria_fibo2,
    chroma,
    cogvideox,
    consistency_decoder,
    cosmos,
    cosmos3_omni,
    easyanimate,
    frame_loops,
    hidream,
    hunyuan_video15,
    hunyuan_video_framepack,
    joyimage,
    joyimage_edit_plus,
    kandinsky6,
    kandinsky6_sr,
    ltx2_decoder,
    lumina2,
    lumina_next,
    minimax_music3,
    mochi,
    omnigen,
    qwenimage,
    sana_wm,
    stft,
    unidiffuser,
    wan_animate,
    wan_animate2,
    z_image,
)
from mobius.synth.overrides import install_overrides

_M = "diffusers.models"
OVERRIDES: dict[str, Callable[[torch.nn.Module], None]] = {
    f"{_M}.transformers.transformer_chroma.ChromaCombinedTimestepTextProjEmbeddings": (
        chroma.guidance_zeros_by_shape
    ),
    f"{_M}.transformers.transformer_bria_fibo2.BriaFibo2Transformer2DModel": (
        bria_fibo2.gist_slots_by_mask
    ),
    f"{_M}.embeddings.CogVideoXPatchEmbed": cogvideox.joint_table_by_concat,
    f"{_M}.autoencoders.consistency_decoder_vae.ConsistencyDecoderVAE": (
        consistency_decoder.steps_by_index
    ),
    f"{_M}.transformers.transformer_easyanimate.EasyAnimateRotaryPosEmbed": (
        easyanimate.crop_from_sizes
    ),
    f"{_M}.autoencoders.autoencoder_kl_wan.AutoencoderKLWan": frame_loops.frames_fixed_per_graph,
    f"{_M}.autoencoders.autoencoder_kl_allegro.AutoencoderKLAllegro": allegro.tiled_batched,
    f"{_M}.autoencoders.autoencoder_kl_qwenimage.AutoencoderKLQwenImage": (
        frame_loops.frames_fixed_per_graph
    ),
    f"{_M}.transformers.transformer_cosmos.CosmosLearnablePositionalEmbed": (
        cosmos.norm_scale_from_width
    ),
    f"{_M}.transformers.transformer_cosmos.CosmosRotaryPosEmbed": (
        cosmos.rotary_positions_by_arange
    ),
    f"{_M}.transformers.transformer_joyimage.JoyImageEditTransformer3DModel": (
        joyimage.symbolic_rotary_positions
    ),
    f"{_M}.transformers.transformer_joyimage_edit_plus.JoyImageEditPlusTransformer3DModel": (
        joyimage_edit_plus.rotary_from_shape_tensor
    ),
    f"{_M}.autoencoders.autoencoder_kandinsky6_sr.Kandinsky6SRVAE": kandinsky6.single_pass,
    f"{_M}.autoencoders.autoencoder_kandinsky6_sr.Kandinsky6SRCausalConv3d": kandinsky6.causal_conv_in_one,
    f"{_M}.autoencoders.autoencoder_kandinsky6_sr.Kandinsky6SRSafeConv3d": kandinsky6.plain_conv,
    f"{_M}.transformers.transformer_kandinsky6.Kandinsky6RoPE3D": kandinsky6.rotary_grid_by_shape,
    f"{_M}.transformers.transformer_kandinsky6_sr.Kandinsky6SRRoPE3D": (
        kandinsky6.rotary_grid_by_shape
    ),
    f"{_M}.transformers.transformer_kandinsky6_sr.Kandinsky6SRAttention": (
        kandinsky6_sr.block_sparse_attention
    ),
    f"{_M}.transformers.transformer_kandinsky6_sr.Kandinsky6SRTransformer3DModel": (
        kandinsky6_sr.sliding_tile_prior_by_axes
    ),
    f"{_M}.transformers.transformer_lumina2.Lumina2Transformer2DModel": (
        lumina2.joint_sequence_by_gathers
    ),
    f"{_M}.condition_embedders.condition_embedder_minimax_music3.MiniMaxMusic3ConditionEncoder": (
        minimax_music3.length_by_integers
    ),
    f"{_M}.transformers.transformer_hunyuan_video15.HunyuanVideo15Transformer3DModel": (
        hunyuan_video15.valid_tokens_by_matrix
    ),
    f"{_M}.autoencoders.autoencoder_kl_hunyuanvideo15.HunyuanVideo15AttnBlock": (
        hunyuan_video15.causal_mask_by_frames
    ),
    f"{_M}.transformers.transformer_hunyuan_video_framepack.HunyuanVideoFramepackTransformer3DModel": (
        hunyuan_video_framepack.prompt_mask_at_every_batch
    ),
    f"{_M}.attention_processor.MochiAttention": mochi.masked_joint_attention,
    f"{_M}.transformers.transformer_mochi.MochiRoPE": mochi.centers_by_arange,
    f"{_M}.autoencoders.autoencoder_kl_mochi.MochiChunkedGroupNorm3D": mochi.whole_group_norm,
    f"{_M}.autoencoders.autoencoder_kl_mochi.MochiDownBlock3D": mochi.unchunked_attention,
    f"{_M}.autoencoders.autoencoder_cosmos3_audio.Cosmos3AudioSpectrogramConvNeXtEncoder": (
        stft.cosmos3_spectrogram_by_convolution
    ),
    f"{_M}.autoencoders.autoencoder_mmaudio.MMAudioMelSpectrogram": (
        stft.mmaudio_mel_by_convolution
    ),
    f"{_M}.autoencoders.autoencoder_kl_minimax_h3_audio.AutoencoderKLMiniMaxH3Audio": (
        audio_padding.minimax_h3_always_pads
    ),
    f"{_M}.autoencoders.autoencoder_cosmos3_audio.Cosmos3AVAEAudioTokenizer": (
        audio_padding.cosmos3_always_pads
    ),
    f"{_M}.autoencoders.autoencoder_same.PatchEmbed": audio_padding.same_patches_always_pad,
    f"{_M}.autoencoders.autoencoder_same.SAMETransformerResamplingBlock": (
        audio_padding.same_segments_always_pad
    ),
    f"{_M}.transformers.ace_step_transformer.AceStepTransformer1DModel": (
        audio_padding.ace_step_always_pads
    ),
    "diffusers.pipelines.ace_step.modeling_ace_step.AceStepTimbreEncoder": (
        ace_step_condition.references_by_comparison
    ),
    "diffusers.pipelines.ace_step.modeling_ace_step.AceStepConditionEncoder": (
        ace_step_condition.rows_checked_against_batch
    ),
    f"{_M}.transformers.transformer_sana_wm.GLUMBConvTemp": sana_wm.unchunked_feed_forward,
    f"{_M}.transformers.transformer_sana_wm.SanaWMRotaryPosEmbed": sana_wm.rotary_by_recipe,
    f"{_M}.transformers.transformer_qwenimage.QwenEmbedRope": qwenimage.rotary_by_gathers,
    f"{_M}.embeddings.LuminaPatchEmbed": lumina_next.one_image_size,
    f"{_M}.transformers.lumina_nextdit2d.LuminaNextDiT2DModel": (
        lumina_next.proportional_attention_by_tensor
    ),
    f"{_M}.transformers.transformer_qwenimage21.QwenImage21Transformer2DModel": (
        qwenimage.text_then_target_layout
    ),
    f"{_M}.transformers.transformer_hidream_image.HiDreamImageTransformer2DModel": (
        hidream.one_padding_token
    ),
    f"{_M}.transformers.transformer_hidream_image.MOEFeedForwardSwiGLU": hidream.dense_experts,
    f"{_M}.transformers.transformer_qwenimage.QwenImageTransformer2DModel": (
        qwenimage.text_length_from_shape
    ),
    f"{_M}.controlnets.controlnet_qwenimage.QwenImageControlNetModel": (
        qwenimage.text_length_from_shape
    ),
    f"{_M}.transformers.transformer_nucleusmoe_image.NucleusMoELayer": (
        qwenimage.expert_choice_by_batched_matmul
    ),
    f"{_M}.transformers.transformer_nucleusmoe_image.NucleusMoEImageTransformer2DModel": (
        qwenimage.text_length_from_shape
    ),
    f"{_M}.transformers.transformer_nucleusmoe_image.NucleusMoEEmbedRope": (
        qwenimage.nucleus_rotary_by_gathers
    ),
    f"{_M}.transformers.transformer_z_image.ZImageTransformer2DModel": (
        z_image.batched_transformer
    ),
    f"{_M}.controlnets.controlnet_z_image.ZImageControlNetModel": z_image.batched_controlnet,
    f"{_M}.transformers.transformer_omnigen.OmniGenTransformer2DModel": (
        omnigen.stacked_input_images
    ),
    f"{_M}.transformers.transformer_omnigen.OmniGenSuScaledRotaryEmbedding": (
        omnigen.scaling_by_where
    ),
    f"{_M}.autoencoders.ltx2_diffusion_decoder.LTX2VideoVaeNeighborhoodAttention": (
        ltx2_decoder.dense_window_attention
    ),
    f"{_M}.autoencoders.ltx2_diffusion_decoder.LTX2VideoVaeSwiGLU": (
        ltx2_decoder.untiled_feed_forward
    ),
    "diffusers.pipelines.deprecated.unidiffuser.modeling_text_decoder.UniDiffuserTextDecoder": (
        unidiffuser.no_kv_cache
    ),
    f"{_M}.transformers.transformer_wan_animate.WanAnimateTransformer3DModel": (
        wan_animate.face_frames_in_one_pass
    ),
    f"{_M}.transformers.transformer_wan_animate_2.WanAnimate2Transformer3DModel": (
        wan_animate2.batched_reference_transformer
    ),
    f"{_M}.transformers.transformer_cosmos3.Cosmos3OmniTransformer": cosmos3_omni.always_pads,
    f"{_M}.transformers.transformer_anyflow.AnyFlowRotaryPosEmbed": (
        anyflow.full_frame_check_per_axis
    ),
    f"{_M}.transformers.transformer_anyflow_far.AnyFlowCausalRotaryPosEmbed": (
        anyflow_far.rotary_checks_per_axis
    ),
    f"{_M}.transformers.transformer_anyflow_far.AnyFlowAttention": (
        anyflow_far.dense_causal_attention
    ),
    f"{_M}.transformers.transformer_anyflow_far.AnyFlowFARTransformer3DModel": (
        anyflow_far.dense_mask_in_forward
    ),
}


def install(model: torch.nn.Module) -> None:
    """Install every entry that names the class of one of ``model``'s modules."""
    install_overrides(model, OVERRIDES)
