"""Command line: ``mobius build --model SRC --output DIR``, ``mobius explain --model SRC``,
``mobius generate --model DIR --prompt TEXT``, ``mobius verify --model SRC --onnx DIR``,
``mobius list`` / ``mobius info MODEL_TYPE`` and ``mobius --version``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import NoReturn

from mobius import build_cli, failures
from mobius.build_cli import libraries_quiet
from mobius.errors import InternalError, MobiusError
from mobius.failures import Terminated
from mobius.graph_cache import cli as graph_cache_cli

__all__ = ["Terminated", "main"]


def _parser() -> argparse.ArgumentParser:
    from mobius import support, versions
    from mobius.verification import cli as verify_cli

    parser = argparse.ArgumentParser(
        prog="mobius", description="Convert HuggingFace checkpoints to ONNX."
    )
    parser.add_argument(
        "--version",
        action=versions.VersionAction,
        help="print mobius's and its libraries' versions",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build_cli.add_build_parser(sub)
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
    build_cli.component_flag(e)
    _add_generate_parser(sub)
    build_cli.add_build_gguf_parser(sub)
    _add_adapter_parser(sub)
    verify_cli.add_parser(sub)
    support.add_parsers(sub)
    graph_cache_cli.add_parser(sub)
    return parser


def _add_adapter_parser(sub) -> None:
    """``mobius adapter PEFT_DIR --model OUT_DIR [--name NAME]`` (mobius.lora.onnx_adapter)."""
    a = sub.add_parser(
        "adapter",
        help="write a PEFT LoRA adapter as NAME.onnx_adapter for a --lora-inputs model",
    )
    a.add_argument("adapter", metavar="PEFT_DIR", help="adapter_config.json + safetensors")
    a.add_argument("--model", required=True, help="a directory built with --lora-inputs")
    a.add_argument("--name", default=None, help="file name (default: the adapter directory's)")
    a.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    a.add_argument("--debug", action="store_true", help="print an internal error's traceback")


def _adapter(args: argparse.Namespace) -> int:
    from mobius.lora.onnx_adapter import write_onnx_adapter

    target = write_onnx_adapter(args.adapter, args.model, args.name)
    if not args.quiet:
        print(f"wrote {target}")
    return 0


def _add_generate_parser(sub) -> None:
    g = sub.add_parser(
        "generate",
        help="generate text from a converted causal LM (onnxruntime-genai, or onnxruntime)",
        description="Greedy decoding, streamed to stdout; stops at the end-of-sequence token.",
    )
    g.add_argument("--model", required=True, help="a directory written by `mobius build`")
    g.add_argument("--prompt", default=None, help="the prompt text (required without --audio)")
    g.add_argument(
        "--audio",
        metavar="FILE.wav",
        default=None,
        help="a PCM WAV clip for a speech LLM (layout audio-llm): transcribed, or answered with "
        "--prompt, through its three graphs and its own processor (onnxruntime)",
    )
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
    g.add_argument(
        "--adapter",
        metavar="FILE",
        default=None,
        help="an .onnx_adapter (`mobius adapter`) made active; onnxruntime-genai only",
    )
    g.add_argument("-q", "--quiet", action="store_true", help="only the generated text")


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
    from mobius.runtime.audio_generate import is_audio_llm
    from mobius.runtime.generate import generate, pick_runtime

    if args.max_new_tokens < 1:
        raise ConfigError("--max-new-tokens must be at least 1")
    if args.audio is not None or is_audio_llm(Path(args.model)):
        return _transcribe(args)
    if args.prompt is None:
        raise ConfigError("--prompt is required (or --audio for a speech LLM)")
    runtime = pick_runtime(Path(args.model), args.runtime)
    pieces = generate(
        args.model,
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        chat=args.chat,
        runtime=runtime,
        adapter=args.adapter,
    )
    if not args.quiet:
        print(f"mobius: generating with {runtime}", file=sys.stderr)
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def _transcribe(args: argparse.Namespace) -> int:
    """``generate --audio``: a speech LLM's answer to a clip, through its three graphs."""
    from mobius.errors import ConfigError
    from mobius.runtime.audio_generate import is_audio_llm, transcribe

    if not is_audio_llm(Path(args.model)):
        raise ConfigError(f"{args.model} is not a speech LLM (layout audio-llm); drop --audio")
    if args.audio is None:
        raise ConfigError(f"{args.model} is a speech LLM; give the clip with --audio FILE.wav")
    if not args.quiet:
        print("mobius: transcribing with onnxruntime", file=sys.stderr)
    for piece in transcribe(
        args.model, args.audio, args.prompt, max_new_tokens=args.max_new_tokens
    ):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from mobius.verification import cli as verify_cli

    return verify_cli.run(args)


def _support(args: argparse.Namespace) -> int:
    from mobius import support

    return support.run(args)


COMMANDS = {
    "build": build_cli.run,
    "build-gguf": build_cli.run,
    "explain": _explain,
    "generate": _generate,
    "adapter": _adapter,
    "verify": _verify,
    "list": _support,
    "info": _support,
    "cache": graph_cache_cli.run,
}
# commands that silence the libraries themselves, where they need them (a warm build does not)
_QUIET_INSIDE = ("build", "build-gguf", "cache")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0, 1 internal error, 2 input error, 130/143 signal)."""
    failures.reset()
    failures.install_signal_handlers()  # first: a signal from here on is a clean stop
    args = None
    try:
        args = _parser().parse_args(argv)
        # explain's, verify's, list's and info's output is the report itself
        quiet = args.quiet or args.command in ("explain", "verify", "list", "info")
        # our own progress at INFO; other libraries (onnx_ir passes, ...) only when they warn
        logging.basicConfig(
            level=logging.ERROR if args.quiet else logging.WARNING, format="mobius: %(message)s"
        )
        logging.getLogger("mobius").setLevel(
            logging.ERROR if args.quiet else logging.WARNING if quiet else logging.INFO
        )
        if args.command in _QUIET_INSIDE:
            return COMMANDS[args.command](args)
        with libraries_quiet():
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
