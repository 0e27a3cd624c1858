"""A package of packages: one sub-directory per pipeline component (or per VAE graph), plus
folders copied as they are (scheduler, tokenizer), saved atomically as one directory."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from mobius.output.package import ModelPackage


@dataclass
class DirectoryPackage(ModelPackage):
    """``parts``: sub-directory name -> its package ("" writes the part at the top level);
    ``folders``: directories copied beside them under their own names."""

    parts: dict[str, ModelPackage] = field(default_factory=dict)
    folders: list[Path] = field(default_factory=list)

    def graphs(self) -> dict[str, ir.Model]:
        return {
            (f"{name}/{file}" if name else file): model
            for name, part in self.parts.items()
            for file, model in part.graphs().items()
        }

    def nbytes(self) -> int:
        copied = sum(f.stat().st_size for d in self.folders for f in d.rglob("*") if f.is_file())
        return sum(part.nbytes() for part in self.parts.values()) + copied

    def _write(self, tmp: Path, *, progress: bool) -> None:
        for name, part in self.parts.items():
            target = tmp / name if name else tmp
            target.mkdir(exist_ok=True)
            part._write(target, progress=progress)
            self.nonfinite.extend(part.nonfinite)
        for folder in self.folders:
            shutil.copytree(folder, tmp / folder.name, symlinks=False)
        for path in self.extra_files:
            shutil.copyfile(path, tmp / path.name)
        for name, text in self.texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
