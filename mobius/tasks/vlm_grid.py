"""Vision towers that read a patch grid (``image_grid_thw``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V,
PaddleOCR-VL, ...), traced with the grid as a graph input.

transformers computes everything grid-dependent in ``transformers.vision_utils`` (rotary patch
positions, packed-sequence boundaries ``cu_seqlens``, Qwen2.5-VL's window order, learned
position-embedding interpolation) with Python loops over ``grid_thw.tolist()``, and attends one
image at a time by splitting on ``cu_seqlens.tolist()``. Neither traces for a dynamic number of
images. While the vision graph is traced (:func:`symbolic_grid`):

- each ``vision_utils`` function is replaced by one written per patch: a patch's image is found by
  comparing its index with the cumulative patch counts, so every shape is the number of patches
  (the first axis of ``pixel_values``) and nothing is data-dependent;
- the model's attention runs through transformers' packed ("flash", ``cu_seq_lens_q``) path, served
  by :func:`packed_attention`: one attention over all patches with a mask that keeps each patch to
  its own segment, which equals attending segment by segment;
- ``tensor.tolist()`` on a tensor with a dynamic first axis gives :class:`WholeSizes`, and
  ``torch.split`` by it gives the tensor whole (HF splits the merged features per image; the graph
  returns them concatenated anyway).

Window boundaries built here may repeat (empty segments), which the mask treats as nothing: a
patch's segment is the number of boundaries at or before it. Images have one frame each
(``t`` = 1), so an image's boundaries are its frame's; videos (several frames, each its own
segment) are outside the image-text-to-text contract and not handled.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

PACKED = "mobius_packed_flash"  # "flash" in the name selects transformers' cu_seqlens path
_GRID_FUNCTIONS = (
    "get_vision_position_ids",
    "get_vision_cu_seqlens",
    "get_vision_attention_seqlens",
    "get_vision_window_index",
    "get_vision_interpolation_indices_and_weights",
    "get_max_seqlen",
    "get_vision_nearest_position_ids",
)


class WholeSizes(list):
    """What ``tolist()`` of a dynamic-length tensor gives while tracing: 'all of it, in one'."""


def patch_of_image(grid: torch.Tensor, count: Any, unit: Any = 1) -> dict[str, torch.Tensor]:
    """For each of ``count`` positions (patches, or merged tokens of ``unit`` patches): its image
    (by comparison with the cumulative counts), its index within the image, and the image's
    ``t``, ``h``, ``w``."""
    t, h, w = grid[:, 0], grid[:, 1], grid[:, 2]
    sizes = t * h * w // unit
    ends = sizes.cumsum(0)
    index = torch.arange(count, device=grid.device)
    image = (index[:, None] >= ends[None, :]).to(torch.int64).sum(-1)
    start = (ends - sizes).index_select(0, image)
    return {
        "index": index,
        "image": image,
        "local": index - start,
        "start": start,
        "t": t.index_select(0, image),
        "h": h.index_select(0, image),
        "w": w.index_select(0, image),
    }


def _merge_order(local: torch.Tensor, width: torch.Tensor, merge: Any) -> tuple[Any, Any]:
    """(row, column) of the patch at ``local`` within a frame laid out block-major over
    ``merge`` x ``merge`` blocks (the order the merger reads patches in)."""
    blocks_w = width // merge
    in_col = local % merge
    in_row = (local // merge) % merge
    block_col = (local // (merge * merge)) % blocks_w
    block_row = local // (merge * merge * blocks_w)
    return block_row * merge + in_row, block_col * merge + in_col


class _Grid:
    """The traceable ``vision_utils`` functions, for ``patches`` patches in all."""

    def __init__(self, patches: Any, originals: dict[str, Any]) -> None:
        self.patches = patches
        self.originals = originals

    def position_ids(
        self,
        grid_thw: torch.Tensor,
        spatial_merge_size: Any,
        include_temporal: bool = False,
        kwargs: dict | None = None,
    ) -> torch.Tensor:
        if kwargs is not None and (given := kwargs.pop("position_ids", None)) is not None:
            return given
        p = patch_of_image(grid_thw, self.patches)
        merge = spatial_merge_size
        if isinstance(merge, torch.Tensor):
            merge = merge.index_select(0, p["image"])
        frame = p["h"] * p["w"]
        row, col = _merge_order(p["local"] % frame, p["w"], merge)
        if include_temporal:
            return torch.stack([p["local"] // frame, row, col], dim=-1)
        return torch.stack([row, col], dim=-1)

    def cu_seqlens(
        self, grid_thw: torch.Tensor, merge_temporal: bool = False, kwargs: dict | None = None
    ) -> torch.Tensor:
        """Each image's patch boundaries, ``[0, *cumulative t * h * w]``: its frames' boundaries
        for images (one frame each), as some towers read them per image (GLM-4V's position
        embedding)."""
        if kwargs is not None and (given := kwargs.pop("cu_seqlens", None)) is not None:
            return given
        sizes = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
        return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)]).to(torch.int32)

    def attention_seqlens(
        self,
        grid_thw: torch.Tensor,
        config: Any,
        merge_temporal: bool = False,
        kwargs: dict | None = None,
    ) -> tuple[torch.Tensor, None]:
        cu = self.cu_seqlens(grid_thw, merge_temporal=merge_temporal, kwargs=kwargs)
        return cu, self.max_seqlen(cu, config, kwargs=kwargs)

    def max_seqlen(
        self,
        cu_seqlens: Any,
        config: Any,
        kwargs: dict | None = None,
        kwarg_name: str = "max_seqlen",
    ) -> Any:
        """Unused by :func:`packed_attention` (it masks instead of packing)."""
        if kwargs is not None and (given := kwargs.pop(kwarg_name, None)) is not None:
            return given
        return None

    def window_index(
        self,
        grid_thw: torch.Tensor,
        spatial_merge_size: int,
        window_size: int,
        patch_size: int,
        kwargs: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Qwen2.5-VL's window order of the merged tokens, and the windows' boundaries in patches.

        Merged token ``j`` of a frame in window order lies in window row ``j // (size * W)``
        (earlier window rows are full), window column ``rest // (rows * size)`` (earlier windows
        in the row are full), then row-major inside its (possibly clipped) window.
        """
        if kwargs is not None:
            index, cu = kwargs.pop("window_index", None), kwargs.pop("cu_window_seqlens", None)
            if index is not None and cu is not None:
                return index, cu
        merge = spatial_merge_size
        unit = merge * merge
        size = window_size // merge // patch_size
        p = patch_of_image(grid_thw, self.patches // unit, unit)
        height, width = p["h"] // merge, p["w"] // merge
        frame = height * width
        j = p["local"] % frame
        window_row = j // (size * width)
        rest = j - window_row * size * width
        rows = torch.clamp(height - window_row * size, max=size)
        window_col = rest // (rows * size)
        inner = rest - window_col * rows * size
        cols = torch.clamp(width - window_col * size, max=size)
        row = window_row * size + inner // cols
        col = window_col * size + inner % cols
        index = p["start"] + p["local"] - j + row * width + col
        starts = (p["index"] - inner) * unit
        return index, _boundaries(starts, self.patches)

    def interpolation(
        self,
        grid_thw: torch.Tensor,
        num_grid_per_side: int,
        mode: str = "bilinear",
        align_corners: bool = False,
        spatial_merge_size: int = 1,
        padding: str = "border",
        kwargs: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' own per-patch formula, with the patch's image found by comparison."""
        from transformers.vision_utils import _interpolation_axis_taps_weights

        if kwargs is not None:
            indices, weights = (
                kwargs.pop("interp_indices", None),
                kwargs.pop("interp_weights", None),
            )
            if indices is not None and weights is not None:
                return indices, weights
        p = patch_of_image(grid_thw, self.patches)
        side = num_grid_per_side
        row, col = _merge_order(p["local"] % (p["h"] * p["w"]), p["w"], spatial_merge_size)
        h_taps, h_weights = _interpolation_axis_taps_weights(
            row, p["h"], side, mode, align_corners, padding
        )
        w_taps, w_weights = _interpolation_axis_taps_weights(
            col, p["w"], side, mode, align_corners, padding
        )
        n = h_taps.shape[1]
        indices = (h_taps[:, :, None] * side + w_taps[:, None, :]).reshape(-1, n * n)
        weights = (h_weights[:, :, None] * w_weights[:, None, :]).reshape(-1, n * n)
        return indices, weights

    def nearest_position_ids(
        self, target_sizes: torch.Tensor, num_patches_per_side: int, kwargs: dict | None = None
    ) -> torch.Tensor:
        """NaViT's nearest-bucket positions (MiniCPM-V): patch ``(row, col)`` of an ``h`` x ``w``
        image reads bucket ``(row / h, col / w)`` of the ``side`` x ``side`` table. The bucket is
        the number of boundaries at or below the coordinate (``bucketize(right=True)``), the
        coordinate divided as transformers divides it."""
        if kwargs is not None and (given := kwargs.pop("position_ids", None)) is not None:
            return given
        side = num_patches_per_side
        grid = torch.nn.functional.pad(target_sizes, (1, 0), value=1).to(torch.int64)
        p = patch_of_image(grid, self.patches)
        row, col = p["local"] // p["w"], p["local"] % p["w"]
        boundaries = torch.arange(1 / side, 1.0, 1 / side, device=grid.device)
        bucket_h = (row / p["h"])[:, None].ge(boundaries[None, :]).to(torch.int64).sum(-1)
        bucket_w = (col / p["w"])[:, None].ge(boundaries[None, :]).to(torch.int64).sum(-1)
        return bucket_h * side + bucket_w

    def replacements(self) -> dict[str, Any]:
        return {
            "get_vision_position_ids": self.position_ids,
            "get_vision_cu_seqlens": self.cu_seqlens,
            "get_vision_attention_seqlens": self.attention_seqlens,
            "get_vision_window_index": self.window_index,
            "get_vision_interpolation_indices_and_weights": self.interpolation,
            "get_max_seqlen": self.max_seqlen,
            "get_vision_nearest_position_ids": self.nearest_position_ids,
        }


def _boundaries(starts: torch.Tensor, total: Any) -> torch.Tensor:
    """``[0, *starts, total]`` as int32, the dtype transformers' boundaries have."""
    end = starts.new_zeros(1) + total
    return torch.cat([starts.new_zeros(1), starts, end]).to(torch.int32)


def segment_mask(cu_seqlens: torch.Tensor, length: Any) -> torch.Tensor:
    """``[length, length]``: True where two positions lie in the same segment of ``cu_seqlens``
    (a position's segment: how many boundaries after the first are at or before it)."""
    index = torch.arange(length, device=cu_seqlens.device)
    segment = (index[:, None] >= cu_seqlens[None, 1:].to(index.dtype)).to(torch.int64).sum(-1)
    return segment[:, None] == segment[None, :]


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' packed attention contract (``[batch, heads, seq, dim]`` in,
    ``[batch, seq, heads, dim]`` out) as one masked attention: positions attend within their
    ``cu_seq_lens_q`` segment only."""
    cu = kwargs.get("cu_seq_lens_q")
    mask = attention_mask
    if cu is not None:
        mask = segment_mask(cu, query.shape[2])
    if key.shape[1] != query.shape[1]:  # grouped keys and values
        groups = query.shape[1] // key.shape[1]
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(-1, -2)) * (
        scaling if scaling is not None else query.shape[-1] ** -0.5
    )
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    weights = torch.softmax(scores.float(), dim=-1).to(value.dtype)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), None


def _transformers_modules() -> list[Any]:
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None and (name == "transformers" or name.startswith("transformers."))
    ]


@contextlib.contextmanager
def symbolic_grid(model: torch.nn.Module, patches: Any) -> Iterator[None]:
    """While tracing the vision graph of ``model`` on ``patches`` patches: grid functions written
    per patch and attention through :func:`packed_attention` (see the module docstring)."""
    from transformers import vision_utils
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.utils import generic

    originals = {name: getattr(vision_utils, name, None) for name in _GRID_FUNCTIONS}
    originals["get_max_seqlen"] = generic.get_max_seqlen
    grid = _Grid(patches, originals)
    patched: list[tuple[Any, str, Any]] = []
    for module in _transformers_modules():
        for name, replacement in grid.replacements().items():
            current = getattr(module, name, None)
            if current is not None and current is originals[name]:
                patched.append((module, name, current))
                setattr(module, name, replacement)
    ALL_ATTENTION_FUNCTIONS.register(PACKED, packed_attention)
    configs = {id(c): c for m in model.modules() if _is_config(c := getattr(m, "config", None))}
    implementations = {
        k: c.__dict__.get("_attn_implementation_internal") for k, c in configs.items()
    }
    for config in configs.values():
        config.__dict__["_attn_implementation_internal"] = PACKED
    try:
        yield
    finally:
        for module, name, original in patched:
            setattr(module, name, original)
        for key, config in configs.items():
            config.__dict__["_attn_implementation_internal"] = implementations[key]


def _is_config(value: Any) -> bool:
    from transformers import PretrainedConfig

    return isinstance(value, PretrainedConfig)


@contextlib.contextmanager
def whole_sizes() -> Iterator[None]:
    """``tolist()`` of a tensor with a dynamic first axis gives :class:`WholeSizes`, and
    ``split``/``torch.split`` by :class:`WholeSizes` give the tensor whole."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    original_split, original_method = torch.split, torch.Tensor.split
    # FakeTensor (what export traces with) has its own tolist
    own = {cls: cls.__dict__.get("tolist") for cls in (torch.Tensor, FakeTensor)}

    def whole_or(original: Any) -> Any:
        def tolist(self: torch.Tensor) -> Any:
            if self.dim() > 0 and not is_concrete_int(self.shape[0]):
                return WholeSizes()
            return original(self)

        return tolist

    def split(tensor: torch.Tensor, sizes: Any, dim: int = 0) -> Any:
        if isinstance(sizes, WholeSizes):
            return (tensor,)
        return original_split(tensor, sizes, dim)

    def split_method(self: torch.Tensor, sizes: Any, dim: int = 0) -> Any:
        if isinstance(sizes, WholeSizes):
            return (self,)
        return original_method(self, sizes, dim)

    for cls in own:
        cls.tolist = whole_or(cls.tolist)  # type: ignore[method-assign]
    torch.split = split  # type: ignore[assignment]
    torch.Tensor.split = split_method  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, original in own.items():
            if original is None:  # inherited (torch.Tensor's comes from its C base)
                delattr(cls, "tolist")
            else:
                cls.tolist = original  # type: ignore[method-assign]
        torch.split = original_split
        torch.Tensor.split = original_method  # type: ignore[method-assign]
