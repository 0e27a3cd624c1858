"""``mobius build`` and ``mobius build-gguf``: their flags, the graph cache's lookup, and the cold
build (trace, emit, bind weights, features, release) behind them."""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from mobius.graph_cache import cli as graph_cache_cli

__all__ = ["add_build_gguf_parser", "add_build_parser", "component_flag", "libraries_quiet", "run"]


def add_build_parser(sub) -> None:
    """``mobius build --model SRC --output DIR`` and its flags."""
    from mobius.verification import cli as verify_cli

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
    b.add_argument(
        "--adapter",
        metavar="DIR",
        default=None,
        help="a PEFT LoRA adapter directory folded into the weights (before --precision)",
    )
    b.add_argument(
        "--lora-inputs",
        metavar="MODULES",
        nargs="?",
        const="all-linear",
        default=None,
        help="LoRA factors as graph inputs for these linears (comma list of module names; "
        "default all-linear); `mobius adapter` writes the adapters",
    )
    _quantization_flags(b)
    _feature_flags(b)
    component_flag(b)
    b.add_argument(
        "--verify",
        action="store_true",
        help="after writing, compare the package with PyTorch (as mobius verify; exit 1 outside "
        "tolerance)",
    )
    verify_cli.add_input_flags(b.add_argument_group("--verify inputs"))
    graph_cache_cli.add_no_cache_flag(b)
    b.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    b.add_argument(
        "--debug", action="store_true", help="print the traceback of an internal error (exit 1)"
    )


def component_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--component",
        metavar="NAME",
        help="diffusers pipeline (model_index.json): only this component (unet, vae, ...)",
    )


def add_build_gguf_parser(sub) -> None:
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
    graph_cache_cli.add_no_cache_flag(g)
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
        adapter=None,
        lora_inputs=None,
        verify=False,
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


def run(args: argparse.Namespace) -> int:
    from mobius.features import parse_features
    from mobius.output.package import check_output_dir, output_lock

    features = parse_features(
        args.features, max_seq_len=args.max_seq_len
    )  # refuse unknown names before any work
    if args.verify and args.no_weights:
        from mobius.errors import ConfigError

        raise ConfigError("--verify compares the weights too; drop --no-weights or --verify")
    if args.precision and args.no_weights:  # (the Python API keeps it for apply_weights)
        from mobius.errors import ConfigError

        raise ConfigError(f"--precision {args.precision} quantizes weights; drop --no-weights")
    output = Path(args.output)
    check_output_dir(output.absolute(), overwrite=args.overwrite)
    started = time.perf_counter()
    with output_lock(output.absolute()):  # a concurrent build into the same output fails at once
        check_output_dir(output.absolute(), overwrite=args.overwrite)  # now that no other build can
        lookup = _cache_lookup(args)
        package = lookup.package if lookup is not None else None
        if package is None:
            from mobius.graph_cache.warm import keep, prepare

            with libraries_quiet():
                package = _cold_build(args, features)
                pending = prepare(lookup, package) if lookup is not None else None
                target = package.save(output, overwrite=args.overwrite, progress=not args.quiet)
            if pending is not None:
                keep(pending, target)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                target = package.save(output, overwrite=args.overwrite, progress=not args.quiet)
    if not args.quiet:
        written = ", ".join(str(target / name) for name in package.graphs())
        print(f"wrote {written} in {time.perf_counter() - started:.1f} s")
    if args.verify:
        from mobius.verification import cli as verify_cli

        del package  # its graphs and weights: verify loads the written package
        return verify_cli.run(args, target)
    return 0


def _cache_lookup(args: argparse.Namespace):
    """The graph cache's lookup for this build (``lookup.package`` set on a hit), or None when
    the cache is off (``--no-cache``, ``MOBIUS_NO_CACHE``) or does not apply (``--adapter``)."""
    from mobius.graph_cache.warm import disabled_by_environment, find

    if args.no_cache or disabled_by_environment() or args.adapter:
        return None  # a folded adapter is read while writing: its weights are not the recipes'
    options = graph_cache_cli.build_options(args)
    if args.command == "build-gguf" or str(args.model).endswith(".gguf"):
        with libraries_quiet():  # transformers reads a GGUF file's config
            return find(args.model, options, trust_remote_code=args.trust_remote_code)
    return find(args.model, options, trust_remote_code=args.trust_remote_code)


def _cold_build(args: argparse.Namespace, features):
    """The whole pipeline: trace, emit, bind weights, features, release."""
    import mobius
    from mobius.features import apply_features

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
        adapter=args.adapter,
        lora_inputs=args.lora_inputs,
        **_quantization_kwargs(args),
    )
    apply_features(package, features, max_seq_len=args.max_seq_len)
    if args.release:
        from mobius.features.release import release

        release(package)
    return package


@contextlib.contextmanager
def libraries_quiet() -> Iterator[None]:
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
