"""Replacements for HF methods that are wrong in the form mobius traces: one entry per class.

Each entry says why, in the module that holds it (one module per family). They install on the
instance (``make_traceable``), never on the class. An override may import ``mobius.tasks`` and
``mobius.errors``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mobius.synth.overrides import (
    blt,
    canine,
    cosmos3_edge,
    cpmant,
    deepseek_v4,
    ernie4_5_vl,
    funnel,
    gemma4,
    git,
    granite_speech,
    hunyuan_vl,
    kimi_k25,
    kosmos2,
    led,
    lfm3_vl,
    llama4,
    llava_next,
    longformer,
    longt5,
    minicpmv,
    muse_glimmer,
    musicflamingo,
    nemotron3_5_transcribe,
    paddleocr_vl,
    pegasus_x,
    pixtral,
    prophetnet,
    qwen3_asr,
    qwen4_exp,
    qwen_omni,
    reformer,
    rwkv,
    step3p7,
    switch_moe,
    unlimited_ocr,
    video_llama_3,
    xlnet,
    xlstm,
)

OVERRIDES: dict[str, Callable[[torch.nn.Module], None]] = {
    "transformers.models.blt.modeling_blt.BltModel": blt.traceable,
    "transformers.models.canine.modeling_canine.CanineAttention": canine.dense_local_chunks,
    "transformers.models.canine.modeling_canine.CanineModel": canine.molecules_gathered,
    "transformers.models.cpmant.modeling_cpmant.CpmAntModel": cpmant.padding_by_arange,
    "transformers.models.cosmos3_edge.modeling_cosmos3_edge.Cosmos3EdgeVisionEmbeddings": (
        cosmos3_edge.positions_per_patch
    ),
    "transformers.models.hunyuan_vl.modeling_hunyuan_vl.HunYuanVLVisionPatchEmbed": (
        hunyuan_vl.positions_per_patch
    ),
    "transformers.models.hunyuan_vl.modeling_hunyuan_vl.HunYuanVLVisionTransformer": (
        hunyuan_vl.merged_per_token
    ),
    "transformers.models.hy_v4_vl.modeling_hy_v4_vl.HYV4VLVisionPatchEmbed": (
        hunyuan_vl.shifted_positions_per_patch
    ),
    "transformers.models.hy_v4_vl.modeling_hy_v4_vl.HYV4VLVisionModel": (
        hunyuan_vl.newline_rows_per_token
    ),
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4HCACompressor": (
        deepseek_v4.hca_padded_windows
    ),
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4CSACompressor": (
        deepseek_v4.csa_padded_windows
    ),
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4Indexer": (
        deepseek_v4.indexer_padded_windows
    ),
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeMoeBlock": (
        ernie4_5_vl.experts_by_type
    ),
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe."
    "Ernie4_5_VLMoeVariableResolutionResamplerModel": ernie4_5_vl.image_frames_paired,
    "transformers.models.funnel.modeling_funnel.FunnelAttentionStructure": (
        funnel.symbolic_positions
    ),
    "transformers.models.gemma4.modeling_gemma4.Gemma4VisionModel": gemma4.pooled_by_kernel,
    "transformers.models.gemma4.modeling_gemma4.Gemma4TextModel": gemma4.per_layer_ids_by_lookup,
    "transformers.models.git.modeling_git.GitModel": git.split_forward,
    "transformers.models.granite_speech.modeling_granite_speech.GraniteSpeechConformerAttention": (
        granite_speech.blocks_without_branch
    ),
    "transformers.models.granite_speech.modeling_granite_speech.GraniteSpeechEncoderProjector": (
        granite_speech.windows_by_floor
    ),
    "transformers.models.granite_speech_plus.modeling_granite_speech_plus."
    "GraniteSpeechPlusConformerAttention": granite_speech.blocks_without_branch,
    "transformers.models.granite_speech_plus.modeling_granite_speech_plus."
    "GraniteSpeechPlusEncoderProjector": granite_speech.windows_by_floor,
    "transformers.models.kimi_k25.modeling_kimi_k25.Kimi_K25VisionPositionEmbeddings": (
        kimi_k25.frame_index_per_patch
    ),
    "transformers.models.kimi_k25.modeling_kimi_k25.Kimi_K25VisionModel": (
        kimi_k25.merge_index_per_patch
    ),
    "transformers.models.led.modeling_led.LEDEncoder": led.no_window_padding,
    "transformers.models.led.modeling_led.LEDEncoderSelfAttention": led.banded_attention,
    "transformers.models.minicpmv4_6.modeling_minicpmv4_6.MiniCPMV4_6Merger": minicpmv.merged_per_token,
    "transformers.models.minicpmv4_6.modeling_minicpmv4_6.MiniCPMV4_6ViTWindowAttentionMerger": (
        minicpmv.full_windows
    ),
    "transformers.models.minicpmv4_7.modeling_minicpmv4_7.MiniCPMV4_7Merger": minicpmv.merged_per_token,
    "transformers.models.minicpmv4_7.modeling_minicpmv4_7.MiniCPMV4_7ViTWindowAttentionMerger": (
        minicpmv.full_windows
    ),
    "transformers.models.minicpm_ocr.modeling_minicpm_ocr.MiniCPMOcrMerger": minicpmv.merged_per_token,
    "transformers.models.minicpm_ocr.modeling_minicpm_ocr.MiniCPMOcrViTWindowAttentionMerger": (
        minicpmv.full_windows
    ),
    "transformers.models.lfm3_vl.modeling_lfm3_vl.Lfm3VlVisionModel": (lfm3_vl.conv_by_neighbours),
    "transformers.models.kosmos2.modeling_kosmos2.Kosmos2ForConditionalGeneration": (
        kosmos2.text_call_without_image
    ),
    "transformers.models.llama4.modeling_llama4.Llama4ForConditionalGeneration": (
        llama4.projected_features
    ),
    "transformers.models.llama4.modeling_llama4.Llama4VisionRotaryEmbedding": (
        llama4.rotary_made_in_graph
    ),
    "transformers.models.muse_glimmer.modeling_muse_glimmer.MuseGlimmerVisionModel": (
        muse_glimmer.shuffle_index_per_token
    ),
    "transformers.models.musicflamingo.modeling_musicflamingo.MusicFlamingoModel": (
        musicflamingo.window_index_by_comparison
    ),
    "transformers.models.nemotron3_5_transcribe.modeling_nemotron3_5_transcribe."
    "Nemotron3_5TranscribeAudioModel": nemotron3_5_transcribe.one_chunk,
    "transformers.models.nemotron3_diarization.modeling_nemotron3_diarization."
    "Nemotron3DiarizationForAudioFrameClassification": nemotron3_5_transcribe.diarization_one_chunk,
    "transformers.models.paddleocr_vl.modeling_paddleocr_vl.PaddleOCRProjector": (
        paddleocr_vl.merged_by_gather
    ),
    "transformers.models.mistral3.modeling_mistral3.Mistral3Model": pixtral.padded_batch,
    "transformers.models.lighton_ocr.modeling_lighton_ocr.LightOnOcrModel": pixtral.padded_batch,
    "transformers.models.llava_next.modeling_llava_next.LlavaNextModel": (
        llava_next.tiles_per_feature
    ),
    "transformers.models.llava_next_video.modeling_llava_next_video.LlavaNextVideoModel": (
        llava_next.tiles_per_feature
    ),
    "transformers.models.longt5.modeling_longt5.LongT5Stack": longt5.blocks_without_branch,
    "transformers.models.pegasus_x.modeling_pegasus_x.PegasusXEncoder": pegasus_x.padded_to_blocks,
    "transformers.models.longformer.modeling_longformer.LongformerModel": (
        longformer.no_window_padding
    ),
    "transformers.models.longformer.modeling_longformer.LongformerSelfAttention": (
        longformer.dense_window_and_global
    ),
    "transformers.models.prophetnet.modeling_prophetnet.ProphetNetPositionalEmbeddings": (
        prophetnet.positions_from_cache
    ),
    "transformers.models.qwen3_asr.modeling_qwen3_asr.Qwen3ASREncoder": (
        qwen3_asr.windows_by_segment
    ),
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni.Qwen2_5OmniThinkerModel": (
        qwen_omni.qwen2_5_chunks_on_grid
    ),
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe.Qwen3OmniMoeThinkerModel": (
        qwen_omni.qwen3_windows_on_grid
    ),
    "transformers.models.qwen4_exp.modeling_qwen4_exp.Qwen4ExpTextQSAIndexer": (
        qwen4_exp.batched_selection
    ),
    "transformers.models.reformer.modeling_reformer.AxialPositionEmbeddings": (
        reformer.axial_positions_gathered
    ),
    "transformers.models.reformer.modeling_reformer.ReformerModel": (
        reformer.refuse_chunked_lengths
    ),
    "transformers.models.rwkv.modeling_rwkv.RwkvSelfAttention": rwkv.attention_mix,
    "transformers.models.rwkv.modeling_rwkv.RwkvFeedForward": rwkv.feed_forward_mix,
    "transformers.models.rwkv.modeling_rwkv.RwkvModel": rwkv.rescaled_at_use,
    "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeExperts": switch_moe.nllb_every_expert,
    "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeSparseMLP": (
        switch_moe.router_reads_padding
    ),
    "transformers.models.switch_transformers.modeling_switch_transformers.SwitchTransformersExperts": (
        switch_moe.switch_every_expert
    ),
    "transformers.models.step3p7.modeling_step3p7.Step3p7VisionModel": (
        step3p7.positions_from_shape
    ),
    "transformers.models.step3p7.modeling_step3p7.Step3p7Model": step3p7.global_views_batched,
    "transformers.models.unlimited_ocr.modeling_unlimited_ocr.UnlimitedOcrModel": (
        unlimited_ocr.global_views_batched
    ),
    "transformers.models.video_llama_3.modeling_video_llama_3.VideoLlama3Model": (
        video_llama_3.images_unmerged
    ),
    "transformers.models.xlnet.modeling_xlnet.XLNetModel": xlnet.refuse_one_way_padding,
    "transformers.models.xlstm.modeling_xlstm.xLSTMModel": xlstm.refuse_scaled_head_dims,
}


def install_overrides(
    model: torch.nn.Module, table: dict[str, Callable[[torch.nn.Module], None]] | None = None
) -> None:
    """Install every entry of ``table`` (default: the transformers table) that names the class
    of one of ``model``'s modules."""
    table = OVERRIDES if table is None else table
    for module in model.modules():
        cls = type(module)
        found = table.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            found(module)
