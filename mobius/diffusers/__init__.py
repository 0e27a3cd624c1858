"""diffusers pipelines and models: one sub-directory per component, each traced like any model.

``build`` and ``explain`` take a pipeline directory (``model_index.json``) or one diffusers model
directory (``config.json`` with ``_class_name``); ``is_diffusers`` says whether a source is one.

A driver beside ``mobius.convert``: may import it (dtype names, the blocked-ops message),
``mobius.report``, ``synth``, ``mobius.tasks``, ``mobius.sources``, ``mobius.output`` and
``patterns``.
"""

from mobius.diffusers.pipeline import build, explain, is_diffusers

__all__ = ["build", "explain", "is_diffusers"]
