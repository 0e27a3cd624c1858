"""Diffusers components (``unet/``, ``transformer/``, ``vae_encoder/``, ``vae_decoder/``,
``controlnet/``, ``text_encoder*/``): each graph on random inputs at sizes other than the traced
ones (``mobius.verification.diffusers_feeds``), against its PyTorch model, loaded one at a time."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import torch

from mobius.errors import ConfigError
from mobius.runtime.causal_lm import MODEL_FILE, session
from mobius.testing.parity import contract_feeds, contract_pairs
from mobius.verification import reference
from mobius.verification.pairs import Comparison, Pair, for_session, for_torch, to_numpy
from mobius.verification.request import Request, Result
from mobius.verification.session import opened


def run(request: Request) -> Result:
    source = Path(request.src).expanduser()
    parts = _parts(request.package, request.manifest)
    comparisons, names, dtypes = [], [], set()
    for folder, manifest in parts:
        origin = _origin(source, manifest)
        comparison, dtype = _component(origin, folder, manifest, request)
        comparisons.append(comparison)
        names.append(folder.name if folder != request.package else manifest.get("component", ""))
        dtypes.add(dtype)
        gc.collect()  # one PyTorch component in memory at a time
    described = "random inputs at sizes other than the traced ones (batch 3, 16x8 latents)"
    dtype = "f32" if dtypes == {"f32"} else sorted(dtypes)[0]
    return Result(comparisons, dtype, described, components=names)


def _parts(package: Path, manifest: dict) -> list[tuple[Path, dict]]:
    """(folder, mobius.json) of every graph package: the package itself, or a pipeline's
    component folders."""
    if "components" not in manifest:
        return [(package, manifest)]
    parts = []
    for name in sorted(p.parent.name for p in package.glob("*/mobius.json")):
        folder = package / name
        parts.append((folder, json.loads((folder / "mobius.json").read_text(encoding="utf-8"))))
    if not parts:
        raise ConfigError(f"{package} lists components but holds none; rebuild it")
    return parts


def _origin(source: Path, manifest: dict) -> Path:
    """The checkpoint folder a component package was converted from."""
    component = manifest.get("component")
    if (source / "model_index.json").is_file():
        if component is None or not (source / component).is_dir():
            raise ConfigError(f"{source} has no component folder {component!r} for this package")
        return source / component
    return source


def _component(origin: Path, folder: Path, manifest: dict, request: Request):
    checkpoint = reference.open_checkpoint(origin)
    dtype = checkpoint.reference_dtype(request.reference_dtype)
    reference.check_memory(checkpoint, dtype, folder)
    sess = opened(lambda: session(folder), folder / MODEL_FILE)
    label = folder.name if folder != request.package else manifest.get("task", "model")
    if manifest.get("library") == "transformers":  # a pipeline's text encoder
        model = _text_encoder(origin, dtype)
        feeds = contract_feeds(sess, model.config)
        pairs = contract_pairs(model, folder, model.config, feeds, sess)
    else:
        pairs = _diffusers_pairs(checkpoint, manifest, sess, dtype)
    for pair in pairs:
        pair.graph = f"{label}/{MODEL_FILE}"
    return Comparison(pairs), reference.dtype_name(dtype)


def _diffusers_pairs(checkpoint, manifest: dict, sess, dtype: torch.dtype) -> list[Pair]:
    from mobius.diffusers.components import component_tasks
    from mobius.diffusers.config import architecture, class_name, model_class
    from mobius.diffusers.shared_modules import with_pretrained_sibling, with_sibling_config
    from mobius.verification.diffusers_feeds import feeds, torch_outputs

    name = class_name(checkpoint.config)
    if name is None:
        raise ConfigError(f"{checkpoint.directory}/config.json names no diffusers _class_name")
    task = next((t for t in component_tasks(name) if t.name == manifest.get("task")), None)
    if task is None:
        raise ConfigError(f"{name} has no graph {manifest.get('task')!r}; rebuild the package")
    with reference.quiet_loading():
        model = model_class(name).from_pretrained(checkpoint.directory, torch_dtype=dtype).eval()
        model = with_pretrained_sibling(model, Path(checkpoint.directory), dtype)  # a ControlNet
    config = with_sibling_config(checkpoint.config, Path(checkpoint.directory))
    inputs = feeds(task, architecture(config), sess)
    with torch.no_grad():
        expected = torch_outputs(task, model, for_torch(model, dict(inputs)))
    actual = sess.run(None, for_session(sess, inputs))
    names = [o.name for o in sess.get_outputs()]
    return [
        Pair(MODEL_FILE, n, "", a, to_numpy(e))
        for n, a, e in zip(names, actual, expected, strict=True)
    ]


def _text_encoder(origin: Path, dtype: torch.dtype) -> torch.nn.Module:
    import transformers

    index = json.loads((origin.parent / "model_index.json").read_text(encoding="utf-8"))
    library, cls_name = index.get(origin.name, (None, None))
    cls = getattr(transformers, str(cls_name), None)
    if library != "transformers" or not isinstance(cls, type):
        raise ConfigError(f"model_index.json names no transformers class for {origin.name}")
    with reference.quiet_loading():
        return cls.from_pretrained(origin, dtype=dtype).eval()
