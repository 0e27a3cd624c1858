"""The HF model built on the meta device: parameters without memory, buffers computed on CPU,
with transformers' noise off; what its constructors raise on a config that describes no
buildable model becomes a ConfigError."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import traceback
from pathlib import Path

import torch

from mobius import failures
from mobius.errors import ConfigError, UnsupportedError
from mobius.sources.config import ArchitectureConfig
from mobius.synth.shims import make_traceable
from mobius.tasks import Task

# transformers' default MoE path traces to ops nothing lowers (grouped_mm_fallback, histc);
# "mobius" (patterns/experts.py) makes each experts call one node for patterns/moe.py, and falls
# back to batched_mm (plain gathers and batched matmuls) where it cannot model the experts.
EXPERTS_IMPLEMENTATION = "mobius"


def instantiate_on_meta(
    config: ArchitectureConfig,
    task: Task,
    dtype: torch.dtype,
    implementations: tuple[str, ...] | None = None,
) -> torch.nn.Module:
    """Parameters on meta (no memory); buffers computed for real on CPU so we keep their values."""
    from accelerate import init_empty_weights

    hf = copy.deepcopy(config.hf_config)  # transformers writes into the config while building
    auto = task.auto_class(config)
    last_error: Exception | None = None
    implementations = implementations or task.attention_implementations
    if "mobius" in implementations:
        from patterns.attention import install

        install()
    from patterns.experts import install as install_experts
    from patterns.experts import prepare as prepare_experts

    install_experts()
    for attn in implementations:
        try:
            with init_empty_weights(include_buffers=False), quiet(), _HugeTensorsOnMeta():
                model = auto.from_config(
                    hf,
                    dtype=dtype,
                    attn_implementation=attn,
                    experts_implementation=EXPERTS_IMPLEMENTATION,
                )
            prepare_experts(model)
            return make_traceable(model.eval())
        except (ValueError, KeyError) as exc:  # the model does not support this implementation
            failures.check(exc)
            last_error = exc
        except BUILD_ERRORS as exc:
            failures.check(exc)  # an interrupt, out of memory or our own bug is not the config's
            raise config_error(config, exc) from exc
    raise UnsupportedError(f"transformers could not build {config.model_type}: {last_error}")


class _HugeTensorsOnMeta(torch.overrides.TorchFunctionMode):
    """Tensor factories asked for more than ``LIMIT`` bytes make meta tensors.

    ``init_empty_weights`` moves parameters to meta only once they are registered, after their
    storage was allocated: DeepSeek-V3's stacked experts (256 x 4096 x 7168 floats, 28 GiB) fail
    there, on a machine with less memory, before anything reaches meta. No buffer mobius needs the
    value of (rotary tables, position ids) is that large."""

    LIMIT = 1 << 30
    FACTORIES = frozenset({torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FACTORIES and kwargs.get("device") is None:
            dims = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
            if all(isinstance(d, int) for d in dims):
                dtype = kwargs.get("dtype") or torch.get_default_dtype()
                itemsize = torch.empty((), dtype=dtype, device="meta").element_size()
                if itemsize * math.prod(dims) > self.LIMIT:
                    kwargs = {**kwargs, "device": "meta"}
        return func(*args, **kwargs)


# What transformers' model constructors raise on a config that passed mobius's checks but still
# describes no buildable model (a rope factor of None, a pad token past the vocabulary, ...): the
# config is at fault, so the build is refused (exit 2) naming the error and where it arose.
BUILD_ERRORS = (
    TypeError,
    AttributeError,
    IndexError,
    ZeroDivisionError,
    AssertionError,
    OverflowError,
    RuntimeError,
)


def config_error(config: ArchitectureConfig, exc: BaseException) -> ConfigError:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" in {Path(frames[-1].filename).name}" if frames else ""
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return ConfigError(
        f"transformers cannot build a {config.model_type} model from config.json "
        f"({type(exc).__name__}{where}: {reason}); fix config.json"
    )


@contextlib.contextmanager
def quiet():
    """transformers' warnings and prints off; torch's log of fake-kernel TypeErrors off (the
    error reaches us anyway); FX stack traces off (mobius never reads
    ``node.meta["stack_trace"]``, and capturing one per node costs a few % of a trace)."""
    import torch.fx.config as fx_config

    logger = logging.getLogger("transformers")
    fake = logging.getLogger("torch._subclasses.fake_tensor")
    level, fake_level = logger.level, fake.level
    stack_traces = fx_config.do_not_emit_stack_traces
    logger.setLevel(logging.ERROR)
    fake.setLevel(logging.CRITICAL)
    fx_config.do_not_emit_stack_traces = True
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)
        fake.setLevel(fake_level)
        fx_config.do_not_emit_stack_traces = stack_traces
