"""ModelPackage: the converted model plus the files that travel with it, saved atomically."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from mobius import failures
from mobius.errors import OutputError, UnsupportedError
from mobius.output import direct_io
from mobius.output.disk_form import elided_on_disk
from mobius.output.saving import (
    collecting_nonfinite,
    frozen_heap,
    one_kernel_thread_while_saving,
    release_scratch,
)

log = logging.getLogger("mobius")

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def check_output_dir(target: Path, *, overwrite: bool = False) -> None:
    """Fail early, before any work, if ``target`` cannot receive a model; creates nothing."""
    if target.exists() and not target.is_dir():
        raise OutputError(f"output path {target} exists and is a file; choose a directory path")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise OutputError(f"output directory {target} is not empty; pass --overwrite to replace it")
    probe = target.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(
            f"cannot create {target}: {probe} is a file, not a directory; choose another --output"
        )
    # Ask the file system itself: access() says yes to root on read-only mounts such as /proc.
    try:
        with _signals_deferred():  # an interrupt between mkdtemp and rmdir would leave it
            os.rmdir(tempfile.mkdtemp(prefix=f".{target.name}.mobius-probe-", dir=probe))
    except OSError as exc:
        raise OutputError(
            f"cannot write to {probe} ({exc.strerror or exc}); choose another --output"
        ) from None


# Free space a save needs beyond the weights themselves (the graph, companion files, file-system
# overhead), as a share of the weights and a floor.
SPACE_MARGIN = 0.02
SPACE_FLOOR = 16 << 20
_HELD_LOCKS: set[str] = set()  # outputs this process holds the lock of (output_lock is reentrant)


def _lock_path(target: Path) -> Path:
    """Where the lock for ``target`` lives: a per-user directory under the temporary directory,
    named by the output's real path (its parents need not exist yet)."""
    key = hashlib.sha256(os.path.realpath(target).encode()).hexdigest()[:24]
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"mobius-{user}-locks" / f"{key}.lock"


