"""``mobius --version``: mobius's version and those of the libraries a conversion depends on."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

# distribution names, in the order printed
LIBRARIES = ("torch", "transformers", "onnx", "onnxscript", "onnx-ir", "onnxruntime")
OPTIONAL = ("onnxruntime-genai", "diffusers")


def version_of(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str]:
    """``{name: version}``: mobius, then each library (``not installed`` where one is missing;
    the optional ones only where installed)."""
    from mobius import __version__

    found = {"mobius": __version__}
    for name in LIBRARIES:
        found[name] = version_of(name) or "not installed"
    for name in OPTIONAL:
        version = version_of(name)
        if version is not None:
            found[name] = version
    found["python"] = sys.version.split()[0]
    return found


def version_text() -> str:
    """One line per package: ``name version``."""
    found = versions()
    width = max(len(name) for name in found)
    return "".join(f"{name.ljust(width)}  {version}\n" for name, version in found.items())


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` and exit 0 (no subcommand needed)."""

    def __init__(
        self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None
    ):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(version_text())
        parser.exit(0)
