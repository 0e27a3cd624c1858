"""GGUF files as a model source: config and tokenizer from the file's metadata, weights from its
tensors (``source.py``, through transformers' loaders with their repeats skipped:
``hf_loading.py``), and its quantized blocks kept as ``MatMulNBits`` over the file's own
bytes (``blocks.py``, ``linears.py``). The header is read by ``mobius.sources.gguf_header``.

May import ``mobius.quant``, ``mobius.output``, ``mobius.sources``, ``mobius.errors`` and
``mobius.failures``.
"""
