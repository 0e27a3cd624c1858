"""Model classes that an auto mapping reaches through a composite config's text sub-config.

``AutoModelForCausalLM`` maps some composite model types (Emu3, Mllama) to a ``*ForCausalLM`` class
built from the *text* sub-config: ``from_config(Emu3Config)`` builds ``Emu3ForCausalLM`` from
``Emu3TextConfig``, and ``save_pretrained`` then writes the text config (``emu3_text_model``). That
nested type is in no auto mapping itself, so reading such a checkpoint back needs the parent's
entry: the model class whose ``config_class`` is the nested config's class.
"""

from __future__ import annotations

from typing import Any


def nested_model_class(hf_config: Any, mapping_names: dict[str, str], mapping: Any) -> type | None:
    """The class ``mapping`` gives a parent type when it is built from ``hf_config``'s class.

    ``mapping_names`` is the mapping's model_type -> class name table, ``mapping`` the lazy config
    class -> model class mapping. Parents are looked for in the same transformers module as the
    config class (a composite config and its sub-configs live together), so only that family's
    configs are imported.
    """
    from transformers.models.auto.configuration_auto import (
        CONFIG_MAPPING,
        model_type_to_module_name,
    )

    config_class = type(hf_config)
    module = config_class.__module__.split(".")
    if len(module) < 3 or module[:2] != ["transformers", "models"]:
        return None
    family = module[2]
    for parent_type in mapping_names:
        if model_type_to_module_name(parent_type) != family or parent_type not in CONFIG_MAPPING:
            continue
        parent_config = CONFIG_MAPPING[parent_type]
        if config_class not in getattr(parent_config, "sub_configs", {}).values():
            continue
        model_class = mapping[parent_config]
        if getattr(model_class, "config_class", None) is config_class:
            return model_class
    return None


class FromConfig:
    """``from_config`` for one model class, the way ``meta_model.instantiate_on_meta`` calls an auto class."""

    def __init__(self, model_class: type) -> None:
        self.model_class = model_class

    def from_config(self, config: Any, **kwargs: Any) -> Any:
        return self.model_class._from_config(config, **kwargs)
