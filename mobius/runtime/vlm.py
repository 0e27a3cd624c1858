"""Run a converted vision–language model with plain onnxruntime: the three graphs of CONTRACTS.md
("Vision–language models") and greedy generation through them.

The loop a client runs: ``vision_encoder`` once per prompt's images, ``embedding`` on the prompt
with those features, ``decoder_model`` on the embedding graph's outputs with empty caches; each
later step embeds the new token alone (no image features) and feeds every ``present.{i}.*`` back.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mobius.runtime.causal_lm import _NUMPY_TYPES

GRAPHS = ("vision_encoder", "embedding", "decoder_model")
DEEPSTACK = "deepstack_visual_embeds"  # the embedding graph's per-position rows
DEEPSTACK_FEATURES = "deepstack_features"  # the vision graph's rows, per image token
POSITION_MASK = "image_embeds_position_mask"  # Kosmos: where the features go (no image token)


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def sequence_positions(mask: np.ndarray) -> np.ndarray:
    """The contract's ``position_ids``: real tokens counted from 0 (pads get 0)."""
    return np.clip(mask.cumsum(-1) - 1, 0, None).astype(np.int64)


def multi_axis_positions(
    ids: np.ndarray,
    mask: np.ndarray,
    image_grid_thw: np.ndarray | None,
    image_token_id: int,
    spatial_merge_size: int,
    newline: bool = False,
) -> np.ndarray:
    """The decoder's ``position_ids`` ``[3, batch, sequence]`` for the Qwen2-VL family (its
    ``get_rope_index`` for images): over each row's real tokens, text counts on from the last
    position on all three axes; a run of image tokens takes the next image's grid (in order over
    the batch) merged by ``spatial_merge_size`` and gets ``(start, start + row, start + column)``
    for its (temporal, height, width) axes, after which text goes on from
    ``start + max(grid rows, grid columns)``. Pads get 0. ``newline``: each row of the grid ends
    with one more token (HY-V4-VL's newline feature), positioned as one more column."""
    ids, mask = np.asarray(ids), np.asarray(mask).astype(bool)
    out = np.zeros((3, *ids.shape), dtype=np.int64)
    grids = iter(np.asarray(image_grid_thw).tolist() if image_grid_thw is not None else [])
    for b in range(ids.shape[0]):
        real = np.flatnonzero(mask[b])
        is_image = ids[b, real] == image_token_id
        rows, current, i = [], 0, 0
        while i < len(real):
            if not is_image[i]:
                rows.append(np.full(3, current))
                current, i = current + 1, i + 1
                continue
            t, h, w = next(grids)
            h, w = h // spatial_merge_size, w // spatial_merge_size + int(newline)
            tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
            block = np.stack([tt.ravel(), hh.ravel(), ww.ravel()], axis=1) + current
            rows.extend(block)
            current, i = current + max(h, w), i + len(block)
        out[:, b, real] = np.asarray(rows, dtype=np.int64).reshape(-1, 3).T
    return out


def next_positions(positions: np.ndarray) -> np.ndarray:
    """The first generated token's ``position_ids``: one past each row's largest position (on
    every axis, for multi-axis positions), as ``[..., batch, 1]``."""
    last = positions.max(axis=-1, keepdims=True)
    if positions.ndim == 3:
        last = np.broadcast_to(last.max(axis=0, keepdims=True), last.shape)
    return (last + 1).astype(np.int64)


