"""Tasks: one file per I/O contract."""

from mobius.tasks.base import Task, TensorSpec
from mobius.tasks.causal_lm import CausalLMTask
from mobius.tasks.feature_extraction import FeatureExtractionTask
from mobius.tasks.seq2seq import SPEECH2TEXT, TEXT2TEXT

TASKS: dict[str, Task] = {t.name: t for t in (CausalLMTask(), FeatureExtractionTask())}
TASKS.update({t.name: t for t in (TEXT2TEXT, SPEECH2TEXT)})  # two graphs each (seq2seq.py)

__all__ = ["TASKS", "CausalLMTask", "FeatureExtractionTask", "Task", "TensorSpec"]
