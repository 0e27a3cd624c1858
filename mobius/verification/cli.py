"""``mobius verify`` on the command line (and ``mobius build --verify``): the parser's flags,
the terminal report and ``--json``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_input_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The flags that choose verify's inputs (shared by ``verify`` and ``build --verify``)."""
    p.add_argument("--prompt", help="text to use instead of random token ids")
    p.add_argument("--image", metavar="FILE", help="an image to use instead of random pixels")
    p.add_argument("--audio", metavar="FILE", help="a WAV file to use instead of random audio")
    p.add_argument(
        "--new-tokens",
        type=int,
        default=8,
        help="greedy tokens compared for generative tasks (default 8; 0: none)",
    )
    p.add_argument(
        "--reference-dtype",
        choices=["f32", "f16", "bf16"],
        default=None,
        help="run PyTorch in this dtype (default: the checkpoint's own)",
    )
    p.add_argument("--json", metavar="FILE", help="write the numbers as JSON ('-' for stdout)")


def add_parser(sub) -> None:
    v = sub.add_parser(
        "verify",
        help="compare a converted package with its PyTorch model on the same inputs",
        description="Exit status: 0 every output within the tolerance of the package's precision, "
        "1 outside it, 2 verify cannot run (bad input, missing files, not enough memory).",
    )
    v.add_argument(
        "--model", required=True, help="the checkpoint converted: directory, hub id or GGUF file"
    )
    v.add_argument("--onnx", required=True, help="the output directory of mobius build")
    add_input_flags(v)
    v.add_argument("--trust-remote-code", action="store_true", help="allow checkpoint code")
    v.add_argument(
        "-q", "--quiet", action="store_true", help="no terminal report; exit status only"
    )
    v.add_argument("--debug", action="store_true", help="print an internal error's traceback")


def run(args: argparse.Namespace, package: Path | None = None) -> int:
    """Verify ``package`` (``--onnx`` by default) against ``--model``; print and return."""
    from mobius.errors import ConfigError
    from mobius.verification import verify

    if args.new_tokens < 0:
        raise ConfigError("--new-tokens must be 0 or more")
    report = verify(
        args.model,
        package or Path(args.onnx),
        prompt=args.prompt,
        image=args.image,
        audio=args.audio,
        new_tokens=args.new_tokens,
        reference_dtype=args.reference_dtype,
        trust_remote_code=args.trust_remote_code,
    )
    if args.json and args.json != "-":
        report.write_json(args.json)
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    elif not args.quiet:
        sys.stdout.write(report.render_text())
    return report.exit_code
