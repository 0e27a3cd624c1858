"""Why each diffusers model class outside the sweep is not in it (the coverage table's second
part): classes looked at and left out, with the reason found; the rest by what mobius makes of
them (no contract, with the argument no contract fills; or a contract and no small config)."""

from __future__ import annotations

# classes examined for the sweep and left out
REASONS = {
    "ControlNetXSAdapter": "an adapter driven by UNetControlNetXSModel, not called alone",
    "AutoencoderRAE": "its encoder is a pretrained DINOv2 loaded by name (network)",
    "MotionAdapter": "holds UNetMotionModel's motion modules; its own forward does nothing",
    "MultiAdapter": "a list of T2IAdapters, built from models, not from a config",
    # looked at for the argument rules (mobius/diffusers/argument_rules.py) and left out
    "CosmosControlNetModel": "its forward resizes padding_mask with torchvision, which this "
    "environment lacks (PyTorch's own forward fails: 'transforms' is not defined)",
}


MULTI = "a list of ControlNets, built from models, not from a config (each converts alone)"


def reason(name: str) -> str | None:
    """The recorded reason ``name`` is not swept, or None."""
    if "MultiControlNet" in name:
        return MULTI
    return REASONS.get(name)


# what the last run's table cannot say (shown under it)
NOTES = [
    "The sweep ran niced at a 1-minute load of 12-22 on 2 shared cores. The rows with a CPU "
    "figure come from reruns: a conversion's CPU seconds are a small part of "
    "its wall time (AutoencoderKLCogVideoX: 59 s of CPU in 930 s), so `timeout` is this "
    "machine's verdict, not the class's.",
    "Where the detail says `num_frames fixed to 5`, the trace fixes or bounds the frame count "
    "(a Python loop over frames or chunks of frames, as causal video VAEs decode) and the graph "
    "is traced again at 5 frames (batch, height and width dynamic); the parity run feeds 5.",
    "AutoencoderKLWan and AutoencoderKLQwenImage did not time out for a loop: their conversion "
    "(encoder and decoder unrolled for 5 frames) took ~1760 s wall for ~140 s of CPU "
    "(build, conversion and both checks) at a load of ~25 on 2 cores, past the sweep's 900 s.",
    "The rows of Lumina2Transformer2DModel, AutoencoderKLMochi, AutoencoderKLCosmos, "
    "Kandinsky6SRVAE, AutoencoderKLCogVideoX, AutoencoderKLWan and AutoencoderKLQwenImage come "
    "from a later run, with the per-family overrides and the ConvTranspose lowering "
    "(docs/design/), each also run at a "
    "second size set (batch 1, 32x24, text 9, 13 frames where the frames are not fixed); wall "
    "times at a load of 20-28 on 2 cores.",
    "CogVideoX's, Wan's and QwenImage's VAEs loop over chunks of frames in Python, and a chunk is "
    "not the computation of the whole (group-norm statistics per chunk, the chunk's first frame "
    "kept apart): their frame count is fixed per graph (`mobius/diffusers/overrides/"
    "frame_loops.py`). Before, the loop was unrolled with the frame axis left symbolic, which no "
    "check caught (CogVideoX's decoder gave 9 frames for 17; Wan's encoder 3 latent frames "
    "for 5).",
    "Classes under the generic contract (`mobius/diffusers/generic.py`: forward's arguments "
    "by name, the output dataclass's fields as outputs) and config variants that trace "
    "differently (`mobius/testing/diffusers_configs_any.py`: ControlNet conditioning "
    "embeddings of 2, 3 and 4 levels, PixArt's size conditioning, CogVideoX 1.5 and its sincos "
    "table, Wan's 32-position rotary table, VQ-Diffusion's discrete latents, a "
    "Transformer2DModel that ignores its timestep) were run on 2026-12-06 at a load of 5-8 "
    "on 2 cores.",
    "WanTransformer3DModel (rotary table of 32): the table bounds the patch grid at 32 a side "
    "(PyTorch fails past it too); the graph keeps that range and stops past it (a Gather "
    "index error), recorded as a `length-bound` fallback.",
    "LatteTransformer3DModel adds a temporal position table of `video_length` frames: PyTorch "
    "itself takes no other count, so the sweep feeds that count.",
    "Classes under argument rules (`mobius/diffusers/argument_rules.py`, configs in "
    "`mobius/testing/diffusers_configs_shaped.py`) were run on 2026-12-07 at a load of 2-5 on 2 "
    "cores. UniDiffuserModel's text length and latent size are static (one position table spans "
    "`num_text_tokens` text tokens and the `sample_size` latent's patches): those dimensions are "
    "the config's in the graph, not fixed by the trace. Related axes are fed as the pipelines "
    "relate them: `batch_frames` = batch x frames, `text_and_image_length` = text + patch tokens, "
    "`patch_count` = (height / p) x (width / p), `sequence_length_2` = text + 3.",
    "Classes with structured arguments (lists, pairs, dicts of tensors as `name.{i}`, "
    "`name.{i}.{j}` and the dict's keys), frames folded into the batch (taken unfolded), a bare "
    "list output (`output.{i}`), and the EasyAnimate, Bria FIBO 2 and MiniMax Music 3 condition "
    "encoder overrides (`mobius/diffusers/structured_args.py`, `folded_frames.py`, `overrides/`; "
    "configs in `mobius/testing/diffusers_configs_structured.py`) were run on 2026-12-07 at a "
    "load of 5-6 on 2 cores.",
    "The rows of latent-grid classes (QwenImage and its ControlNet, NucleusMoE, QwenImage 2.1, "
    "HunyuanDiT and its ControlNet, HiDream, Lumina-Next: unpacked latents in, the grid derived; "
    "`mobius/diffusers/latent_grid.py`), per-sample list classes (Z-Image and its ControlNet, "
    "OmniGen, JoyImage Edit Plus: stacked lists; `list_args.py`), the HunyuanVideo 1.5 "
    "transformer, VAE and Framepack (`overrides/`), ConsistencyDecoderVAE (its noise draws as an "
    "input; `sampling.py`) and the QwenImage 2.1 and MiniMax-H3 VAEs were run on 2026-12-07 at a "
    "load of 5-7 on 2 cores. AutoencoderKLHunyuanVideo15 fails in PyTorch itself above batch 1 "
    "(its mask broadcasts against the batch): its rows are compared with PyTorch run row by row.",
    "The 24 configs whose graphs take a padding mask were run again on 2026-12-07 (quiet, 2 "
    "workers on 2 cores) with rows padded by different counts (`diffusers_feeds.padding_mask`: "
    "at batch 3 and 6 tokens the rows keep 5, 3 and 1; before, only row 0's last token was "
    "padding): all 24 pass at both size sets.",
    "GlmImageTransformer2DModel (unchanged: its boolean-mask prior drop lowers to a Where), "
    "Ideogram4PromptEnhancerHead (generic contract) and RFD4-Proteina's transformer and "
    "autoencoder (conditioning dicts as keyed inputs, the encoder's draw as `noise`: "
    "`mobius/diffusers/protein_args.py`; configs in `mobius/testing/diffusers_configs_glm.py`) "
    "were run on 2026-12-07 at a load of 2-4 on 2 cores. RFD4's graphs are its forward at the "
    "default recycle_depth (one trunk pass) and without the chirality feature (aligned by SVD).",
    "SanaWMTransformer3DModel's config has no softmax blocks (softmax_every_n 0, gated-delta-net "
    "blocks only): its softmax blocks cast float32 queries, keys and values to bfloat16 for "
    "SDPA, which onnxruntime's CPU cannot run (it has no bfloat16 Attention and refuses to load "
    "the graph). Its gated-delta-net blocks scan the frames one by one in Python: frames fixed to 5.",
    "The trace checks guards relating two or more input sizes that the contract does not "
    "declare (`mobius/diffusers/shape_relations.py`; audit of 165 configs in "
    "`benchmarks/results/diffusers_shape_relations.json`): an undeclared relation is computed in "
    "the graph like a length bound, or refused. The rows of Kandinsky 6 SR (transformer and "
    "upscaler bank), Wan Animate, UniDiffuser's text decoder, RFD4 Proteina, Ideogram 4's head, "
    "UNet3DConditionModel, AnyFlow, UVit2D, the HunyuanVideo 1.5 VAE and the light T2IAdapter "
    "were run with it on 2026-12-07 at a load of 1-2 on 2 cores.",
    "The rows of AceStepConditionEncoder (output sizes from the reference tags' values: "
    "`overrides/ace_step_condition.py`), Wan Animate 2 (one graph per kv_cache_mode, the cache "
    "between them as named tensors: `reference_cache.py`), AnyFlow FAR (the whole video and the "
    "chunk loop's steps with their KV cache: `far_chunks.py`), Cosmos 3's omni transformer (one "
    "vision item per call: `cosmos3_args.py`) and Allegro's VAE (tiled as diffusers implements "
    "it, one tile grid per graph: `tiled_vae.py`; its two size sets vary the batch, other grids "
    "in `benchmarks/allegro_tile_grids.py`) were run on 2026-12-07 at a load of 2-5 on 2 cores.",
]
