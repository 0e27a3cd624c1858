"""The synthesis path: the model traced on the meta device (``trace.py``), down the fallback chain
where it must be (``chain.py``; ``graphs.py`` for tasks of several graphs), what became of each
module (``analysis.py``), and the ONNX emitted in one walk, patterns first and lowering for the
rest (``emit.py``). Imported only when a build runs.

May import ``mobius.tasks``, ``patterns``, ``lowering``, ``mobius.sources``, the weight binder of
``mobius.output``, ``mobius.runtime.genai_vlm``, ``mobius.findings`` and ``mobius.fallbacks``;
``prepare.py`` imports ``mobius.gguf`` and ``mobius.quant`` so that their readers register. Never
``report``, ``ep`` or the build driver (``mobius.convert``), which sit above it.
"""