@contextlib.contextmanager
def output_lock(target: Path) -> Iterator[None]:
    """Hold the exclusive right to write ``target`` among mobius processes on this machine.

    A second build into the same output while one runs fails at once with an OutputError (exit 2)
    instead of racing it: the result is always entirely one build's. The lock is an ``flock`` on a
    file, so the kernel releases it if the process dies; the file is removed on release.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no flock; builds into one output are not serialised there
        yield
        return
    key = os.path.realpath(target)
    if key in _HELD_LOCKS:
        yield
        return
    path = _lock_path(target)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:  # no usable temporary directory: build unserialised, as on Windows
        log.debug("no output lock for %s: %s", target, exc)
        yield
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OutputError(
                f"another mobius build (pid {holder}) is writing {target}; wait for it to "
                "finish or choose another --output"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # locked a file its last holder had just removed: take the new one
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _HELD_LOCKS.add(key)
    try:
        yield
    finally:
        _HELD_LOCKS.discard(key)
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def check_free_space(target: Path, needed: int) -> None:
    """Refuse before writing when the file system of ``target`` has less than ``needed`` bytes
    (plus a margin) free."""
    probe = target.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # nothing to measure with; a full disk is still caught while writing
    wanted = int(needed * (1 + SPACE_MARGIN)) + SPACE_FLOOR
    if free < wanted:
        raise OutputError(
            f"not enough free space for {target}: the model needs about {_size(wanted)} and "
            f"{probe} has {_size(free)} free; nothing was written; free some space or choose "
            "an --output on another disk"
        )


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


@dataclass
class ModelPackage:
    """What ``mobius.build`` returns: an ONNX model (weights bound lazily) and companion files."""

    model: ir.Model | None  # None when the package has several graphs (``models``)
    extra_files: list[Path] = field(default_factory=list)
    texts: dict[str, str] = field(
        default_factory=dict
    )  # file name -> contents written beside the model
    nonfinite: list[str] = field(default_factory=list)  # tensors with NaN/Inf, after save()
    # several graphs (encoder-decoder): graph name -> model, saved as <name>.onnx + <name>.onnx.data
    models: dict[str, ir.Model] = field(default_factory=dict)
    # what ``apply_weights`` calls, set by the build that made the package
    # (``mobius.graph_cache.apply``); None: this package cannot take other weights
    weights_applier: Callable[..., ModelPackage] | None = field(
        default=None, repr=False, compare=False
    )

    def apply_weights(
        self, checkpoint: str | os.PathLike, *, trust_remote_code: bool = False
    ) -> ModelPackage:
        """A new package: these graphs with the weights of ``checkpoint`` (a directory, hub id or
        GGUF file with the same config and tensor shapes), cast, quantized and packed as a build
        of it with this package's options does, byte for byte; no trace again. For a package
        built with ``weights=False`` the first call emits the graphs from the kept trace, bound to
        ``checkpoint``; each later call only reads, transforms and writes weights. This package
        is left as it was (apply as many checkpoints as you like)."""
        if self.weights_applier is None:
            raise UnsupportedError(
                "apply_weights needs a package made by mobius.build from a checkpoint; "
                "this one (from a module, a diffusers pipeline) cannot take other weights"
            )
        return self.weights_applier(self, checkpoint, trust_remote_code=trust_remote_code)

    def save(
        self, directory: str | os.PathLike, *, overwrite: bool = False, progress: bool = False
    ) -> Path:
        """Write ``model.onnx`` + ``model.onnx.data`` (+ extra files) atomically into ``directory``.

        Everything is written to a temporary directory beside the target, which is renamed into
        place only when complete; on any failure or interruption (KeyboardInterrupt, SIGTERM
        through the CLI) the temporary directory is removed and an existing target is left as it
        was. Tensors holding NaN or Inf (named by checkpoint key) go to ``self.nonfinite`` and the log.
        """
        target = Path(directory).absolute()
        with output_lock(target):
            return self._save(target, overwrite=overwrite, progress=progress)

    def _save(self, target: Path, *, overwrite: bool, progress: bool) -> Path:
        check_output_dir(target, overwrite=overwrite)
        check_free_space(target, self.nbytes())
        tmp: Path | None = None
        made: list[Path] = []  # parent directories this call created
        with collecting_nonfinite() as nonfinite:
            try:
                with _signals_deferred():  # a signal between mkdir and the assignment would leak it
                    made = _make_parents(target.parent)
                    tmp = Path(
                        tempfile.mkdtemp(prefix=f".{target.name}.mobius-", dir=target.parent)
                    )
                with failures.phase(f"writing {target}"):
                    self._write(tmp, progress=progress)
                failures.stop_checkpoint()
                with _signals_deferred():
                    # a signal that arrived while writing ends the build here, before the rename
                    if _stop_pending():
                        raise KeyboardInterrupt
                    _replace(tmp, target)
                    failures.settle()  # what arrives now is ignored by the CLI: the build is done
            except BaseException as exc:
                with _signals_deferred():
                    if tmp is not None:
                        shutil.rmtree(tmp, ignore_errors=True)
                    for parent in made:
                        with contextlib.suppress(OSError):
                            parent.rmdir()
                if isinstance(exc, OSError):
                    raise _output_error(target, exc) from exc
                raise
        self.nonfinite = sorted(set(nonfinite))
        if self.nonfinite:
            shown = ", ".join(self.nonfinite[:8])
            more = f" and {len(self.nonfinite) - 8} more" if len(self.nonfinite) > 8 else ""
            log.warning(
                "%d weight tensors hold NaN or Inf values (written as they are): %s%s",
                len(self.nonfinite),
                shown,
                more,
            )
        return target

    def graphs(self) -> dict[str, ir.Model]:
        """File name -> model, for every graph the package saves."""
        if self.models:
            return {f"{name}.onnx": model for name, model in self.models.items()}
        return {MODEL_FILE: self.model}

    def nbytes(self) -> int:
        """Bytes of weights that ``save`` writes, known from the initializers' types alone."""
        return sum(
            v.const_value.nbytes
            for model in self.graphs().values()
            for v in model.graph.initializers.values()
            if v.const_value is not None
        ) + sum(path.stat().st_size for path in self.extra_files if path.is_file())

    def _write(self, tmp: Path, *, progress: bool) -> None:
        try:
            with direct_io.large_save(self.nbytes()), frozen_heap():
                self._write_graphs(tmp, progress=progress)
        finally:
            release_scratch()

    def _write_graphs(self, tmp: Path, *, progress: bool) -> None:
        for file, model in self.graphs().items():
            data = DATA_FILE if file == MODEL_FILE else f"{file}.data"
            writers = writers_for(model)
            if writers > 1:
                spread_packings(model.graph, writers)
            with (
                _progress_callback(model, progress) as callback,
                one_kernel_thread_while_saving(),
                elided_on_disk(model),
            ):
                ir.save(
                    model,
                    tmp / file,
                    external_data=data,
                    callback=callback,
                    max_workers=writers,
                    max_in_flight_bytes=IN_FLIGHT_BYTES,
                )
        for path in self.extra_files:
            shutil.copyfile(path, tmp / path.name)
        for name, text in self.texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)


# Threads writing weights. With two, one tensor's read and cast/transpose overlap another's write
# (file I/O and torch kernels release the GIL; each tensor goes to its own offset of the
# preallocated file, so the bytes are those of one writer), and tensors held at once are bounded by
# IN_FLIGHT_BYTES plus one larger tensor (onnx_ir's budget). Only where every initializer is
# safe to write alongside others (``parallel_write_safe``: the checkpoint's own tensors, plain
# in-memory ones); anything else (quantized, packed, GGUF) is written by one thread. A direct
# write (``mobius.output.direct_io``) waits for the device instead of using the CPU, so with direct
# writes a third thread keeps both cores busy meanwhile.
WRITERS = 2
DIRECT_WRITERS = 3
IN_FLIGHT_BYTES = 256 << 20


