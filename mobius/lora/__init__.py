"""LoRA adapters (PEFT format): folded into the base weights while they are written
(``fold``), or kept as graph inputs for serving many adapters on one graph."""

from mobius.lora.peft_adapter import AdapterError, LoraModule, PeftAdapter, read_adapter

__all__ = ["AdapterError", "LoraModule", "PeftAdapter", "read_adapter"]
