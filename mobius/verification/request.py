"""What a task family is asked to compare and gives back (``families.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mobius.verification.inputs import Given
from mobius.verification.pairs import Comparison


@dataclass
class Request:
    """One package to check against its checkpoint."""

    src: str
    package: Path
    manifest: dict
    given: Given = field(default_factory=Given)
    new_tokens: int = 8
    reference_dtype: str | None = None  # f32, f16, bf16; None: the checkpoint's own
    trust_remote_code: bool = False

    @property
    def task(self) -> str:
        return self.manifest.get("task", "")


@dataclass
class Result:
    """What a family compared: the outputs, the dtype PyTorch ran in, the inputs in words."""

    comparisons: list[Comparison]
    reference_dtype: str
    inputs: str
    components: list[str] = field(default_factory=list)
