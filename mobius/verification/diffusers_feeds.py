"""Random inputs for a diffusers graph, by its task's input specs (``mobius/diffusers/tasks.py``):
at sizes other than the traced ones, or the graph's own where it fixes one. Used by the diffusers
sweep (``benchmarks/diffusers_coverage.py``) and ``mobius verify``."""

from __future__ import annotations

# sizes for the parity runs: two sets, each other than the trace's (tasks.EXAMPLE_SIZES) on every
# axis, so that a dimension the graph leaves dynamic but computes for one size only (a Python loop
# unrolled at the traced count) shows as a mismatch; the second has batch 1 (pipelines' usual),
# a longer prompt and latents larger than the traced ones, and a third frame count
RUN_SIZES = {
    "batch": 3, "sequence_length": 6, "height": 16, "width": 8, "image_sequence_length": 10,
    "image_height": 128, "image_width": 64, "num_frames": 9, "sample_length": 64,
    "noise_levels": 2, "text_encoder_layers": 6, "input_height": 2, "input_width": 4,
}  # fmt: skip
SECOND_SIZES = {
    "batch": 1, "sequence_length": 5, "height": 32, "width": 48, "image_sequence_length": 16,
    "image_height": 256, "image_width": 384, "num_frames": 13, "sample_length": 96,
    "noise_levels": 4, "text_encoder_layers": 9, "input_height": 4, "input_width": 4,
}  # fmt: skip
SIZE_SETS = (RUN_SIZES, SECOND_SIZES)
# classes whose second size set keeps a smaller latent grid (still other than the trace's and the
# first set's on each axis): LTX-2's diffusion decoder attends densely over its whole grid (its
# neighborhood window as a mask), and 13x32x48 latents are 20k tokens, a 20k x 20k score matrix
# per head in PyTorch's flex reference too (14 GB, over 5 minutes on 2 cores)
# Kandinsky 6's SR transformer likewise (its kept 64-token blocks as a dense mask; sides multiples
# of 8, and more 8x8 block rows and columns than frames, where the first set has more frames)
SMALL_GRIDS = {
    "LTX2VideoDiffusionDecoderModel": {"num_frames": 7, "height": 12, "width": 20},
    "Kandinsky6SRTransformer3DModel": {"num_frames": 2, "height": 32, "width": 24},
}


# models whose pipelines pass the timestep as a fraction (a sigma in [0, 1]), which the model
# multiplies by 1000 itself: at 1000x the usual range, float32 sines of arguments near 1e6 differ
# by 1e-4 between any two implementations; UNet1D's Gaussian Fourier features, MiniMax Music 3's
# random Fourier features, Stable Audio 3's exponential ones, and LongCat's and ACE-Step's
# sinusoids (scaled by 1000 inside) take t in [0, 1]; Stable Audio's cosine scheduler gives its
# Gaussian Fourier features atan(sigma) * 2 / pi; MiniMax-H3 embeds its sigmas as they are;
# Lumina-Next takes 1 - t / 1000 (and scales its rotary table by whether it is below 1);
# QwenImage 2.1 takes the step scaled to [0, 1]
SIGMA_TIMESTEPS = (
    "FluxTransformer2DModel", "AuraFlowTransformer2DModel", "FluxControlNetModel", "UNet1DModel",
    "Krea2Transformer2DModel", "Ideogram4Transformer2DModel", "BriaFibo2Transformer2DModel",
    "MiniMaxMusic3Transformer1DModel", "StableAudio3DiTModel", "LongCatAudioDiTTransformer",
    "AceStepTransformer1DModel", "StableAudioDiTModel", "MiniMaxH3Transformer3DModel",
    "LuminaNextDiT2DModel", "QwenImage21Transformer2DModel",
    "ZImageTransformer2DModel", "ZImageControlNetModel",
)  # fmt: skip


