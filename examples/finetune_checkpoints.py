"""Export every checkpoint of one fine-tuning run: trace the graph once, then only write weights.

A training loop saves ``checkpoint-<step>/`` directories with the same config and tensor shapes.
The graph is built once, without weights (``mobius.build(..., weights=False)``: the trace, with
the options every checkpoint is exported with); ``ModelPackage.apply_weights`` then binds each
checkpoint to it. The first one applied emits the graphs from the kept trace (no trace again);
each later one only reads, casts or quantizes and writes its weights. Every package is byte for
byte what ``mobius.build(checkpoint, ...)`` writes.

    python examples/finetune_checkpoints.py RUN_DIR OUTPUT_DIR [--precision int4]
    python examples/finetune_checkpoints.py --demo /tmp/finetune-demo   # makes a tiny run first
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mobius


def export_run(run: Path, output: Path, *, precision: str | None = None) -> list[Path]:
    """Convert each ``run/checkpoint-*`` into ``output/<its name>``; returns the packages."""
    checkpoints = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[-1]))
    if not checkpoints:
        raise SystemExit(f"no checkpoint-* directories in {run}")
    started = time.perf_counter()
    graph = mobius.build(checkpoints[0], weights=False, precision=precision)
    print(f"graph traced in {time.perf_counter() - started:.1f} s")
    written = []
    for checkpoint in checkpoints:
        started = time.perf_counter()
        package = graph.apply_weights(checkpoint)
        written.append(package.save(output / checkpoint.name, overwrite=True))
        print(
            f"{checkpoint.name}: weights applied and saved in {time.perf_counter() - started:.1f} s"
        )
    return written


def make_demo_run(run: Path, steps: int = 3) -> None:
    """A tiny random Llama saved at ``steps`` "training steps" (different random weights)."""
    from mobius.testing.tiny import make_checkpoint

    for step in range(steps):
        make_checkpoint("llama", run / f"checkpoint-{(step + 1) * 100}", seed=step)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, nargs="?", help="directory holding checkpoint-* folders")
    parser.add_argument("output", type=Path, nargs="?")
    parser.add_argument("--precision", choices=["int4", "int8"], default=None)
    parser.add_argument(
        "--demo", type=Path, metavar="DIR", help="make a tiny run in DIR and export it"
    )
    args = parser.parse_args(argv)
    if args.demo is not None:
        make_demo_run(args.demo / "run")
        export_run(args.demo / "run", args.demo / "onnx", precision=args.precision)
    elif args.run is None or args.output is None:
        parser.error("give RUN_DIR and OUTPUT_DIR, or --demo DIR")
    else:
        export_run(args.run, args.output, precision=args.precision)


if __name__ == "__main__":
    main()
