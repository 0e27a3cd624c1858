"""onnxruntime-genai's ``Adapters``: ``.onnx_adapter`` files loaded once per model, one made
active per generator (``mobius generate --adapter``)."""

from __future__ import annotations

from pathlib import Path

from mobius.errors import ConfigError


class GenaiAdapters:
    """The adapters of one ``og.Model``, loaded on first use, by file."""

    def __init__(self, model) -> None:
        import onnxruntime_genai as og

        self.adapters = og.Adapters(model)
        self.loaded: dict[Path, str] = {}

    def activate(self, generator, path: str | Path) -> None:
        """Make the adapter in ``path`` the active one for ``generator``."""
        path = Path(path).absolute()
        if path not in self.loaded:
            if not path.is_file():
                raise ConfigError(f"adapter file {path} does not exist")
            name = f"{path.stem}-{len(self.loaded)}"
            try:
                self.adapters.load(str(path), name)
            except RuntimeError as exc:
                raise ConfigError(f"onnxruntime-genai cannot load {path.name}: {exc}") from None
            self.loaded[path] = name
        generator.set_active_adapter(self.adapters, self.loaded[path])
