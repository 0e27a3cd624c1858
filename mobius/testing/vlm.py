"""Parity of an image-text-to-text package with its HF model: image features, prefill logits with
one image in a batch of two (the other row text only, left-padded), one cached step, and greedy
generation token for token against HF ``generate``."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mobius.runtime.vlm import (
    DEEPSTACK,
    DEEPSTACK_FEATURES,
    OnnxVisionLanguageModel,
    next_positions,
)
from mobius.tasks.vlm import language_model, vision_outputs
from mobius.tasks.vlm_canvas import MARKERS, canvas_recipe
from mobius.tasks.vlm_inputs import image_token_id
from mobius.tasks.vlm_position_mask import NAME as POSITION_MASK
from mobius.tasks.vlm_position_mask import places_by_position_mask
from mobius.tasks.vlm_prepend import image_rows, prepends_image
from mobius.tasks.vlm_type_ids import EXPERT_TYPE_IDS, type_ids_argument
from mobius.testing import vlm_position_mask, vlm_row_reference
from mobius.testing.tiny import randomize
from mobius.testing.vlm_pixels import image_runs, images_fed, pixel_inputs
from mobius.testing.vlm_position_mask import (
    derives_own_positions,
    uncached_reference,
    with_position_mask,
)
from mobius.testing.vlm_row_reference import (
    misreads_padding_when_cached,
    reference_agreement,
    rows_alone,
)
from mobius.testing.vlm_scale import fan_in_scaled
from mobius.testing.vlm_tiny_configs import MORE_VLM_OVERRIDES
from mobius.verification.pairs import Comparison, Pair, Tokens, for_session, for_torch, to_numpy

NEW_TOKENS = 12
# types whose checkpoint, as HF's writer writes it, HF's own loader does not read back (see
# tiny_vlm): the reference is the model as built
NOT_RELOADED = {"shieldgemma2"}
# types whose HF reference runs with the conversion's own override installed: Llama 4's forward
# raises in this transformers at its return (synth/overrides/llama4.py), and its
# get_image_features stops before the projector its forward applies; the override fixes the
# return and gives the projected rows as the features (the forward still projects its own)
REFERENCE_OVERRIDES = {
    "llama4": "transformers.models.llama4.modeling_llama4.Llama4ForConditionalGeneration"
}
# per type, what keeps the tiny model small or buildable (on top of tiny_config_for's shrinking)
VLM_OVERRIDES: dict[str, dict[str, Any]] = {
    # its pooling makes mm_tokens_per_image out of the patch grid: 16 patches -> 4 tokens
    "gemma3": {"mm_tokens_per_image": 4},
    "shieldgemma2": {"mm_tokens_per_image": 4},
    "qwen2_vl": {"vision_config": {"depth": 2}},
    # windows of 2 x 2 merged tokens, so the (2, 3) grid has clipped windows
    "qwen2_5_vl": {"vision_config": {"depth": 2, "fullatt_block_indexes": [1], "window_size": 32}},
    # its default feature layers (-2, -5, -8, -11, 6) need a 12-layer tower
    "vipllava": {"vision_feature_layers": [-2, -1]},
    # the thinker configs have no field for it (real checkpoints' thinker_config sets it), and
    # the thinkers' get_rope_index finds images by it: a free id of the tiny vocabulary
    "qwen2_5_omni_thinker": {"vision_start_token_id": 249},
    "qwen3_omni_moe_thinker": {"vision_start_token_id": 250},
    # no default image token (real checkpoints set one); the SAM tower's global-attention block
    # within the tiny tower's two
    "instructblip": {"image_token_index": 250},
    "deepseek_vl_hybrid": {"high_res_vision_config": {"global_attn_indexes": [1]}},
    # images of any size up to image_size: a 64-pixel table leaves room for a non-square image
    "mistral3": {"vision_config": {"image_size": 64}},
    # tilings of the tiny 32-pixel tower (the defaults are of 336- or 384-pixel tiles)
    "llava_next": {"image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]]},
    "llava_next_video": {"image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]]},
    "llava_onevision": {"image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]]},
    "lighton_ocr": {"vision_config": {"image_size": 64}},
    # no default image token (real checkpoints set one); the window merger after the first of
    # the tiny tower's two blocks (its default, block 6, would never run)
    "minicpmv4_6": {"image_token_id": 250, "insert_layer_id": 0},
    # ... and its canvas markers (the processor's tokenizer sets them): distinct free ids
    "minicpmv4_7": {
        "image_token_id": 250,
        "insert_layer_id": 0,
        "image_start_id": 244,
        "image_end_id": 245,
        "slice_start_id": 246,
        "slice_end_id": 247,
        "newline_id": 248,
    },
    "minicpm_ocr": {"image_token_id": 250, "insert_layer_id": 0},
}
VLM_OVERRIDES.update(MORE_VLM_OVERRIDES)


def auto_class() -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText


def tiny_vlm(model_type: str, directory: Path, *, seed: int = 0, **overrides: Any):
    """A tiny random-weight image-text-to-text checkpoint in ``directory``: (HF model, config)."""
    from mobius.testing.configs import tiny_config_for

    config = tiny_config_for(model_type, **{**VLM_OVERRIDES.get(model_type, {}), **overrides})
    _small_vision_and_rope(config)
    torch.manual_seed(seed)
    model = auto_class().from_config(config, attn_implementation="eager").eval()
    randomize(model, seed)
    fan_in_scaled(model, model_type, seed)  # a few types' vision side: see vlm_scale
    model.save_pretrained(directory)
    # HF's writer nests ShieldGemma 2's text model one level deeper (model.language_model.model.*)
    # than its own loader reads back (the text weights would load as random ones); mobius reads
    # what the writer wrote (sources/key_mapping.py), checked against the model as built
    if model_type in NOT_RELOADED:
        return model.eval(), config
    loaded = auto_class().from_pretrained(directory, attn_implementation="eager")
    if model_type in REFERENCE_OVERRIDES:  # see REFERENCE_OVERRIDES
        from mobius.synth.overrides import OVERRIDES

        OVERRIDES[REFERENCE_OVERRIDES[model_type]](loaded)
    return loaded.eval(), config


def not_image_text_generation(model: Any) -> str | None:
    """Why a type of the image-text-to-text mapping is no image-to-text generator (the sweep's
    ``not-image-text``), else None: it cannot generate (PI0 predicts robot actions by flow
    matching), or it is a decoder-only model with no sub-configs and no features method
    (Mistral 4's entry is its text-only causal LM)."""
    from mobius.tasks.vlm_inputs import features_method

    name = type(model).__name__
    if not model.can_generate():
        return f"{name} cannot generate text (no GenerationMixin: it is not a text generator)"
    config = model.config
    sub_configs = [
        k for k, v in config.to_dict().items() if isinstance(v, dict) and k.endswith("config")
    ]
    if not sub_configs and not config.is_encoder_decoder:
        if features_method(getattr(model, "model", model)) is None:
            return f"{name} is a text-only decoder: no sub-configs, no features method"
    return None


def _small_vision_and_rope(config: Any) -> None:
    """Shrinks what ``tiny_config_for`` leaves full size in a VLM: a vision tower's ``depth``
    (two blocks, and the deepstack layers within them), its ``out_hidden_size`` (the text
    width), and a multi-axis rotary's default ``mrope_section`` (sized for real head dimensions),
    split over this model's rotary half-dimension."""
    from mobius.sources.config import from_hf
    from mobius.tasks.vlm import multi_axis_positions

    vision = getattr(config, "vision_config", None)
    text = config.get_text_config(decoder=True)
    if isinstance(getattr(vision, "depth", None), int) and vision.depth > 2:
        vision.depth = 2
        indexes = getattr(vision, "deepstack_visual_indexes", None)
        if indexes:  # features taken from blocks the cut tower still has
            vision.deepstack_visual_indexes = [i for i in indexes if i < 2] or [1]
    if isinstance(getattr(vision, "out_hidden_size", None), int):  # projected to the text width
        vision.out_hidden_size = text.hidden_size
    if not multi_axis_positions(from_hf(config).hf_config):
        return
    rope = dict(getattr(text, "rope_parameters", None) or {})
    if "mrope_section" in rope:
        return
    head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    half = int(head * rope.get("partial_rotary_factor", 1.0)) // 2
    rope["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
    text.rope_parameters = rope


def tiny_llava_with_processor(directory: Path, *, seed: int = 0):
    """A tiny LLaVA with a processor made locally (the bundled tiny-llama tokenizer plus an
    ``<image>`` token, a 32-pixel CLIP image processor), saved in ``directory``: (HF model,
    processor). No network."""
    from transformers import CLIPImageProcessorPil, LlavaProcessor, PreTrainedTokenizerFast

    root = Path(__file__).resolve().parents[2]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(root / "examples" / "tiny-llama")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    images = CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,
    )
    text = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    model, _ = tiny_vlm(
        "llava",
        directory,
        seed=seed,
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_config={"image_size": 32, "patch_size": 8},
    )
    processor.save_pretrained(directory)
    return model, processor


def prompt(model: Any, image_tokens: int | list[int], length: int = 5, seed: int = 1):
    """Two rows: the first with ``image_tokens`` image tokens among text (a list: one run per
    image, a word between runs, each opened by the vision start token where the model has one),
    the second text only and left-padded to the same width. (input_ids, attention_mask)."""
    config = model.config
    vocab = model.get_input_embeddings().num_embeddings
    token = image_token_id(config)
    pad = getattr(config.get_text_config(), "pad_token_id", None) or 0
    gen = torch.Generator().manual_seed(seed)
    text = torch.randint(3, vocab - 3, (2, length), generator=gen)
    start = getattr(config, "vision_start_token_id", None)
    text[(text == token) | (text == pad) | (text == start)] = 4
    if start is not None:  # the processor opens each image with it (Qwen-Omni finds images by it)
        text[0, 1] = start
    markers = None
    if canvas_recipe(config):  # <image> ... </image> around each thumbnail, as the processor
        markers = torch.tensor([m for m in (getattr(config, n) for n in MARKERS) if m is not None])
        text[torch.isin(text, markers)] = 4
    pieces = [text[0, :2]]
    runs = [image_tokens] if isinstance(image_tokens, int) else image_tokens
    for k, count in enumerate(runs):
        if k:  # a word, and the next image's start token
            pieces.append(torch.tensor([4] + ([start] if start is not None else [])))
        image = torch.full((count,), -1 if token is None else token)  # GIT: no placeholder
        if markers is not None:
            image = torch.cat([markers[:1], image, markers[1:2]])
        pieces.append(image)
    first = torch.cat([*pieces, text[0, 2:]])
    width = first.numel()
    second = torch.cat([torch.full((width - length,), pad), text[1]])
    ids = torch.stack([first, second])
    mask = torch.ones_like(ids)
    mask[1, : width - length] = 0
    return ids, mask


def hf_generate(model: Any, inputs: dict, new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Plain greedy ``generate`` with no stop: new tokens and each step's logits."""
    from transformers import GenerationConfig

    text = model.config.get_text_config()
    settings = GenerationConfig(
        pad_token_id=getattr(text, "pad_token_id", None) or 0,
        eos_token_id=None,
        max_new_tokens=new_tokens,
        num_beams=1,
        do_sample=False,
    )
    own, model.generation_config = model.generation_config, settings
    try:
        with torch.no_grad():
            # also passed: InstructBLIP's generate hands it on to its language model's
            out = model.generate(
                **inputs,
                generation_config=settings,
                output_logits=True,
                return_dict_in_generate=True,
            )
    finally:
        model.generation_config = own
    width = inputs["input_ids"].shape[1]
    return out.sequences[:, width:].numpy(), to_numpy(torch.stack(out.logits, 1))


def _cache_of(out: Any) -> Any:
    """The cache a forward returned (InstructBLIP's is in its language model's outputs; MOSS
    Transcribe's output names it ``cache``)."""
    inner = getattr(out, "language_model_outputs", None)
    out = inner if inner is not None else out
    cache = getattr(out, "past_key_values", None)
    return cache if cache is not None else getattr(out, "cache", None)


def vlm_parity(
    model: Any, package: Path, new_tokens: int = NEW_TOKENS, images: int = 1
) -> dict[str, Any]:
    """Max abs differences (features, prefill, step, generation logits) and whether the greedy
    tokens equal HF's; ``images``: how many images the prompt's first row carries (where the
    layout takes that many: ``image_runs``)."""
    pixels = pixel_inputs(model, images)
    compared = vlm_pairs(model, package, new_tokens, pixels=pixels)
    *features, prefill, step, generated = compared.pairs
    return {
        "images": images_fed(model, pixels),
        "image_tokens": int(features[0].expected.shape[0]),
        "features_diff": max(p.max_abs() for p in features),
        "prefill_diff": prefill.max_abs(),
        "decode_diff": step.max_abs(),
        "generate_logits_diff": generated.max_abs(),
        "tokens_equal": compared.tokens.equal(),
        "tokens": compared.tokens.actual.tolist(),
        "hf_tokens": compared.tokens.expected.tolist(),
        **({"reference": compared.note} if compared.note else {}),
    }


def image_and_markers(config: Any) -> torch.Tensor:
    """The image token and the tokens that open and close an image, where the config names them
    (Ernie 4.5 VL's processor sends all three to the vision experts)."""
    named = (getattr(config, n, None) for n in ("image_start_token_id", "image_end_token_id"))
    return torch.tensor([image_token_id(config), *(t for t in named if t is not None)])


def vlm_pairs(
    model: Any,
    package: Path,
    new_tokens: int = NEW_TOKENS,
    pixels: dict[str, torch.Tensor] | None = None,
    text: tuple[torch.Tensor, torch.Tensor] | None = None,
    runner: OnnxVisionLanguageModel | None = None,
) -> Comparison:
    """Image features, prefill logits with one image in a batch of two, one cached step and the
    logits of ``new_tokens`` greedy steps against HF (its ``generate`` for the last), and the
    greedy tokens. ``pixels``: the vision inputs (``pixel_inputs``' random image by default);
    ``text``: (input_ids, attention_mask) with the image's tokens in the first row (``prompt``'s
    by default)."""
    runner = runner or OnnxVisionLanguageModel(package)
    pixels = pixels if pixels is not None else pixel_inputs(model)
    with torch.no_grad():
        hf_features, hf_deepstack = vision_outputs(model, for_torch(model, pixels))
    vision = runner.vision(**for_session(runner.sessions["vision_encoder"], pixels))
    features, deepstack = vision["image_features"], vision.get(DEEPSTACK_FEATURES)
    vision_file = "vision_encoder.onnx"
    pairs = [Pair(vision_file, "image_features", "", features, to_numpy(hf_features))]
    if hf_deepstack is not None:
        pairs.append(Pair(vision_file, DEEPSTACK_FEATURES, "", deepstack, to_numpy(hf_deepstack)))
    # GIT puts the image before the text itself (vlm_prepend): no placeholder, HF repeats the
    # one image over the batch, so both rows carry it (the second left-padded by two)
    prepended = image_rows(model.config) if prepends_image(model) else 0
    position_mask = None
    if text is not None:
        ids, mask = text
    else:
        runs = 0 if prepended else image_runs(model, pixels)
        ids, mask = prompt(model, runs)
        if prepended:
            ids[1, :2], mask[1, :2] = getattr(model.config, "pad_token_id", None) or 0, 0
        if places_by_position_mask(model):  # Kosmos: the processor's ids, and their mask
            ids, position_mask = with_position_mask(ids, runs)
    grid, sizes = pixels.get("image_grid_thw"), pixels.get("target_sizes")
    positions = torch.from_numpy(
        runner.positions(
            ids.numpy(),
            mask.numpy(),
            None if grid is None else grid.numpy(),
            None if sizes is None else sizes.numpy(),
        )
    )
    extra = {}
    if type_ids_argument(model) == "token_type_ids":
        extra["token_type_ids"] = (ids == image_token_id(model.config)).long()
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        extra["mm_token_type_ids"] = (ids == image_token_id(model.config)).int()
    if type_ids_argument(model) == EXPERT_TYPE_IDS:  # as the processor marks them (Ernie 4.5 VL)
        extra[EXPERT_TYPE_IDS] = torch.isin(ids, image_and_markers(model.config)).int()
    # the image belongs to the first row: HF's processor sends pixels for the batch's images
    hf_inputs = {"input_ids": ids, "attention_mask": mask, **for_torch(model, pixels), **extra}
    if position_mask is not None:
        hf_inputs[POSITION_MASK] = position_mask
    gen = torch.Generator().manual_seed(2)
    step = torch.randint(3, 100, (2, 1), generator=gen)
    step_mask = torch.cat([mask, torch.ones_like(step)], 1)
    step_positions = torch.from_numpy(next_positions(positions.numpy()))
    # multi-axis models compute their own prompt positions (get_rope_index): the recipe is
    # checked on them (and on the later steps' through generate)
    own = positions.dim() == 3
    # a forward with no position_ids (the BLIP family) hands its kwargs to the Q-Former as well,
    # whose own positions they are not: its language model counts positions from the mask
    own = own or "position_ids" not in inspect.signature(model.forward).parameters
    reference = None  # HF's uncached forward, where its cached steps count pads (Kosmos)
    if derives_own_positions(model):
        first_logits, second_logits, *reference = uncached_reference(
            model, hf_inputs, step, new_tokens
        )
    else:
        with torch.no_grad():
            first = model(
                **hf_inputs, **({} if own else {"position_ids": positions}), use_cache=True
            )
            second = language_model(model)(
                input_ids=step,
                attention_mask=step_mask,
                position_ids=step_positions,
                past_key_values=_cache_of(first),
                use_cache=True,
            )
        first_logits, second_logits = first.logits, second.logits
    types = {k: v.numpy() for k, v in extra.items()}
    graph_types = types.get(type_ids_argument(model) or "")  # the decoder's token_type_ids
    placed = None if position_mask is None else position_mask.numpy()
    embedded = runner.embedding(ids.numpy(), features, deepstack, placed)
    logits, cache = runner.decode(
        embedded["inputs_embeds"],
        mask.numpy(),
        positions.numpy(),
        runner.empty_cache(2),
        graph_types,
        embedded.get(DEEPSTACK),
        placed,
    )
    embedded = runner.embedding(step.numpy(), None)
    step_logits, _ = runner.decode(
        embedded["inputs_embeds"],
        step_mask.numpy(),
        step_positions.numpy(),
        cache,
        None,
        embedded.get(DEEPSTACK),
    )
    real = np.concatenate([np.ones((2, prepended), bool), mask.numpy().astype(bool)], 1)
    tokens, hf_logits = hf_generate(model, hf_inputs, new_tokens)
    note = ""
    if reference is not None:  # generate reported beside the reference (vlm_position_mask)
        note = reference_agreement(
            (tokens, hf_logits), reference, mask.numpy(), vlm_position_mask.REFERENCE
        )
        tokens, hf_logits = reference
    elif misreads_padding_when_cached(model):  # R-SWA: see vlm_row_reference
        alone = rows_alone(model, hf_inputs, new_tokens, hf_generate)
        note = reference_agreement(
            (tokens, hf_logits), alone, mask.numpy(), vlm_row_reference.REFERENCE
        )
        tokens, hf_logits = alone
    ours, our_logits = runner.generate(
        ids.numpy(),
        mask.numpy(),
        features,
        new_tokens,
        positions=positions.numpy(),
        token_type_ids=graph_types,
        deepstack=deepstack,
        position_mask=placed,
    )
    decoder = "decoder_model.onnx"
    pairs += [
        Pair(decoder, "logits", "prefill", logits, to_numpy(first_logits), real, True),
        Pair(decoder, "logits", "cached step", step_logits, to_numpy(second_logits), None, True),
        Pair(decoder, "logits", "generation", our_logits, hf_logits, None, True),
    ]
    return Comparison(pairs, Tokens(decoder, ours, tokens), note=note)
