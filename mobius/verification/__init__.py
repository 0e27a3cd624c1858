"""``mobius verify``: run a converted package and its PyTorch model on the same inputs and say,
per graph and output, how far apart they are and whether that is within the tolerance of the
package's precision (docs/design/verify.md).

    report = mobius.verify("HuggingFaceTB/SmolLM2-135M", "out/")
    print(report.render_text()); raise SystemExit(report.exit_code)

Runs what was built, against PyTorch: may import ``mobius.testing`` (the parity pairs the tests
and sweeps compute), ``mobius.runtime``, ``mobius.sources`` (with the readers ``mobius.gguf`` and
``mobius.quant`` register), ``mobius.quant.blocks``, ``mobius.tasks``, ``mobius.diffusers``,
``mobius.errors`` and ``mobius.failures``; never ``synth`` or ``mobius.convert``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mobius.verification.api import read_manifest, verify
    from mobius.verification.inputs import Given
    from mobius.verification.report import VerifyReport

__all__ = ["Given", "VerifyReport", "read_manifest", "verify"]

# imported on first use: the CLI's parser reads ``verification.cli``, and a build must not pay
# for torch and the parity pairs that ``verify`` needs
_LAZY = {
    "Given": "mobius.verification.inputs",
    "VerifyReport": "mobius.verification.report",
    "read_manifest": "mobius.verification.api",
    "verify": "mobius.verification.api",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mobius.verification' has no attribute {name!r}")
