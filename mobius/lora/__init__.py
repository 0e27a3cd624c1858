"""LoRA adapters (PEFT format): the adapter directory read and checked (``peft_adapter.py``),
folded into the base weights while they are written (``fold.py``, through the binder of
``mobius.output.weights``), or kept as graph inputs for serving many adapters on one graph
(``inputs.py``), with the ``.onnx_adapter`` files that fill them (``onnx_adapter.py``).
Activating an adapter at run time is ``mobius.runtime.genai_adapters``.

Called by the build driver (``mobius.convert``) and the CLI: may import ``mobius.sources`` (the
safetensors header) and ``mobius.errors``; never ``synth``, ``mobius.output`` or the driver.
"""

from mobius.lora.peft_adapter import AdapterError, LoraModule, PeftAdapter, read_adapter

__all__ = ["AdapterError", "LoraModule", "PeftAdapter", "read_adapter"]
