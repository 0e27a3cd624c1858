"""PaddleOCR-VL: the projector's per-image patch merge, as one gather over every image."""

from __future__ import annotations

import torch


def merged_by_gather(module: torch.nn.Module) -> None:
    # PaddleOCRProjector.forward splits the patches by image (grid_thw.prod(1).tolist()) and
    # loops over the images in Python, reshaping each into (t, h/m, m, w/m, m, d) blocks: the
    # number of images and every reshape come from the grid's values, which torch.export cannot
    # trace for a grid given as an input. The same merge for all images at once: merged token k
    # of an image (frame f, block row r, block column c) reads the m x m patches at rows
    # r*m..r*m+m-1 and columns c*m..c*m+m-1 of that frame (row-major patches, the order the
    # tower keeps), in (row, column) order, found per token from the grid (mobius.tasks.vlm_grid).
    from mobius.tasks.vlm_grid import _patch_of_image as patch_of_image

    m1, m2 = module.merge_kernel_size

    def forward(image_features: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        features = module.pre_norm(image_features)
        unit = m1 * m2
        p = patch_of_image(image_grid_thw, features.shape[0] // unit, unit)
        width = p["w"]
        blocks_w = width // m2
        frame = (p["h"] // m1) * blocks_w
        frame_index, k = p["local"] // frame, p["local"] % frame
        first = (
            p["start"] * unit
            + frame_index * p["h"] * width
            + (k // blocks_w) * m1 * width
            + (k % blocks_w) * m2
        )
        rows = torch.arange(m1, device=features.device).repeat_interleave(m2)
        cols = torch.arange(m2, device=features.device).repeat(m1)
        index = first[:, None] + rows[None, :] * width[:, None] + cols[None, :]
        merged = features.index_select(0, index.reshape(-1)).reshape(-1, unit * features.shape[-1])
        return module.linear_2(module.act(module.linear_1(merged)))

    module.forward = forward