class OnnxVisionLanguageModel:
    """The three graphs of a converted image-text-to-text model (``runtime/audio_llm.py``: the
    audio instance, with its own encoder graph and features name)."""

    graph_names = GRAPHS
    features_input = "image_features"  # the embedding graph's input for the encoder's rows

    def __init__(self, directory: str | Path, *, threads: int = 0) -> None:
        directory = Path(directory)
        self.manifest = json.loads((directory / "mobius.json").read_text(encoding="utf-8"))
        self.sessions = {
            name: _session(directory / f"{name}.onnx", threads)
            for name in self.graph_names
            if (directory / f"{name}.onnx").is_file()
        }
        decoder = self.sessions["decoder_model"]
        self.decoder_inputs = {i.name: i for i in decoder.get_inputs()}
        self.decoder_outputs = [o.name for o in decoder.get_outputs()]
        self.cache_names = [n for n in self.decoder_inputs if n.startswith("past_key_values.")]

    def positions(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        image_grid_thw: np.ndarray | None = None,
        target_sizes: np.ndarray | None = None,
    ) -> np.ndarray:
        """The prompt's ``position_ids`` in the layout the decoder takes (``mobius.json``'s
        ``position_ids``: ``sequence`` or ``multi-axis``, by ``position_recipe``: the Qwen2-VL
        grid when absent, ``grid-newline`` (the grid with a newline column), ``image-index``
        (``runtime.image_index``) or ``canvas`` (``runtime.canvas``))."""
        if self.manifest.get("position_ids") != "multi-axis":
            return sequence_positions(np.asarray(mask))
        recipe = self.manifest.get("position_recipe")
        if recipe == "canvas":
            from mobius.runtime.canvas import canvas_positions

            return canvas_positions(ids, mask, target_sizes, self.manifest["canvas"])
        merge = self.manifest.get("spatial_merge_size", 1)
        if recipe == "image-index":
            from mobius.runtime.image_index import image_index_positions

            token, axes = self.manifest["image_token_id"], self.manifest.get("position_axes", 3)
            return image_index_positions(ids, mask, image_grid_thw, token, merge, axes)
        return multi_axis_positions(
            ids,
            mask,
            image_grid_thw,
            self.manifest["image_token_id"],
            merge,
            newline=recipe == "grid-newline",
        )

    def vision(self, **pixels: np.ndarray) -> dict[str, np.ndarray]:
        """``vision_encoder``'s outputs by name for every image given: ``image_features``
        ``[num_image_tokens, hidden]`` (and ``deepstack_features`` where the family has
        them)."""
        session = self.sessions["vision_encoder"]
        names = {i.name for i in session.get_inputs()}
        run = session.run(None, {k: v for k, v in pixels.items() if k in names})
        return dict(zip([o.name for o in session.get_outputs()], run, strict=True))

    def image_features(self, **pixels: np.ndarray) -> np.ndarray:
        """``vision_encoder``: ``[num_image_tokens, hidden]`` for every image given."""
        return self.vision(**pixels)["image_features"]

    def embedding(
        self,
        ids: np.ndarray,
        features: np.ndarray | None,
        deepstack_features: np.ndarray | None = None,
        position_mask: np.ndarray | None = None,
        more: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """``embedding``'s outputs by name: ``inputs_embeds`` with ``features`` at the
        placeholder-token positions (and ``deepstack_visual_embeds``, the vision graph's
        ``deepstack_features`` placed likewise, where the family has them). ``position_mask``:
        the processor's ``image_embeds_position_mask``, where the graph places by it (zeros if
        not given). ``more``: another modality's rows by input name (``image_features`` for a
        speech LLM that takes images). A modality not given is fed as zero rows: a text-only
        step, or a prompt without it."""
        session = self.sessions["embedding"]
        given = {self.features_input: features, DEEPSTACK_FEATURES: deepstack_features}
        feeds = {"input_ids": np.asarray(ids, np.int64)}
        for spec in session.get_inputs():
            if spec.name == "input_ids":
                continue
            if spec.name == POSITION_MASK:
                feeds[spec.name] = _position_mask(position_mask, ids)
                continue
            value = (more or {}).get(spec.name, given.get(spec.name))
            if value is None:  # zero rows on the dynamic axis
                shape = [d if isinstance(d, int) else 0 for d in spec.shape]
                value = np.zeros(shape, dtype=_NUMPY_TYPES.get(spec.type, np.float32))
            feeds[spec.name] = value
        run = session.run(None, feeds)
        return dict(zip([o.name for o in session.get_outputs()], run, strict=True))

    def embed(self, ids: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        """``embedding``: token embeddings with ``features`` at the image-token positions."""
        return self.embedding(ids, features)["inputs_embeds"]

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        cache = {}
        for name in self.cache_names:
            dims = self.decoder_inputs[name].shape
            dtype = _NUMPY_TYPES.get(self.decoder_inputs[name].type, np.float32)
            shape = [batch if d == "batch" else d if isinstance(d, int) else 0 for d in dims]
            cache[name] = np.zeros(shape, dtype=dtype)
        return cache

    def decode(
        self,
        embeds: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        cache: dict[str, np.ndarray],
        token_type_ids: np.ndarray | None = None,
        deepstack: np.ndarray | None = None,
        position_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``decoder_model``: logits for ``embeds`` on top of ``cache``, and the cache after
        (``deepstack``: the embedding graph's ``deepstack_visual_embeds``; ``position_mask``:
        the new tokens' ``image_embeds_position_mask`` where the decoder reads it, zeros if not
        given)."""
        feeds = {
            "inputs_embeds": embeds,
            "attention_mask": np.asarray(mask, np.int64),
            "position_ids": np.asarray(positions, np.int64),
            **cache,
        }
        if "token_type_ids" in self.decoder_inputs:
            if token_type_ids is None:
                token_type_ids = np.zeros(embeds.shape[:2], dtype=np.int64)
            feeds["token_type_ids"] = np.asarray(token_type_ids, np.int64)
        if DEEPSTACK in self.decoder_inputs:
            if deepstack is None:
                raise ValueError(f"the decoder takes {DEEPSTACK}: pass the embedding graph's")
            feeds[DEEPSTACK] = deepstack
        if POSITION_MASK in self.decoder_inputs:
            feeds[POSITION_MASK] = _position_mask(position_mask, embeds.shape[:2])
        run = self.sessions["decoder_model"].run(None, feeds)
        outputs = dict(zip(self.decoder_outputs, run, strict=True))
        present = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in outputs.items()
            if n.startswith("present.")
        }
        return outputs["logits"], present

    def generate(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        features: np.ndarray | None,
        new_tokens: int,
        *,
        positions: np.ndarray | None = None,
        token_type_ids: np.ndarray | None = None,
        deepstack: np.ndarray | None = None,
        position_mask: np.ndarray | None = None,
        more: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Greedy tokens ``[batch, new_tokens]`` and each step's last logits; ``positions``
        defaults to the mask's count (multi-axis models pass :func:`multi_axis_positions`);
        ``deepstack``: the vision graph's ``deepstack_features``, where it has them;
        ``position_mask``: the prompt's ``image_embeds_position_mask`` (Kosmos); ``more``:
        another modality's rows for the prompt, by input name (``embedding``)."""
        ids, mask = np.asarray(ids, np.int64), np.asarray(mask, np.int64)
        if positions is None:
            positions = sequence_positions(mask)
        embedded = self.embedding(ids, features, deepstack, position_mask, more)
        logits, cache = self.decode(
            embedded["inputs_embeds"],
            mask,
            positions,
            self.empty_cache(len(ids)),
            token_type_ids,
            embedded.get(DEEPSTACK),
            position_mask,
        )
        tokens, seen = [], []
        for step in range(new_tokens):
            seen.append(logits[:, -1])
            token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            if step + 1 == new_tokens:
                break
            mask = np.concatenate([mask, np.ones_like(token)], axis=1)
            positions = next_positions(positions) if step == 0 else positions + 1
            embedded = self.embedding(token, None)
            logits, cache = self.decode(
                embedded["inputs_embeds"], mask, positions, cache, None, embedded.get(DEEPSTACK)
            )
        return np.concatenate(tokens, axis=1), np.stack(seen, 1)


def _position_mask(given: np.ndarray | None, like: np.ndarray | tuple[int, ...]) -> np.ndarray:
    """``image_embeds_position_mask`` as the graphs take it: the given one, else zeros (a step
    with no image) shaped as ``like`` (token ids, or a ``[batch, sequence]`` shape)."""
    if given is not None:
        return np.asarray(given, np.int64)
    return np.zeros(np.shape(like) if not isinstance(like, tuple) else like, dtype=np.int64)
