"""transformers' GGUF loading, without the work it repeats.

mobius reads a GGUF file's config, tokenizer and tensor names through transformers
(``source.py``), and the tests load transformers' own model from the same file as their reference.
Three costs in that path are repeats, not work, and are skipped inside ``fast_gguf_loading()``:

- **the header, parsed again per loader** (config, then tokenizer): ``parsed_once`` hands later
  loaders the metadata already parsed (about 20 s for Gemma3's 262k-token vocabulary);
- **the header read through ``np.memmap``**: ``gguf.GGUFReader`` slices its memory map once per
  field part, and every slice of a ``memmap`` subclass runs its ``__array_finalize__``. A plain
  ``ndarray`` view of the same map reads the same bytes 4x faster (SmolLM2's 49k-token
  vocabulary: 2.7 s against 0.7 s);
- **the tensor-name table, rebuilt per module**: transformers' ``get_gguf_hf_weights_map`` walks
  every submodule and builds gguf's ``TensorNameMap`` for the whole architecture at each one (397
  times for SmolLM2, 9 s). The table depends only on (architecture, block count), so it is built
  once per pair.

Each patch gives what the original gives; they are installed while any caller is inside the
context (counted, so nested and concurrent builds share them) and removed after the last leaves.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

_lock = threading.Lock()
_users = 0
_originals: dict[str, object] = {}


def _plain_reader(reader_class: type) -> type:
    """``reader_class`` reading its file through a plain ``ndarray`` view of its memory map (the
    map stays open: the view's base holds it)."""

    class PlainArrayReader(reader_class):
        @property
        def data(self) -> np.ndarray:
            return self._plain_data

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._plain_data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    PlainArrayReader.__name__ = reader_class.__name__
    PlainArrayReader.__qualname__ = reader_class.__qualname__
    return PlainArrayReader


def _install() -> None:
    import gguf

    _originals["GGUFReader"] = gguf.GGUFReader
    _originals["get_tensor_name_map"] = gguf.get_tensor_name_map
    gguf.GGUFReader = _plain_reader(gguf.GGUFReader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=8)(gguf.get_tensor_name_map)


def _remove() -> None:
    import gguf

    gguf.GGUFReader = _originals.pop("GGUFReader")
    gguf.get_tensor_name_map = _originals.pop("get_tensor_name_map")


@contextmanager
def fast_gguf_loading() -> Iterator[None]:
    """transformers' GGUF loaders (``from_pretrained(..., gguf_file=...)``, its config, tokenizer
    and name map) with the plain-array reader and the name table built once per architecture."""
    global _users
    with _lock:
        if _users == 0:
            _install()
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _remove()


@contextmanager
def parsed_once(path: Path, parsed: dict) -> Iterator[None]:
    """transformers' config and tokenizer loaders each parse the whole GGUF header again
    (``load_gguf_checkpoint``); inside this block they get the metadata already ``parsed`` from
    ``path`` instead. Other calls pass through."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.load_gguf_checkpoint

    def load(file, return_tensors: bool = False, **kwargs):
        if not return_tensors and not kwargs and Path(file).resolve() == path.resolve():
            return copy.deepcopy(parsed)
        return original(file, return_tensors=return_tensors, **kwargs)

    gguf_utils.load_gguf_checkpoint = load
    try:
        yield
    finally:
        gguf_utils.load_gguf_checkpoint = original
