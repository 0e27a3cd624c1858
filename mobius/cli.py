"""Command line: ``mobius build --model SRC --output DIR`` and ``mobius explain --model SRC``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from mobius.errors import MobiusError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mobius", description="Convert HuggingFace checkpoints to ONNX."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="convert a checkpoint to model.onnx + model.onnx.data")
    b.add_argument(
        "--model", required=True, help="local checkpoint directory or HuggingFace hub id"
    )
    b.add_argument("--output", required=True, help="directory to create (written atomically)")
    b.add_argument(
        "--dtype", default="f32", choices=["f32", "f16", "bf16"], help="weight and compute dtype"
    )
    b.add_argument(
        "--task",
        default=None,
        help="I/O contract: causal-lm or feature-extraction (default: detect)",
    )
    b.add_argument(
        "--no-weights", action="store_true", help="graph only; weights become named graph inputs"
    )
    b.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow checkpoints that ship their own code",
    )
    b.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    b.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    e = sub.add_parser(
        "explain",
        help="report what each module becomes (component, lowered ops, or blocked); no weights",
        description="Exit status: 0 converts fully, 1 converts without a KV cache (fallback), "
        "2 blocked (ops without a lowering) or an input error.",
    )
    e.add_argument(
        "--model",
        required=True,
        help="local checkpoint directory, a config.json, or a HuggingFace hub id",
    )
    e.add_argument("--task", default=None, help="I/O contract (default: detect)")
    e.add_argument("--json", metavar="FILE", help="write the report as JSON ('-' for stdout)")
    e.add_argument("--html", metavar="FILE", help="write the report as one self-contained page")
    e.add_argument("--trust-remote-code", action="store_true", help="allow checkpoint code")
    e.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    e.add_argument(
        "-q", "--quiet", action="store_true", help="no terminal report; exit status only"
    )
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the same cleanup runs; exits with 128 + 15."""

    exit_code = 128 + signal.SIGTERM


def _terminate_as_interrupt(signum, frame) -> None:
    raise Terminated(f"signal {signum}")


def _build(args: argparse.Namespace) -> int:
    import mobius
    from mobius.package import check_output_dir

    output = Path(args.output)
    check_output_dir(output.absolute(), overwrite=args.overwrite)
    started = time.perf_counter()
    package = mobius.build(
        args.model,
        dtype=args.dtype,
        task=args.task,
        weights=not args.no_weights,
        trust_remote_code=args.trust_remote_code,
    )
    target = package.save(output, overwrite=args.overwrite, progress=not args.quiet)
    if not args.quiet:
        written = ", ".join(str(target / name) for name in package.graphs())
        print(f"wrote {written} in {time.perf_counter() - started:.1f} s")
    return 0


def _write(path: str, text: str) -> None:
    from mobius.errors import OutputError

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OutputError(f"could not write {path}: {exc.strerror or exc}") from exc


def _explain(args: argparse.Namespace) -> int:
    import mobius

    report = mobius.explain(args.model, task=args.task, trust_remote_code=args.trust_remote_code)
    if args.json and args.json != "-":
        _write(args.json, report.to_json())
    if args.html:
        _write(args.html, report.render_html())
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    elif not args.quiet:
        color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
        sys.stdout.write(report.render_text(color=color))
    return report.exit_code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet = args.quiet or args.command == "explain"  # explain's output is the report itself
    # our own progress at INFO; other libraries (onnx_ir passes, ...) only when they warn
    logging.basicConfig(
        level=logging.ERROR if args.quiet else logging.WARNING, format="mobius: %(message)s"
    )
    logging.getLogger("mobius").setLevel(
        logging.ERROR if args.quiet else logging.WARNING if quiet else logging.INFO
    )
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        return _explain(args) if args.command == "explain" else _build(args)
    except MobiusError as exc:
        print(f"mobius: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        # the output directory is only ever renamed into place complete (see ModelPackage.save)
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"mobius: error: {what}; the output was not written", file=sys.stderr)
        return getattr(exc, "exit_code", 128 + signal.SIGINT)
