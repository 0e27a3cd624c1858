"""What comes in: a checkpoint resolved to local files (a directory, a hub id, a GGUF file) and
checked before anything is allocated; its config as a flat ``ArchitectureConfig``; the
safetensors and GGUF headers; transformers' mapping from checkpoint keys to parameters; what a
``quantization_config`` says; the inputs refused up front.

The ground floor of the pipeline: imports ``mobius.errors`` and ``mobius.failures`` only. The
kinds whose weights need more than this (GGUF blocks, packed GPTQ/AWQ tensors) are read by
``mobius.gguf`` and ``mobius.quant``, which register their readers here (``readers.py``).
"""
