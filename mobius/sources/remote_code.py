"""A checkpoint's own modeling code (``auto_map`` in config.json), run only with
``--trust-remote-code``.

transformers loads the classes ``auto_map`` names as dynamic modules, exactly as
``from_pretrained(..., trust_remote_code=True)`` does; nothing here imports them any other way.
The config is built with the config class ``auto_map`` names (or transformers' own for a known
model type), and remembers its checkpoint directory in ``name_or_path``, where transformers'
``from_config(..., trust_remote_code=True)`` also looks for the code. The model class a task
builds is the one ``auto_map`` names for that task's auto class (``AutoModelForCausalLM`` for
text generation, ``AutoModel`` for feature extraction, ...); where it names none, transformers'
own mapping decides, as it does for ``from_pretrained``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from mobius import failures
from mobius.errors import ConfigError, SourceError
from mobius.sources.config import check_sizes, hf_config_from_dict

CONFIG_CLASS = "AutoConfig"


def has_code(config: dict) -> bool:
    """Whether config.json points at code of the checkpoint's own."""
    return isinstance(config.get("auto_map"), dict) and bool(config["auto_map"])


def load_config(config: dict, directory: Path) -> Any:
    """The transformers config for ``config`` (config.json's contents): built with the class
    ``auto_map`` names, else transformers' own for the model type."""
    reference = config["auto_map"].get(CONFIG_CLASS)
    if reference is None:
        hf_config = hf_config_from_dict(config)  # a known model type with its own model code
    else:
        check_sizes(config)
        config_class = _load(reference, directory)
        try:
            hf_config = config_class.from_dict(config)
        except Exception as exc:
            failures.raise_if_fatal(exc)
            raise ConfigError(
                f"config.json does not build with its own config class {reference} "
                f"({type(exc).__name__}: {_line(exc)}); fix config.json"
            ) from None
    hf_config.name_or_path = str(directory)
    hf_config.auto_map = dict(config["auto_map"])
    return hf_config


def model_class(hf_config: Any, mapping: str) -> type | None:
    """The class ``auto_map`` names for the auto class of transformers' ``mapping``
    (``"MODEL_FOR_CAUSAL_LM"``), loaded from the checkpoint; None where it names none."""
    reference = _reference(hf_config, mapping)
    if reference is None:
        return None
    return _load(reference, Path(hf_config.name_or_path))


def class_names(hf_config: Any, mapping: str) -> tuple[str, ...]:
    """The class name ``auto_map`` gives for ``mapping``'s auto class, without loading it."""
    reference = _reference(hf_config, mapping)
    return () if reference is None else (reference.rsplit(".", 1)[-1],)


def record(hf_config: Any, mapping: str) -> dict[str, Any]:
    """``{"remote_code": ...}`` for mobius.json where the build ran the checkpoint's code: the
    classes (auto class -> ``module.Class``) and every file they were loaded from, relative
    imports included, with its sha256; else nothing."""
    auto_map = _auto_map(hf_config)
    if auto_map is None:
        return {}
    used = {
        CONFIG_CLASS: auto_map.get(CONFIG_CLASS),
        auto_class(mapping): _reference(hf_config, mapping),
    }
    used = {k: v for k, v in used.items() if v is not None}
    if not used:
        return {}
    directory = Path(hf_config.name_or_path)
    files: dict[str, Path] = {}
    for reference in used.values():
        files.update(_module_files(reference, directory))
    return {
        "remote_code": {
            "classes": used,
            "files": [{"name": n, "sha256": _sha256(p)} for n, p in sorted(files.items())],
        }
    }


@functools.cache
def auto_class(mapping: str) -> str | None:
    """The name of transformers' auto class that builds from ``mapping``
    (``MODEL_FOR_CAUSAL_LM`` -> ``AutoModelForCausalLM``)."""
    from transformers.models.auto import modeling_auto

    target = getattr(modeling_auto, f"{mapping}_MAPPING", None)
    for name in dir(modeling_auto):
        if (
            name.startswith("AutoModel")
            and getattr(getattr(modeling_auto, name), "_model_mapping", None) is target
        ):
            return name
    return None


def _auto_map(hf_config: Any) -> dict[str, str] | None:
    auto_map = getattr(hf_config, "auto_map", None)
    directory = getattr(hf_config, "name_or_path", None)
    if not isinstance(auto_map, dict) or not directory or not Path(directory).is_dir():
        return None  # a config not loaded by ``load_config``: the in-library classes only
    return auto_map


def _reference(hf_config: Any, mapping: str) -> str | None:
    auto_map = _auto_map(hf_config)
    name = auto_class(mapping)
    if auto_map is None or name is None:
        return None
    reference = auto_map.get(name)
    if isinstance(reference, (list, tuple)):  # (model, fast variant) pairs name the model first
        reference = reference[0]
    return reference if isinstance(reference, str) and reference else None


def _load(reference: str, directory: Path) -> type:
    """``module.Class`` (or ``repo--module.Class``) loaded by transformers' dynamic modules."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    module = reference.split("--")[-1].rsplit(".", 1)[0]
    if "--" not in reference and not (directory / f"{module}.py").is_file():
        raise SourceError(
            f"config.json's auto_map names {reference}, but {module}.py is not in {directory}; "
            "download the checkpoint's code files with it"
        )
    try:
        return get_class_from_dynamic_module(reference, str(directory))
    except Exception as exc:
        failures.raise_if_fatal(exc)
        raise SourceError(
            f"the checkpoint's own code {reference} does not load ({type(exc).__name__}: "
            f"{_line(exc)}); check that it runs with this transformers version"
        ) from None


def _module_files(reference: str, directory: Path) -> dict[str, Path]:
    """The file ``reference`` is defined in and every file it imports relatively, by name."""
    from transformers.dynamic_module_utils import get_cached_module_file, get_relative_import_files

    module = reference.split("--")[-1].rsplit(".", 1)[0] + ".py"
    if "--" in reference:  # code from another repository: the copy transformers ran
        from transformers.utils import HF_MODULES_CACHE

        repo = reference.split("--")[0]
        path = Path(HF_MODULES_CACHE) / get_cached_module_file(repo, module)
        base, prefix = path.parent, f"{repo}/"
    else:
        path, base, prefix = directory / module, directory, ""
    found = {prefix + module: path}
    for other in get_relative_import_files(str(path)):
        other = Path(other)
        found[prefix + other.relative_to(base).as_posix()] = other
    return found


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