def _packed_layout(_cfg, sizes: dict, gen) -> dict:
    """MiniMax-H3's packed sequence: a random permutation of its rows split into the prompt's,
    the video's and the audio's (so that the three index tensors partition it, as index_copy
    needs), each row tagged with its modality (video 0, text 1, audio 2) and given one of the
    noise levels (every level used at least once)."""
    import torch

    text, video = sizes["sequence_length"], sizes["image_sequence_length"]
    packed, levels = sizes["packed_length"], sizes["noise_levels"]
    rows = torch.randperm(packed, generator=gen)
    tags = torch.full((packed,), 2, dtype=torch.int64)
    tags[rows[:text]], tags[rows[text : text + video]] = 1, 0
    level = torch.arange(packed) % levels
    return {
        "text_indices": rows[:text],
        "video_indices": rows[text : text + video],
        "audio_indices": rows[text + video :],
        "token_tags": tags,
        "timestep_indices": level[torch.randperm(packed, generator=gen)],
    }


# classes whose integer inputs lay out one packed sequence: made from the config and the sizes,
# not at random (each a function of config, sizes, generator)
PACKED_LAYOUTS = {"MiniMaxH3Transformer3DModel": _packed_layout}


def _joyimage_grids(_cfg, sizes: dict, gen) -> dict:
    from mobius.diffusers.list_args import joyimage_grids

    return joyimage_grids(sizes, gen)


PACKED_LAYOUTS["JoyImageEditPlusTransformer3DModel"] = _joyimage_grids


def _molecules(_cfg, sizes: dict, gen) -> dict:
    from mobius.diffusers.protein_args import molecule_feeds

    return molecule_feeds(sizes, gen)


PACKED_LAYOUTS["RFD4ProteinaTransformer"] = _molecules
PACKED_LAYOUTS["RFD4ProteinaAutoencoder"] = _molecules


def _omnigen_layout(_cfg, sizes: dict, gen) -> dict:
    from mobius.diffusers.list_args import omnigen_layout

    return omnigen_layout(sizes, gen)


PACKED_LAYOUTS["OmniGenTransformer2DModel"] = _omnigen_layout


def _reference_tags(_cfg, sizes: dict, gen) -> dict:
    from mobius.diffusers.audio_args import reference_tags

    return reference_tags(sizes)


PACKED_LAYOUTS["AceStepConditionEncoder"] = _reference_tags


def _cosmos3_layout(cfg, sizes: dict, gen) -> dict:
    from mobius.diffusers.cosmos3_args import pipeline_layout

    return pipeline_layout(cfg, sizes, gen)


PACKED_LAYOUTS["Cosmos3OmniTransformer"] = _cosmos3_layout


def padding_mask(shape: list[int]):
    """A right-padding mask (True: a token) whose rows keep different counts: row ``b`` pads its
    last ``(2b + 1) mod length`` tokens, at least one token kept (batch 3 at 6 tokens: 5, 3, 1
    kept), so that per-row ordering, compaction and masking are all exercised."""
    import torch

    value = torch.ones(shape, dtype=torch.bool)
    length = shape[-1]
    for row in range(shape[0]):
        padded = min((2 * row + 1) % length, length - 1)
        if padded:
            value[row, ..., length - padded :] = False
    return value


