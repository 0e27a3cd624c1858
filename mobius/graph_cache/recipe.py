"""Weight recipes: the lazy initializers of a built package, kept without their checkpoint.

A built package's initializers are lazy tensors: each holds the function that reads its
checkpoint tensor(s) and transforms them (cast, transpose, join, quantize, pack) when the package is
saved. A recipe is those tensors pickled with every reference to the checkpoint they were bound to
(the ``Checkpoint`` object, its ``TensorEntry`` records, a GGUF file's refs) replaced by a
placeholder, so that unpickling binds the same transforms to another checkpoint of the same shape.

The standard pickle does not take the closures lazy tensors are made of; ``_Pickler`` stores a
function that cannot be imported by name as its code (``marshal``), its module (by name) and its
closure cells. ``marshal`` is specific to the Python version, which the cache key includes.

A recipe that would still point at the old checkpoint (a path into its directory, a memory map of
its file) is refused (``Unsafe``): binding it elsewhere would silently write the old weights.
"""

from __future__ import annotations

import importlib
import io
import marshal
import pickle
import threading
import types
from pathlib import PurePath
from typing import Any

__all__ = ["Unbound", "Unsafe", "dumps", "loads"]

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


class Unsafe(Exception):
    """The package holds something that cannot be rebound to another checkpoint."""


def _function(code: bytes, module: str, name: str, defaults, kwdefaults, cells, qualname: str):
    """Rebuild a function pickled by ``_Pickler`` (the inverse of its reduction)."""
    func = types.FunctionType(
        marshal.loads(code), vars(importlib.import_module(module)), name, defaults, cells
    )
    func.__kwdefaults__ = kwdefaults
    func.__qualname__ = qualname
    return func


def _cell(contents: Any = None, empty: bool = False) -> types.CellType:
    return types.CellType() if empty else types.CellType(contents)


def _lock(reentrant: bool) -> Any:
    return threading.RLock() if reentrant else threading.Lock()


def _module(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def _importable(func: types.FunctionType) -> bool:
    """``func`` is found again by its module and qualified name (pickled by reference)."""
    try:
        target: Any = importlib.import_module(func.__module__)
        for part in func.__qualname__.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, TypeError):
        return False
    return target is func


class _Pickler(pickle.Pickler):
    """Pickles closures by value and the checkpoint by placeholder (``persistent_id``)."""

    def __init__(self, file: io.BytesIO, roots: tuple[str, ...]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.roots = roots
        self.bound = False  # some tensor reads the checkpoint

    def persistent_id(self, obj: Any) -> Any:
        from mobius.output.weights import Checkpoint
        from mobius.sources.safetensors_header import TensorEntry

        if isinstance(obj, Checkpoint):
            self.bound = True
            return ("checkpoint",)
        if isinstance(obj, TensorEntry):
            self.bound = True
            return ("entry", obj.key, obj.stored, tuple(obj.shape))
        if isinstance(obj, (str, PurePath)) and self._under_source(str(obj)):
            raise Unsafe(f"a weight recipe refers to {obj} in the checkpoint")
        if type(obj).__name__ == "memmap":
            raise Unsafe("a weight recipe holds a memory map of the checkpoint")
        return None

    def _under_source(self, text: str) -> bool:
        return any(text == root or text.startswith(root.rstrip("/") + "/") for root in self.roots)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.FunctionType) and not _importable(obj):
            return _function, (
                marshal.dumps(obj.__code__),
                obj.__module__,
                obj.__name__,
                obj.__defaults__,
                obj.__kwdefaults__,
                obj.__closure__,
                obj.__qualname__,
            )
        if isinstance(obj, types.CellType):
            try:
                return _cell, (obj.cell_contents,)
            except ValueError:  # an empty cell (a name assigned later)
                return _cell, (None, True)
        fresh = _without_results(obj, pickle.HIGHEST_PROTOCOL)
        if fresh is not None:
            return fresh
        if isinstance(obj, types.ModuleType):
            return _module, (obj.__name__,)
        if isinstance(obj, _LOCK_TYPES):
            return _lock, (isinstance(obj, _LOCK_TYPES[1]),)
        return NotImplemented


def _without_results(obj: Any, protocol: int) -> tuple | None:
    """The reduction of a lazy tensor or a packing without what it computed while a package was
    saved (a cached tensor, parts not handed out yet): a recipe holds how to make the weights,
    never the weights of the checkpoint it was made from. None for other objects."""
    import onnx_ir as ir

    from mobius.quant.blocks import LazyPacking

    if isinstance(obj, ir.LazyTensor):
        dropped = {"_tensor": None}
    elif isinstance(obj, LazyPacking):
        dropped = {"pending": {}}
    else:
        return None
    reduced = list(obj.__reduce_ex__(protocol))
    state = reduced[2] if len(reduced) > 2 else None
    if isinstance(state, tuple):  # (__dict__, slots)
        state = tuple(
            {**part, **{k: v for k, v in dropped.items() if k in part}} if part else part
            for part in state
        )
    elif isinstance(state, dict):
        state = {**state, **{k: v for k, v in dropped.items() if k in state}}
    if len(reduced) > 2:
        reduced[2] = state
    return tuple(reduced)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, checkpoint: Any) -> None:
        super().__init__(file)
        self.checkpoint = checkpoint

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[0]
        if kind == "checkpoint":
            return self.checkpoint
        if kind == "entry":
            from mobius.errors import WeightsError
            from mobius.sources.safetensors_header import SAFETENSORS_DTYPES

            key, stored, shape = pid[1:]
            entry = self.checkpoint.entries.get(key)
            if entry is None:
                raise WeightsError(f"the checkpoint has no tensor '{key}', which the graph reads")
            if (entry.stored, tuple(entry.shape)) != (stored, shape):
                built = SAFETENSORS_DTYPES[stored][0]
                raise WeightsError(
                    f"tensor '{key}' is {entry.dtype_name} {list(entry.shape)} in the "
                    f"checkpoint, the graph was built for {built} {list(shape)}; the "
                    "checkpoints differ in shape"
                )
            return entry
        raise pickle.UnpicklingError(f"unknown placeholder {kind!r}")


class Unbound(Unsafe):
    """No tensor reads a checkpoint: the package was built without weights."""


def dumps(obj: Any, roots: tuple[str, ...], *, bound: bool = False) -> bytes:
    """Pickle ``obj`` (the initializers' tensors) with the checkpoint left out; ``roots`` are the
    checkpoint's directory and files, which nothing pickled may name (else ``Unsafe``); with
    ``bound``, ``Unbound`` unless some tensor reads the checkpoint."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, roots)
    try:
        pickler.dump(obj)
    except Unsafe:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        raise Unsafe(f"the weights cannot be kept ({type(exc).__name__}: {exc})") from None
    if bound and not pickler.bound:
        raise Unbound("no weight of the package reads a checkpoint")
    return buffer.getvalue()


def loads(data: bytes, checkpoint: Any) -> Any:
    """Unpickle what ``dumps`` made, bound to ``checkpoint``."""
    return _Unpickler(io.BytesIO(data), checkpoint).load()
