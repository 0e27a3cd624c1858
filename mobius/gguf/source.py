"""A GGUF file as a model source: config and tokenizer from its metadata, weights from its tensors.

transformers reads GGUF (``from_pretrained(..., gguf_file=...)``): its config and tokenizer
converters give ``config.json`` and the tokenizer files, written to a private directory that
stands in for a checkpoint directory. The tensors are named as transformers names them (its
GGUF-to-HF name map) and read the way it reads them: dequantized by ``gguf``, then passed through
the architecture's tensor processor (llama's Q/K row order, Gemma's norm offset, ...).

To keep a quantized weight quantized, its processor must leave the values alone. Each processor is
probed once per tensor with a column of row indices: an unchanged column means no change, a
permuted one a row permutation (llama's Q and K, undone by reading the blocks in that order, which
is exact); anything else (new values, a new shape) is applied to the dequantized tensor instead.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mobius import failures
from mobius.errors import SourceError
from mobius.gguf.blocks import FLOAT_TYPES, LAYOUTS, Layout
from mobius.gguf.hf_loading import fast_gguf_loading, parsed_once
from mobius.output.weights import Checkpoint
from mobius.sources.gguf_header import GGUFInfo, GGUFTensor, inspect_gguf
from mobius.sources.readers import GGUF, reads
from mobius.sources.resolve import Source, read_config
from mobius.sources.safetensors_header import TensorEntry

log = logging.getLogger("mobius")

SLAB_ROWS = 4096  # rows of a tensor decoded at a time


@dataclass
class GGUFRef:
    """Where one model parameter lives in the GGUF file, and what transformers does to it."""

    tensor: GGUFTensor
    shape: tuple[int, ...]  # torch order (ggml's reversed)
    rows: np.ndarray | None  # a row permutation of the stored rows (None: as stored)
    transformed: bool  # the processor changes values or shape: only the float path applies


class GGUFCheckpoint(Checkpoint):
    """The parameters a GGUF file holds, by HF name. ``load`` gives transformers' float32 values;
    ``layout``/``raw_rows`` give the quantized blocks of the tensors that can stay quantized."""

    def __init__(self, info: GGUFInfo, refs: dict[str, GGUFRef], processor, mapping) -> None:
        self.info, self.refs = info, refs
        self.processor, self.mapping = processor, mapping
        entries = {key: TensorEntry(key, info.path, "F32", ref.shape) for key, ref in refs.items()}
        super().__init__(entries)

    def layout(self, key: str) -> Layout | None:
        """The block layout of ``key`` when its blocks map to MatMulNBits, else None."""
        ref = self.refs.get(key)
        if ref is None or ref.transformed or len(ref.shape) != 2:
            return None
        return LAYOUTS.get(ref.tensor.type_name)

    def type_name(self, key: str) -> str:
        return self.refs[key].tensor.type_name

    def _stored(self, ref: GGUFRef) -> np.memmap:
        t = ref.tensor
        rows = int(np.prod(t.shape[1:]))
        return np.memmap(
            self.info.path,
            dtype=np.uint8,
            mode="r",
            offset=self.info.data_offset + t.offset,
            shape=(rows, t.nbytes // rows),
        )

    def raw_rows(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``key`` as stored bytes, in the order transformers uses."""
        ref = self.refs[key]
        stored = self._stored(ref)
        if ref.rows is None:
            return np.array(stored[start:stop])
        return stored[ref.rows[start:stop]]

    def load(self, key: str) -> torch.Tensor:
        """``key`` as transformers loads it: dequantized to float32, then processed."""
        from gguf import GGMLQuantizationType, dequantize

        ref = self.refs[key]
        t = ref.tensor
        stored = np.asarray(self._stored(ref))
        if t.type_name in FLOAT_TYPES:
            dtype = {"F32": np.float32, "F16": np.float16, "F64": np.float64}.get(t.type_name)
            values = (
                stored.view(dtype)
                if dtype is not None
                else (stored.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            ).astype(np.float32)
        else:
            values = dequantize(stored, GGMLQuantizationType(t.type_id))
        values = values.reshape(tuple(reversed(t.shape)))
        if ref.rows is not None:
            values = values[ref.rows]
        elif ref.transformed:
            values = self.processor.process(
                weights=values,
                name=t.name,
                tensor_key_mapping=self.mapping,
                parsed_parameters={"tensors": {}},
            ).weights
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


@reads(GGUF)
def resolve_gguf(path: Path, *, need_weights: bool) -> Source:
    """A ``Source`` for the GGUF file ``path`` (its header checked first)."""
    info = inspect_gguf(path)
    _check_metadata(info)
    directory = Path(tempfile.mkdtemp(prefix="mobius-gguf-"))
    atexit.register(shutil.rmtree, directory, True)
    with fast_gguf_loading():
        config, parsed = _write_config_and_tokenizer(info, directory)
        checkpoint = _checkpoint(info, config, parsed)  # header only: names and shapes checked
    source = Source(directory=directory, config=read_config(directory))
    source.gguf = info  # type: ignore[attr-defined]
    if need_weights:
        source.tensors = checkpoint.entries
        source.checkpoint = checkpoint  # type: ignore[attr-defined]
    return source


REQUIRED_METADATA = ("block_count", "embedding_length")


def _check_metadata(info: GGUFInfo) -> None:
    """The metadata every model architecture needs for its config (else transformers would fill
    in its defaults and the weights would not fit)."""
    arch = info.architecture
    if arch is None:
        raise SourceError(f"{info.path.name} names no general.architecture in its metadata")
    missing = [f"{arch}.{k}" for k in REQUIRED_METADATA if f"{arch}.{k}" not in info.metadata]
    if missing:
        raise SourceError(
            f"{info.path.name} is a GGUF file without the metadata its {arch} config needs "
            f"({', '.join(missing)}); re-create it with a current llama.cpp"
        )


def _write_config_and_tokenizer(info: GGUFInfo, directory: Path):
    """config.json, generation_config.json and the tokenizer, converted by transformers."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = info.path.parent, info.path.name
    what = f"{name} ({info.architecture or 'unknown architecture'})"
    try:
        parsed = load_gguf_checkpoint(str(info.path), return_tensors=False)
        with parsed_once(info.path, parsed):
            config = AutoConfig.from_pretrained(folder, gguf_file=name)
    except Exception as exc:  # ValueError for an architecture transformers does not map, and more
        failures.raise_if_fatal(exc)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(
            f"transformers cannot read the config of {what}: {reason}; mobius reads GGUF through "
            "transformers' GGUF support, so only the architectures it maps convert"
        ) from None
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights' quantization is handled here, per tensor
    config.save_pretrained(directory)
    GenerationConfig.from_model_config(config).save_pretrained(directory)
    try:
        with parsed_once(info.path, parsed):
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        tokenizer.save_pretrained(directory)
    except Exception as exc:
        failures.raise_if_fatal(exc)
        log.warning("no tokenizer converted from %s (%s)", name, str(exc).splitlines()[0])
    return config, parsed


def _checkpoint(info: GGUFInfo, config, parsed: dict) -> GGUFCheckpoint:
    """Name every tensor as transformers does and probe its processor (see the module doc)."""
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    arch = info.architecture or ""
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=parsed.get("config", {}))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    mapping = get_gguf_hf_weights_map(model, processor)
    params = dict(model.state_dict())
    refs: dict[str, GGUFRef] = {}
    for tensor in info.tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape))
        probe = _probe(processor, tensor.name, shape, mapping)
        if probe is None:
            raise SourceError(
                f"{info.path.name}: transformers assembles tensor {tensor.name} ({arch}) from "
                "several GGUF tensors, which mobius does not read yet"
            )
        name, rows, transformed = probe
        if name not in mapping:
            continue  # transformers does not load it either (rope tables, ...)
        key = mapping[name]
        wanted = params.get(key)
        if wanted is not None and tuple(wanted.shape) != shape and not transformed:
            raise SourceError(
                f"{info.path.name}: tensor {tensor.name} has shape {list(shape)} but the config "
                f"from its metadata implies {list(wanted.shape)} for {key}; the file is corrupt"
            )
        refs[key] = GGUFRef(tensor, shape, rows, transformed)
    if not refs:
        raise SourceError(f"{info.path.name}: no tensor maps to a parameter of {arch}")
    return GGUFCheckpoint(info, refs, processor, mapping)


def _probe(processor, name: str, shape: tuple[int, ...], mapping: dict):
    """(name, row permutation or None, transformed) for what ``processor`` does to a tensor of
    ``shape``; None when it stores tensors aside to merge them (MoE experts)."""
    rows = shape[0]
    column = np.arange(rows, dtype=np.float64).reshape(rows, *([1] * (len(shape) - 1)))
    aside: dict = {"tensors": {}}
    result = processor.process(
        weights=column, name=name, tensor_key_mapping=mapping, parsed_parameters=aside
    )
    if aside["tensors"]:
        return None
    out = np.asarray(result.weights)
    if len(shape) != 2 or out.shape != column.shape:
        same = out.shape == column.shape and np.array_equal(out, column)
        return result.name, None, not same
    order = out[:, 0]
    if np.array_equal(order, column[:, 0]):
        return result.name, None, False
    if np.array_equal(np.sort(order), column[:, 0]):
        return result.name, order.astype(np.int64), False
    return result.name, None, True
