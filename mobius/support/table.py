"""The support table shipped with mobius (``table.json``, generated from the sweeps' results by
``benchmarks/support_table.py``): per model type, the tasks swept and the last result of each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

PASSING = ("pass", "pass-no-cache")


@dataclass(frozen=True)
class Result:
    """The last sweep result of one (model type, task) pair."""

    model_type: str
    task: str
    status: str
    max_diff: float | None = None
    reason: str = ""
    notes: tuple[str, ...] = ()
    run: str = ""

    @property
    def passed(self) -> bool:
        return self.status in PASSING


@cache
def load() -> dict:
    """``table.json`` as shipped in the package."""
    text = resources.files("mobius.support").joinpath("table.json").read_text(encoding="utf-8")
    return json.loads(text)


def results(model_type: str) -> list[Result]:
    """Every task swept for ``model_type`` (none when it is not in the table)."""
    tasks = load()["types"].get(model_type, {})
    return [_result(model_type, task, entry) for task, entry in tasks.items()]


def model_types() -> list[str]:
    return list(load()["types"])


def tasks() -> list[str]:
    """The task names in the table (diffusers variants under ``diffusers``)."""
    names = {t.split(" (")[0] for entries in load()["types"].values() for t in entries}
    return sorted(names)


def by_task(task: str) -> list[Result]:
    """Every type swept for ``task`` (a diffusers class's variants included)."""
    found = []
    for model_type, entries in load()["types"].items():
        for name, entry in entries.items():
            if name.split(" (")[0] == task:
                found.append(_result(model_type, name, entry))
    return found


def made_with() -> dict[str, str]:
    """The library versions the sweeps ran with."""
    return dict(load()["made_with"])


def version_note() -> str | None:
    """A line saying the installed transformers is not the one the table was made with, or None."""
    from mobius.versions import version_of

    made = made_with().get("transformers")
    installed = version_of("transformers")
    if made is None or installed is None or installed == made:
        return None
    return (
        f"the table was made with transformers {made}; {installed} is installed, so results "
        "for types that changed since may differ (mobius verify checks a model on this install)"
    )


def _result(model_type: str, task: str, entry: dict) -> Result:
    return Result(
        model_type,
        task,
        entry["status"],
        entry.get("max_diff"),
        entry.get("reason", ""),
        tuple(entry.get("notes", ())),
        entry.get("run", ""),
    )
