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
    # tower keeps), in (row, column) order, found per token from the grid (grid_blocks).
    from mobius.synth.overrides.grid_blocks import block_patches

    m1, m2 = module.merge_kernel_size

    def forward(image_features: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        features = module.pre_norm(image_features)
        index = block_patches(image_grid_thw, features.shape[0], m1, m2)
        merged = features.index_select(0, index.reshape(-1))
        merged = merged.reshape(index.shape[0], -1)
        return module.linear_2(module.act(module.linear_1(merged)))

    module.forward = forward
