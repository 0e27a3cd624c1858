"""Whether a model's attention can reach transformers' attention interface at all: where no
attention module's code looks it up, capturing attention (``patterns/seq2seq_attention.py``)
cannot take any call, and the trace that tries it is skipped (ProphetNet, FSMT, SpeechT5)."""

from __future__ import annotations

import inspect
import sys
from functools import cache

import torch

from mobius.sources.config import ArchitectureConfig
from mobius.tasks import Task

# how transformers' modeling code reaches the interface (``ALL_ATTENTION_FUNCTIONS.get_interface``)
_INTERFACE_NAMES = ("ALL_ATTENTION_FUNCTIONS", "AttentionInterface")


def may_call_attention_interface(arch: ArchitectureConfig, task: Task, dtype: torch.dtype) -> bool:
    """False only when the model has attention modules and none of their modeling files names
    the interface: then no call can be captured. True when unsure (no attention module found
    by class name, or a source that cannot be read)."""
    from mobius.synth.meta_model import instantiate_on_meta

    model = instantiate_on_meta(arch, task, dtype)
    modules = {
        type(m).__module__
        for m in model.modules()
        if "Attention" in type(m).__name__ and hasattr(m, "forward")
    }
    return not modules or any(_names_interface(name) for name in modules)


@cache
def _names_interface(module_name: str) -> bool:
    try:
        source = inspect.getsource(sys.modules[module_name])
    except (KeyError, OSError, TypeError):
        return True
    return any(name in source for name in _INTERFACE_NAMES)
