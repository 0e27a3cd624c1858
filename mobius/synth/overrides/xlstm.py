"""xLSTM: configurations whose cached calls transformers itself cannot run."""

from __future__ import annotations

import torch


def refuse_scaled_head_dims(module: torch.nn.Module) -> None:
    """``xLSTMModel`` with ``qk_dim_factor`` or ``v_dim_factor`` other than 1: transformers'
    ``xLSTMCache`` sizes its states from ``config.qk_head_dim``/``v_head_dim``, which ignore the
    factors, so HF's own call with a cache fails ("matC_old has wrong shape") and its
    full-sequence call branches on the length (chunkwise kernel): neither form traces."""
    from mobius.errors import ConfigError

    config = module.config
    factors = {"qk_dim_factor": config.qk_dim_factor, "v_dim_factor": config.v_dim_factor}
    scaled = {name: value for name, value in factors.items() if value != 1.0}
    if scaled:
        shown = ", ".join(f"{name}={value}" for name, value in scaled.items())
        raise ConfigError(
            f"xlstm: {shown} gives states transformers' own xLSTMCache does not size for "
            "(HF's cached call fails: matC_old has wrong shape), so there is no cached reference"
        )
