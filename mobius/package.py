"""ModelPackage: the converted model plus the files that travel with it, saved atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from mobius.errors import OutputError

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"


def check_output_dir(target: Path, *, overwrite: bool = False) -> None:
    """Fail early, before any work, if ``target`` cannot receive a model."""
    if target.exists() and not target.is_dir():
        raise OutputError(f"output path {target} exists and is a file; choose a directory path")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise OutputError(f"output directory {target} is not empty; pass --overwrite to replace it")
    parent = target.parent if target.parent != Path("") else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to {probe}: permission denied; choose another --output")


@dataclass
class ModelPackage:
    """What ``mobius.build`` returns: an ONNX model (weights bound lazily) and companion files."""

    model: ir.Model
    extra_files: list[Path] = field(default_factory=list)
    texts: dict[str, str] = field(
        default_factory=dict
    )  # file name -> contents written beside the model

    def save(
        self, directory: str | os.PathLike, *, overwrite: bool = False, progress: bool = False
    ) -> Path:
        """Write ``model.onnx`` + ``model.onnx.data`` (+ extra files) atomically into ``directory``.

        Everything is written to a temporary directory beside the target, which is renamed into
        place only when complete; on any failure or interruption the temporary directory is removed.
        """
        target = Path(directory).absolute()
        check_output_dir(target, overwrite=overwrite)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.mobius-", dir=target.parent))
        try:
            self._write(tmp, progress=progress)
            _replace(tmp, target)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError):
                raise OutputError(f"could not write {target}: {exc.strerror or exc}") from exc
            raise
        return target

    def _write(self, tmp: Path, *, progress: bool) -> None:
        callback = _progress_callback(self.model) if progress else None
        ir.save(
            self.model, tmp / MODEL_FILE, external_data=DATA_FILE, callback=callback, max_workers=1
        )
        for path in self.extra_files:
            shutil.copyfile(path, tmp / path.name)
        for name, text in self.texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)


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