def writes_alongside(tensor: ir.TensorProtocol | None) -> bool:
    """Whether ``tensor`` may be written (materialized) while other threads write others: an
    in-memory tensor, or a lazy one that says so (``parallel_write_safe``)."""
    from onnx_ir.tensor_adapters import TorchTensor

    if tensor is None or type(tensor) in (ir.Tensor, TorchTensor):
        return True
    return bool(getattr(tensor, "parallel_write_safe", False))


def writers_for(model: ir.Model) -> int:
    """How many threads may write ``model``'s weights: 1 unless every initializer may be written
    alongside others, else ``DIRECT_WRITERS`` with direct writes and ``WRITERS`` without."""
    if not all(writes_alongside(v.const_value) for v in model.graph.initializers.values()):
        return 1
    return DIRECT_WRITERS if direct_io.enabled() else WRITERS


def _packing_of(tensor: ir.TensorProtocol | None) -> object:
    """What must be computed to write ``tensor``, when that also makes other initializers: the
    ``packing`` of a quantized part (``mobius.quant.blocks.PackedPart``: one packing makes a
    weight's B, scales and zero points), the packings of a joined tensor's ``parts``; else None."""
    packing = getattr(tensor, "packing", None)
    if packing is not None:
        return id(packing)
    parts = getattr(tensor, "parts", None)
    if parts:
        keys = tuple(_packing_of(part) for part in parts)
        return keys if any(k is not None for k in keys) else None
    return None


def spread_packings(graph: ir.Graph, width: int) -> None:
    """Reorder ``graph``'s initializers so that ``width`` writer threads pack ``width`` different
    weights at once.

    The writers take initializers in order, and a weight's parts sit side by side, so the second
    and third writer would wait on the lock of the packing the first is making. Taking the
    weights ``width`` at a time, their first parts come first, then their second parts, and so
    on. Only the order of the bytes in the file changes (every offset is recorded in the graph).
    """
    groups: dict[object, list[ir.Value]] = {}
    for value in graph.initializers.values():
        key = _packing_of(value.const_value)
        groups.setdefault(id(value) if key is None else key, []).append(value)
    if len(groups) == len(graph.initializers):
        return  # nothing is made together: keep the order
    chunks = list(groups.values())
    ordered: list[ir.Value] = []
    for start in range(0, len(chunks), width):
        chunk = chunks[start : start + width]
        for index in range(max(len(parts) for parts in chunk)):
            ordered.extend(parts[index] for parts in chunk if index < len(parts))
    for value in ordered:
        graph.initializers.pop(value.name)
    for value in ordered:
        graph.initializers[value.name] = value


def _output_error(target: Path, exc: OSError) -> OutputError:
    if exc.errno in DISK_FULL:
        return OutputError(
            f"the disk is full: no space left on the device while writing {target}; "
            "nothing was written; free some space or choose an --output on another disk"
        )
    return OutputError(f"could not write {target}: {exc.strerror or exc}; nothing was written")


def _make_parents(parent: Path) -> list[Path]:
    """``mkdir -p parent``; returns the directories it created, deepest first."""
    missing = []
    probe = parent
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    parent.mkdir(parents=True, exist_ok=True)
    return missing


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs (a rename, a cleanup); they arrive after it."""
    signals = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask (Windows)
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stop_pending() -> bool:
    """SIGINT or SIGTERM is waiting to be delivered (held by ``_signals_deferred``)."""
    try:
        return bool(signal.sigpending() & {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, OSError):  # no sigpending (Windows)
        return False


def _replace(tmp: Path, target: Path) -> None:
    if target.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, trash / "old")
        try:
            os.rename(tmp, target)
        except BaseException:
            os.rename(trash / "old", target)
            raise
        finally:
            shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(tmp, target)


@contextlib.contextmanager
def _progress_callback(model: ir.Model, progress: bool) -> Iterator[Callable | None]:
    """A progress bar's callback for ``ir.save`` (None without ``progress``); the bar is closed
    (and its line cleared) however the save ends, so an error line starts a line of its own."""
    if not progress:
        yield None
        return
    from tqdm import tqdm

    total = sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="writing weights", leave=False)

    def callback(tensor: ir.TensorProtocol, info) -> None:
        bar.update(tensor.nbytes)

    try:
        yield callback
    finally:
        bar.close()


def graph_names(model: ir.Model) -> dict[str, list[str]]:
    """A graph's entry in mobius.json's ``graphs``: its input and output names, in order."""
    return {
        "inputs": [v.name for v in model.graph.inputs],
        "outputs": [v.name for v in model.graph.outputs],
    }
