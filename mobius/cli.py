"""Command line: ``mobius build --model SRC --output DIR``, ``mobius explain --model SRC`` and
``mobius generate --model DIR --prompt TEXT``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from mobius import failures
from mobius.errors import InternalError, MobiusError
from mobius.failures import Terminated

__all__ = ["Terminated", "main"]


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
        "--dtype",
        default=None,
        choices=["f32", "f16", "bf16"],
        help="weight and compute dtype (default: f16 with --ep cuda/dml/webgpu, else f32)",
    )
    b.add_argument(
        "--ep",
        default=None,
        choices=["cpu", "cuda", "dml", "webgpu"],
        help="tune the graph for an onnxruntime execution provider (default: portable graph)",
    )
    b.add_argument(
        "--task",
        default=None,
        help="I/O contract, a Hugging Face pipeline name (default: from the config's architectures)",
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
    b.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 2) instead of taking a fallback that costs fused components or the "
        "KV cache",
    )
    _quantization_flags(b)
    _feature_flags(b)
    _component_flag(b)
    b.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    b.add_argument(
        "--debug", action="store_true", help="print the traceback of an internal error (exit 1)"
    )
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
    e.add_argument(
        "--debug", action="store_true", help="print the traceback of an internal error (exit 1)"
    )
    _component_flag(e)
    _add_generate_parser(sub)
    _add_build_gguf_parser(sub)
    return parser


def _component_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--component",
        metavar="NAME",
        help="diffusers pipeline (model_index.json): only this component (unet, vae, ...)",
    )


def _add_build_gguf_parser(sub) -> None:
    """``mobius build-gguf FILE.gguf --output DIR``: ``build --model FILE.gguf`` as the seed spells
    it (mobius.gguf.source)."""
    g = sub.add_parser("build-gguf", help="convert a GGUF file (same as build --model FILE.gguf)")
    g.add_argument("model", metavar="FILE.gguf", help="the GGUF file")
    g.add_argument("--output", required=True, help="directory to create (written atomically)")
    g.add_argument("--dtype", default="f32", choices=["f32", "f16"], help="activations and scales")
    g.add_argument("--accuracy-level", type=int, default=0, choices=range(5))
    g.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    g.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    g.add_argument("--debug", action="store_true", help="print an internal error's traceback")
    g.set_defaults(
        task=None,
        no_weights=False,
        trust_remote_code=False,
        strict=False,
        precision=None,
        block_size=32,
        symmetric=False,
        quant_exclude=[],
        ep=None,
        component=None,
        features=[],
        max_seq_len=None,
        release=False,
    )


def _quantization_flags(b: argparse.ArgumentParser) -> None:
    q = b.add_argument_group("weight-only quantization (MatMulNBits)")
    q.add_argument(
        "--precision", choices=["int4", "int8"], default=None, help="quantize every linear weight"
    )
    q.add_argument("--block-size", type=int, default=32, help="weights per scale (default 32)")
    q.add_argument("--symmetric", action="store_true", help="no zero points (default: asymmetric)")
    q.add_argument(
        "--accuracy-level",
        type=int,
        default=None,
        choices=range(5),
        help="MatMulNBits compute type: 0 the activation's, 4 int8 (fastest on CPU); "
        "default 4 with --precision and --ep cpu, else 0",
    )
    q.add_argument(
        "--quant-exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="module path glob kept in float (repeatable), e.g. lm_head or '*.mlp.down_proj'",
    )


def _feature_flags(b: argparse.ArgumentParser) -> None:
    f = b.add_argument_group("build features")
    f.add_argument(
        "--features",
        action="append",
        default=[],
        metavar="LIST",
        help="comma list (repeatable): static-cache, prune-prefill-prefix, fp8-kv-cache, text-only",
    )
    f.add_argument(
        "--max-seq-len", type=int, default=None, help="static-cache buffer length (default 4096)"
    )
    f.add_argument(
        "--release",
        action="store_true",
        help="strip debug and provenance metadata (keeps mobius.*)",
    )


def _quantization_kwargs(args: argparse.Namespace) -> dict:
    return {
        "precision": args.precision,
        "block_size": args.block_size,
        "symmetric": args.symmetric,
        "accuracy_level": args.accuracy_level,
        "quant_exclude": args.quant_exclude,
    }


def _add_generate_parser(sub) -> None:
    g = sub.add_parser(
        "generate",
        help="generate text from a converted causal LM (onnxruntime-genai, or onnxruntime)",
        description="Greedy decoding, streamed to stdout; stops at the end-of-sequence token.",
    )
    g.add_argument("--model", required=True, help="a directory written by `mobius build`")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--max-new-tokens", type=int, default=128, help="at most this many tokens")
    g.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="wrap the prompt in the tokenizer's chat template (default: when it has one)",
    )
    g.add_argument(
        "--runtime",
        choices=["auto", "genai", "onnxruntime"],
        default="auto",
        help="auto: onnxruntime-genai when installed and genai_config.json is there",
    )
    g.add_argument("-q", "--quiet", action="store_true", help="only the generated text")


def _build(args: argparse.Namespace) -> int:
    import mobius
    from mobius.features import apply_features, parse_features
    from mobius.output.package import check_output_dir, output_lock

    features = parse_features(
        args.features, max_seq_len=args.max_seq_len
    )  # refuse unknown names before any work
    output = Path(args.output)
    check_output_dir(output.absolute(), overwrite=args.overwrite)
    started = time.perf_counter()
    with output_lock(output.absolute()):  # a concurrent build into the same output fails at once
        check_output_dir(output.absolute(), overwrite=args.overwrite)  # now that no other build can
        package = mobius.build(
            args.model,
            dtype=args.dtype,
            ep=args.ep,
            task=args.task,
            weights=not args.no_weights,
            trust_remote_code=args.trust_remote_code,
            strict=args.strict,
            component=args.component,
            features=features,
            **_quantization_kwargs(args),
        )
        apply_features(package, features, max_seq_len=args.max_seq_len)
        if args.release:
            from mobius.features.release import release

            release(package)
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

    report = mobius.explain(
        args.model,
        task=args.task,
        trust_remote_code=args.trust_remote_code,
        component=args.component,
    )
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


def _generate(args: argparse.Namespace) -> int:
    from mobius.errors import ConfigError
    from mobius.runtime.generate import generate, pick_runtime

    if args.max_new_tokens < 1:
        raise ConfigError("--max-new-tokens must be at least 1")
    runtime = pick_runtime(Path(args.model), args.runtime)
    pieces = generate(
        args.model,
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        chat=args.chat,
        runtime=runtime,
    )
    if not args.quiet:
        print(f"mobius: generating with {runtime}", file=sys.stderr)
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


COMMANDS = {"build": _build, "build-gguf": _build, "explain": _explain, "generate": _generate}


@contextlib.contextmanager
def _libraries_quiet() -> Iterator[None]:
    """Only mobius speaks on stderr: the logs of transformers (its notes on config keys, even
    those it logs as errors and goes on) and torch, and Python warnings (deprecations) are off
    while a command runs, so that a refusal is one line. What matters in them reaches the user
    as mobius's own error."""
    import torch  # noqa: F401 - configures its loggers now, not at their first use inside
    from transformers.utils import logging as hf_logging

    # torch's fake tensors log the traceback of an op that fails on meta as an error, and raise it
    loggers = [hf_logging.get_logger("transformers"), logging.getLogger("torch")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0, 1 internal error, 2 input error, 130/143 signal)."""
    failures.reset()
    failures.install_signal_handlers()  # first: a signal from here on is a clean stop
    args = None
    try:
        args = _parser().parse_args(argv)
        quiet = args.quiet or args.command == "explain"  # explain's output is the report itself
        # our own progress at INFO; other libraries (onnx_ir passes, ...) only when they warn
        logging.basicConfig(
            level=logging.ERROR if args.quiet else logging.WARNING, format="mobius: %(message)s"
        )
        logging.getLogger("mobius").setLevel(
            logging.ERROR if args.quiet else logging.WARNING if quiet else logging.INFO
        )
        with _libraries_quiet():
            return COMMANDS[args.command](args)
    except KeyboardInterrupt as exc:
        failures.settle()
        return _interrupted(exc, args)
    except SystemExit as exc:
        if args is None:
            raise  # argparse: --help, or a usage error (exit 2, its own message)
        failures.settle()
        if failures.stop_requested():
            return _interrupted(None, args)
        print(
            f"mobius: error: {failures.where(exc)} called exit({exc.code!r}) while "
            f"{failures.phase_of(exc)}; nothing was written",
            file=sys.stderr,
        )
        return 2
    except MemoryError as exc:
        failures.settle()
        if failures.stop_requested():
            return _interrupted(None, args)
        print(
            f"mobius: error: out of memory while {failures.phase_of(exc)}; nothing was "
            "written; free memory or convert on a larger machine",
            file=sys.stderr,
        )
        return 2
    except Exception as exc:
        failures.settle()
        if failures.stop_requested():  # an interrupt that some library turned into an error
            return _interrupted(None, args)
        error = exc if isinstance(exc, MobiusError) else failures.internal_error(exc)
        if isinstance(error, InternalError):
            if getattr(args, "debug", False):
                sys.stderr.write(failures.format_traceback(error))
            print(
                f"mobius: error: {error}; rerun with --debug for the traceback and report it",
                file=sys.stderr,
            )
        else:
            print(f"mobius: error: {error}", file=sys.stderr)
        return error.exit_code


def run() -> NoReturn:
    """The ``mobius`` program: :func:`main`, then exit with its status.

    Once ``main`` has returned the outcome is decided (the package is in place, or the error is
    reported), so a signal during the interpreter's shutdown must not turn it into a death by
    signal: from there on SIGINT and SIGTERM are ignored.
    """
    code = main()
    failures.ignore_stop_signals()
    # A KeyboardInterrupt that escaped code run through exec() of a string (torch runs generated
    # code so) sets CPython's "unhandled KeyboardInterrupt" flag even though main() caught it;
    # `python -m` then ends by re-sending itself SIGINT (status -2) instead of exiting with 130.
    # Every exec() of a string clears that flag first.
    exec("pass")  # noqa: S102
    raise SystemExit(code)


def _interrupted(exc: KeyboardInterrupt | None, args: argparse.Namespace | None) -> int:
    # the output directory is only ever renamed into place complete (see ModelPackage.save)
    code = getattr(exc, "exit_code", None) or (
        128 + signal.SIGTERM if failures.stop_signal() == signal.SIGTERM else 128 + signal.SIGINT
    )
    what = "terminated" if code == 128 + signal.SIGTERM else "interrupted"
    # explain and generate write no model
    writes = getattr(args, "command", "build") in ("build", "build-gguf")
    print(
        f"mobius: error: {what}" + ("; the output was not written" if writes else ""),
        file=sys.stderr,
    )
    return code
