"""ModelPackage: the converted model plus the files that travel with it, saved atomically."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from mobius.errors import OutputError

log = logging.getLogger("mobius")

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
# While ModelPackage.save runs, mobius.weights appends here the name of each tensor that it reads
# and finds NaN or Inf in (checked as the tensor is written: no second pass over the data).
NONFINITE: ContextVar[list[str] | None] = ContextVar("mobius_nonfinite", default=None)
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
        os.rmdir(tempfile.mkdtemp(prefix=f".{target.name}.mobius-probe-", dir=probe))
    except OSError as exc:
        raise OutputError(
            f"cannot write to {probe} ({exc.strerror or exc}); choose another --output"
        ) from None


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
        check_output_dir(target, overwrite=overwrite)
        tmp: Path | None = None
        made: list[Path] = []  # parent directories this call created
        nonfinite: list[str] = []
        token = NONFINITE.set(nonfinite)
        try:
            made = _make_parents(target.parent)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.mobius-", dir=target.parent))
            self._write(tmp, progress=progress)
            with _signals_deferred():
                _replace(tmp, target)
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
        finally:
            NONFINITE.reset(token)
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

    def _write(self, tmp: Path, *, progress: bool) -> None:
        for file, model in self.graphs().items():
            callback = _progress_callback(model) if progress else None
            data = DATA_FILE if file == MODEL_FILE else f"{file}.data"
            ir.save(model, tmp / file, external_data=data, callback=callback, max_workers=1)
        for path in self.extra_files:
            shutil.copyfile(path, tmp / path.name)
        for name, text in self.texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)


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


def _progress_callback(model: ir.Model):
    from tqdm import tqdm

    total = sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="writing weights", leave=False)

    def callback(tensor: ir.TensorProtocol, info) -> None:
        bar.update(tensor.nbytes)
        if bar.n >= total:
            bar.close()

    return callback
