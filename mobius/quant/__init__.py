"""Weight-only quantization into ``com.microsoft`` ``MatMulNBits``: the block format and its
round-to-nearest packing (``blocks.py``); ``--precision`` over every linear (``linears.py``), a
tied embedding's lookup (``gather.py``) and MoE experts (``moe.py``); GPTQ/AWQ checkpoints placed
as they are (``prequantized.py``); and the forms onnxruntime's CPU kernels run fast
(``nbits_pack.py``, ``nbits_cpu.py``).

Rewrites the emitted ``onnx_ir`` model: may import ``mobius.output`` (tensors packed when the
model is saved), ``mobius.sources`` and ``mobius.errors``; never ``synth``.
"""
