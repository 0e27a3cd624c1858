"""``mobius adapter PEFT_DIR --model OUT_DIR``: a PEFT LoRA adapter as an ``.onnx_adapter`` file
(onnxruntime's ``AdapterFormat``) that fills the graph inputs ``--lora-inputs`` made.

The file holds, per adapted module, ``<path>.lora_A.weight`` ``[rank, in]`` and
``<path>.lora_B.weight`` ``[out, rank]`` with ``alpha / r`` (``alpha / sqrt(r)`` for rslora)
already multiplied into B, in the graph's float dtype. A module of the graph the adapter does
not adapt gets rank-0 factors, so switching adapters never leaves another adapter's values
bound. The adapter is checked against ``mobius.json``'s ``lora_inputs`` first: a module the
graph has no inputs for, or a shape that differs, is refused naming the first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mobius.errors import OutputError, SourceError
from mobius.lora.inputs import input_names
from mobius.lora.peft_adapter import AdapterError, PeftAdapter, read_adapter

SUFFIX = ".onnx_adapter"
_DTYPES = {"f32": np.float32, "f16": np.float16}


def graph_modules(model_dir: Path) -> tuple[dict[str, list[int]], str]:
    """The modules ``model_dir``'s graph takes LoRA inputs for (path -> ``[out, in]``), and its dtype."""
    manifest = model_dir / "mobius.json"
    if not manifest.is_file():
        raise SourceError(f"{model_dir} has no mobius.json; it was not written by `mobius build`")
    entry = json.loads(manifest.read_text(encoding="utf-8")).get("lora_inputs")
    if not entry:
        raise SourceError(
            f"{model_dir} has no LoRA inputs; build it with `mobius build --lora-inputs`"
        )
    return entry["modules"], entry["dtype"]


def adapter_parameters(adapter: PeftAdapter, model_dir: Path) -> dict[str, np.ndarray]:
    """Every LoRA input of the graph -> its value for ``adapter`` (rank 0 where not adapted)."""
    modules, dtype = graph_modules(model_dir)
    if dtype not in _DTYPES:
        raise AdapterError(f"LoRA inputs in {dtype} are not supported (f32 or f16 graphs)")
    embedding = next((p for p, m in adapter.modules.items() if m.kind != "linear"), None)
    if embedding is not None:
        raise AdapterError(
            f"the adapter adapts the embedding '{embedding}'; only linears take LoRA inputs "
            "(fold it with `mobius build --adapter`)"
        )
    if adapter.replaced:
        first = next(iter(adapter.replaced))
        raise AdapterError(
            f"the adapter replaces '{first}' (modules_to_save), which graph inputs cannot carry; "
            "fold it with `mobius build --adapter`"
        )
    if adapter.fan_in_fan_out:
        raise AdapterError("fan_in_fan_out adapters (Conv1D layers) are not supported as inputs")
    numpy_dtype = _DTYPES[dtype]
    params: dict[str, np.ndarray] = {}
    for path, module in adapter.modules.items():
        if path not in modules:
            raise AdapterError(
                f"the adapter targets '{path}', which has no LoRA inputs in {model_dir}; rebuild "
                "with --lora-inputs covering it (or all-linear)"
            )
        out, rows = modules[path]
        if (module.b.shape[0], module.a.shape[1]) != (out, rows):
            raise AdapterError(
                f"adapter module '{path}' has the shape of a {[module.b.shape[0], module.a.shape[1]]} "
                f"weight but the graph's is {[out, rows]}; the adapter is for another model"
            )
        name_a, name_b = input_names(path)
        params[name_a] = adapter.load(module.a).float().numpy().astype(numpy_dtype)
        params[name_b] = adapter.scaled_b(module).numpy().astype(numpy_dtype)
    for path, (out, rows) in modules.items():
        if path not in adapter.modules:
            name_a, name_b = input_names(path)
            params[name_a] = np.zeros((0, rows), dtype=numpy_dtype)
            params[name_b] = np.zeros((out, 0), dtype=numpy_dtype)
    return params


def write_onnx_adapter(
    adapter_dir: str | Path, model_dir: str | Path, name: str | None = None
) -> Path:
    """Write ``model_dir/<name>.onnx_adapter`` (``name``: the adapter directory's name) for the
    ``--lora-inputs`` graph in ``model_dir``; returns its path."""
    import onnxruntime as ort

    adapter = read_adapter(adapter_dir)
    model_dir = Path(model_dir)
    params = adapter_parameters(adapter, model_dir)
    target = model_dir / f"{name or adapter.name}{SUFFIX}"
    values = {
        k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in params.items()
    }
    writer = ort.AdapterFormat()
    writer.set_adapter_version(1)
    writer.set_model_version(1)
    writer.set_parameters(values)
    partial = target.with_name(f".{target.name}.partial")
    try:
        writer.export_adapter(str(partial))
        partial.replace(target)
    except (OSError, RuntimeError) as exc:
        partial.unlink(missing_ok=True)
        raise OutputError(f"could not write {target}: {exc}") from None
    return target
