"""``--ep cpu|cuda|dml|webgpu``: the emitted graph rewritten for an onnxruntime execution provider
(``rewrite.py``): GroupQueryAttention over each packed attention block (``block.py``,
``gqa.py``), q/k/v projections packed into one MatMul (``packed_qkv.py``), residual adds
fused with their RMSNorm (``skip_norm.py``), and, for the providers with ``FusedMatMul`` (cpu,
cuda, dml), linear weights kept as the checkpoint stores them (``stored_weights.py``).

Rewrites the emitted ``onnx_ir`` model: may import ``mobius.findings`` (the declines it records),
``mobius.output`` (joined tensors), ``mobius.sources`` and ``lowering``; never ``synth``.
"""
