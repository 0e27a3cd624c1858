"""The peer exporters benchmarks/convert.py runs against mobius, each a small function.

``torch.onnx.export(dynamo=True)`` and ``transformers.exporters`` run in a subprocess of their own
(``command`` in convert.py calls these functions there); the onnxruntime-genai builder is its CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _wrapped_with_cache(model):
    """The HF model with the KV cache as flat tensors: (ids, mask, pos, k0, v0, ...) -> (logits, k0, v0, ...)."""
    import torch
    from transformers import DynamicCache

    class WithCache(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids, past):
            cache = DynamicCache(config=self.inner.config)
            for i in range(len(past) // 2):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
            presents = []
            for layer in out.past_key_values.layers:
                presents += [layer.keys, layer.values]
            return (out.logits, *presents)

    return WithCache(model)


def _sample(config, batch=2, past=3, seq=4):
    import torch

    kv = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    pos = torch.arange(past, past + seq).expand(batch, seq).contiguous()
    cache = [torch.randn(batch, kv, past, head_dim) for _ in range(2 * config.num_hidden_layers)]
    return ids, mask, pos, cache


def export_torch_dynamo(checkpoint: Path, output: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids, mask, pos, cache = _sample(model.config)
    batch, seq, past = torch.export.Dim("batch"), torch.export.Dim("seq"), torch.export.Dim("past")
    total = torch.export.Dim.AUTO
    shapes = (
        {0: batch, 1: seq},
        {0: batch, 1: total},
        {0: batch, 1: seq},
        [{0: batch, 2: past} for _ in cache],
    )
    names = ["input_ids", "attention_mask", "position_ids"]
    outs = ["logits"]
    for i in range(model.config.num_hidden_layers):
        names += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    output.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(
            _wrapped_with_cache(model),
            (ids, mask, pos, cache),
            dynamo=True,
            dynamic_shapes=shapes,
            input_names=names,
            output_names=outs,
            external_data=True,
        )
    program.save(str(output / "model.onnx"), external_data=True)


def export_transformers(checkpoint: Path, output: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache
    from transformers.exporters.configs import OnnxConfig
    from transformers.exporters.exporter_onnx import OnnxExporter

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids, mask, pos, flat = _sample(model.config)
    cache = DynamicCache(config=model.config)
    for i in range(model.config.num_hidden_layers):
        cache.update(flat[2 * i], flat[2 * i + 1], i)
    inputs = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": pos,
        "past_key_values": cache,
        "use_cache": True,
    }
    with torch.no_grad():
        exported = OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True))
    exported.save_pretrained(output)


def export_ort_genai(checkpoint: Path, output: Path) -> list[str]:
    cache = output.parent / (output.name + ".cache")
    return [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(checkpoint),
        "-o",
        str(output),
        "-p",
        "fp32",
        "-e",
        "cpu",
        "-c",
        str(cache),
    ]
