"""Tasks: one file per I/O contract."""

from mobius.tasks.base import Task, TensorSpec
from mobius.tasks.causal_lm import CausalLMTask
from mobius.tasks.feature_extraction import FeatureExtractionTask

TASKS: dict[str, Task] = {t.name: t for t in (CausalLMTask(), FeatureExtractionTask())}

__all__ = ["TASKS", "CausalLMTask", "FeatureExtractionTask", "Task", "TensorSpec"]