def feeds(task, arch, session, seed: int = 0, run_sizes: dict | None = None) -> dict:
    """Random inputs for ``task`` at ``run_sizes`` (RUN_SIZES by default), or the graph's own
    size where it fixes one."""
    import torch

    sigma_timesteps = arch.model_type in SIGMA_TIMESTEPS
    gen = torch.Generator().manual_seed(seed)
    graph = {i.name: i.shape for i in session.get_inputs()}
    # a model whose config fixes its frame count (Latte's temporal position table) takes only it
    from mobius.diffusers.tasks import related_sizes

    run_sizes = run_sizes or RUN_SIZES
    if run_sizes is SECOND_SIZES:
        run_sizes = run_sizes | SMALL_GRIDS.get(arch.model_type, {})
    sizes = run_sizes | {
        "num_frames": arch.hf_config.get("video_length") or run_sizes["num_frames"]
    }
    sizes = related_sizes(arch.hf_config, sizes)
    layout = PACKED_LAYOUTS.get(arch.model_type)
    out = layout(arch.hf_config, sizes, gen) if layout else {}
    out = {k: v for k, v in out.items() if k in graph}
    for spec in task.inputs(arch, None):
        if spec.name in out:
            continue
        if spec.name not in graph:  # an optional input the graph does not read
            continue
        shape = [
            g if isinstance(g, int) else d if isinstance(d, int) else sizes[d]
            for d, g in zip(spec.dims, graph[spec.name], strict=True)
        ]
        if spec.name == "timestep" and spec.dtype == torch.int64:  # an embedding's index
            value = torch.randint(
                0, arch.hf_config.get("num_embeds_ada_norm"), shape, generator=gen
            )
        elif spec.name in ("timestep", "t") and sigma_timesteps:  # Z-Image names it t
            value = torch.rand(shape, generator=gen) * 0.9 + 0.01
        elif spec.name == "timestep":
            value = torch.rand(shape, generator=gen) * 900 + 10
        elif spec.name == "decoder_noise_time":  # T5FilmDecoder's noise time, in [0, 1)
            value = torch.rand(shape, generator=gen)
        elif (
            spec.dtype == torch.bool
        ):  # a padding mask: rows padded at the end, by different counts
            value = padding_mask(shape)
        elif spec.dtype == torch.int64:
            value = torch.randint(0, 4, shape, generator=gen)
        elif spec.name.endswith("_ids"):
            value = torch.randint(0, 16, shape, generator=gen).float()
        elif spec.name in ("original_size", "target_size", "crop_coords", "resolution"):
            value = torch.randint(0, 64, shape, generator=gen).float()
        elif spec.name in ("aspect_ratio", "added_time_ids"):
            value = torch.rand(shape, generator=gen) * 2
        elif spec.name == "conditioning_scale":  # a scalar, or one per control image
            value = torch.full(shape, 0.7)
        else:
            value = torch.randn(shape, generator=gen)
        out[spec.name] = value
    return out


# classes whose PyTorch forward fails past batch 1 (AutoencoderKLHunyuanVideo15's attention
# expands its causal mask to [batch, tokens, tokens] against [batch, 1, tokens, channels]
# queries) while the converted graph, through its override, keeps each row its own: PyTorch's
# reference is the model run on each row alone, concatenated
ROW_BY_ROW = {"AutoencoderKLHunyuanVideo15"}


# classes whose eager forward is not the computation they are designed and run for, by the
# function that makes the model compute that one (in place): Kandinsky 6 SR's NABLA attention
# hands flex attention a BlockMask that only a compiled run applies (eager flex computes full
# attention); the reference is the block-sparse attention, as the graph (overrides/kandinsky6_sr.py)
AS_COMPILED = {
    "Kandinsky6SRTransformer3DModel": "mobius.diffusers.overrides.kandinsky6_sr:block_sparse_reference",
}


# classes whose forward raises until switches are set that their pipeline sets, by the function
# that sets them (in place): AutoencoderKLAllegro encodes and decodes only with tiling on, and a
# batch past 1 only with slicing on too (row by row), which its graphs compute (overrides/allegro.py)
AS_DESIGNED = {"AutoencoderKLAllegro": "mobius.diffusers.overrides.allegro:tiled_row_by_row"}


def torch_outputs(task, model, inputs: dict) -> list:
    """PyTorch's outputs of ``task`` for ``inputs`` (row by row for ``ROW_BY_ROW``; for
    ``AS_COMPILED``, by the model made to compute what its compiled run does; for
    ``AS_DESIGNED``, with the switches its pipeline sets)."""
    import importlib

    import torch

    if rule := AS_COMPILED.get(type(model).__name__, AS_DESIGNED.get(type(model).__name__)):
        module, function = rule.split(":")
        getattr(importlib.import_module(module), function)(model)
    if type(model).__name__ not in ROW_BY_ROW:
        return list(task.call(model, dict(inputs)))
    batch = next(iter(inputs.values())).size(0)
    rows = [task.call(model, {k: v[i : i + 1] for k, v in inputs.items()}) for i in range(batch)]
    return [torch.cat(outputs) for outputs in zip(*rows, strict=True)]
