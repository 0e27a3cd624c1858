"""Small configs for the diffusers audio classes: VAEs and vocoders over waveforms or mel
spectrograms, and diffusion transformers over audio latents ``[batch, channels, length]``.

Where a class pads its input to a whole number of hops or patches, the hop does not divide
every length the sweep feeds (16 against 40, 64 and 96; ACE-Step's patch of 3), so that the
graph is checked with and without padding; elsewhere strides multiply to 8 at most, so that
the traced length (40) and the sweep's (64, 96) are whole numbers of latent frames.
"""

from __future__ import annotations

from typing import Any

# fmt: off
AUDIO_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("AutoencoderOobleck", "AutoencoderOobleck",
     {"encoder_hidden_size": 8, "downsampling_ratios": [2, 4], "channel_multiples": [1, 2],
      "decoder_channels": 8, "decoder_input_channels": 4, "audio_channels": 2}),
    ("AutoencoderKLKVAEAudio", "AutoencoderKLKVAEAudio",
     {"encoder_dim": 4, "encoder_rates": [2, 8], "latent_dim": 16, "codebook_dim": 4,
      "decoder_dim": 16, "decoder_rates": [8, 2], "num_channels": 1, "attn_num_heads": 2}),
    ("LongCatAudioDiTVae", "LongCatAudioDiTVae",
     {"in_channels": 1, "channels": 4, "c_mults": [1, 2], "strides": [2, 4], "latent_dim": 4,
      "encoder_latent_dim": 8, "downsampling_ratio": 8}),
    ("AutoencoderKLMiniMaxH3Audio", "AutoencoderKLMiniMaxH3Audio",
     {"encoder_dim": 4, "encoder_rates": (2, 8), "latent_dim": 16, "latent_channels": 4,
      "num_attention_heads": 2, "decoder_dim": 16, "decoder_rates": (8, 2),
      "decoder_kernel_sizes": (8, 4), "resblock_kernel_sizes": (3,),
      "resblock_dilation_sizes": ((1, 3),)}),
    # a hop of 8 divides the traced length: the graph pads other lengths only as its override
    # always pads (the test feeds 43 samples)
    ("AutoencoderKLMiniMaxH3Audio (hop of 8)", "AutoencoderKLMiniMaxH3Audio",
     {"encoder_dim": 4, "encoder_rates": (2, 4), "latent_dim": 16, "latent_channels": 4,
      "num_attention_heads": 2, "decoder_dim": 16, "decoder_rates": (4, 2),
      "decoder_kernel_sizes": (8, 4), "resblock_kernel_sizes": (3,),
      "resblock_dilation_sizes": ((1, 3),)}),
    ("AutoencoderSAME", "AutoencoderSAME",
     {"audio_channels": 2, "patch_size": 4, "encoder_channels": 8, "encoder_c_mults": (2,),
      "encoder_strides": (4,), "encoder_transformer_depths": (1,), "latent_dim": 4,
      "dim_heads": 8, "ff_mult": 2}),
    ("MMAudioVocoder", "MMAudioVocoder",
     {"num_mels": 8, "upsample_initial_channel": 16, "upsample_rates": (2, 2),
      "upsample_kernel_sizes": (4, 4), "resblock_kernel_sizes": (3,),
      "resblock_dilation_sizes": ((1, 3),)}),
    ("MiniMaxMusic3Vocoder", "MiniMaxMusic3Vocoder",
     {"latent_channels": 8, "decoder_input_dim": 8, "decoder_hidden_dim": 16,
      "upsampling_ratios": (2, 2)}),
    ("MiniMaxMusic3Transformer1DModel", "MiniMaxMusic3Transformer1DModel",
     {"in_channels": 4, "condition_dim": 6, "num_layers": 1, "num_attention_heads": 2,
      "attention_head_dim": 8, "ff_inner_dim": 32, "rotary_dim": 4, "fourier_embedding_dim": 16}),
    ("StableAudio3DurationEmbedder", "StableAudio3DurationEmbedder",
     {"output_dim": 8, "fourier_dim": 8}),
    ("StableAudio3DiTModel", "StableAudio3DiTModel",
     {"io_channels": 4, "embed_dim": 16, "depth": 1, "num_heads": 2, "cond_token_dim": 12,
      "global_cond_dim": 10, "local_add_cond_dim": 5, "timestep_features_dim": 16,
      "ff_mult": 2.0, "num_memory_tokens": 2}),
    ("LongCatAudioDiTTransformer", "LongCatAudioDiTTransformer",
     {"dit_dim": 16, "dit_depth": 2, "dit_heads": 2, "dit_text_dim": 12, "latent_dim": 4,
      "ff_mult": 2.0}),
    ("AceStepTransformer1DModel", "AceStepTransformer1DModel",
     {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "in_channels": 12,
      "audio_acoustic_hidden_dim": 4, "patch_size": 3, "sliding_window": 4,
      "encoder_hidden_size": 12}),
    ("AceStepAudioTokenizer", "AceStepAudioTokenizer",
     {"hidden_size": 16, "intermediate_size": 32, "audio_acoustic_hidden_dim": 4,
      "pool_window_size": 5, "fsq_dim": 16, "fsq_input_levels": [8, 5, 5],
      "fsq_input_num_quantizers": 2, "num_attention_pooler_hidden_layers": 2,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "sliding_window": 2}),
    ("AceStepAudioTokenDetokenizer", "AceStepAudioTokenDetokenizer",
     {"hidden_size": 16, "intermediate_size": 32, "audio_acoustic_hidden_dim": 4,
      "pool_window_size": 5, "num_attention_pooler_hidden_layers": 2,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "sliding_window": 2}),
    # one layer each: the lyrics' full attention (layer_types is the lyric encoder's), the
    # references' sliding window of 4 over the 40 frames the trace takes
    ("AceStepConditionEncoder", "AceStepConditionEncoder",
     {"hidden_size": 16, "intermediate_size": 32, "text_hidden_dim": 12, "timbre_hidden_dim": 6,
      "num_lyric_encoder_hidden_layers": 1, "num_timbre_encoder_hidden_layers": 1,
      "layer_types": ["full_attention"], "num_attention_heads": 2, "num_key_value_heads": 1,
      "head_dim": 8, "sliding_window": 4}),
    ("AutoencoderKLLTX2Audio", "AutoencoderKLLTX2Audio",
     {"base_channels": 8, "output_channels": 2, "ch_mult": (1, 2, 4), "num_res_blocks": 1,
      "in_channels": 2, "latent_channels": 4, "mel_bins": 16}),
    ("Cosmos3AVAEAudioTokenizer", "Cosmos3AVAEAudioTokenizer",
     {"vocoder_input_dim": 4, "dec_dim": 8, "dec_c_mults": (1, 2), "dec_strides": (4, 4),
      "dec_out_channels": 2, "stereo": True, "input_channels": 1, "enc_dim": 8,
      "enc_intermediate_dim": 16, "enc_num_layers": 1, "enc_num_blocks": 1, "enc_n_fft": 16,
      "enc_hop_length": 8, "enc_latent_dim": 8, "enc_c_mults": (1,), "enc_strides": (2,)}),
    ("MMAudioVAE", "MMAudioVAE",
     {"mel_bins": 8, "latent_channels": 4, "hidden_channels": 8, "channel_multipliers": (1, 2),
      "layers_per_block": 1, "n_fft": 16, "hop_length": 4, "sample_rate": 16000}),
    ("StableAudioProjectionModel", "StableAudioProjectionModel",
     {"text_encoder_dim": 12, "conditioning_dim": 8, "min_value": 0, "max_value": 512}),
    ("AudioLDM2ProjectionModel", "AudioLDM2ProjectionModel",
     {"text_encoder_dim": 12, "text_encoder_1_dim": 10, "langauge_model_dim": 8}),
    ("MiniMaxMusic3RVQDepthDecoder", "MiniMaxMusic3RVQDepthDecoder",
     {"hidden_size": 16, "num_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
      "audio_vocab_size": 8, "num_codebooks": 4, "max_position_embeddings": 16}),
    ("StableAudioDiTModel", "StableAudioDiTModel",
     {"sample_size": 32, "in_channels": 4, "num_layers": 1, "attention_head_dim": 8,
      "num_attention_heads": 2, "num_key_value_attention_heads": 1, "out_channels": 4,
      "cross_attention_dim": 16, "time_proj_dim": 16, "global_states_input_dim": 10,
      "cross_attention_input_dim": 12}),
]
# fmt: on
