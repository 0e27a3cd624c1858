"""Where one mobius CLI run spends its CPU: a sampling profile, split into phases.

Runs ``mobius.cli.main`` in this process with a CPU-time sampler (``ITIMER_PROF``: one sample per
5 ms of this process's CPU, taken on the main thread, so the writer threads' work is in the
process total but not in the samples) and prints CPU seconds per phase: imports (any stack
inside an import), the cut-model ``torch.export``, decompositions, the cache probe, the meta
model, emission, the write, ... then the functions with the most samples under ``--focus``, and
what the run imported: each top-level package with the import CPU it cost (the outermost library
import on each sampled stack; a warm build's list says which libraries a cache hit still needs).
Unlike ``cProfile`` it barely slows Python down, so the split holds on a loaded machine.

    python benchmarks/profile_build.py [--focus mobius/] [--save samples.json] -- build \
        --model CKPT --output OUT [--precision int4 ...]
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

INTERVAL_S = 0.005
# phase -> a frame that marks it (the first phase whose marker is on the stack wins)
PHASES = [
    ("import", "_find_and_load"),
    ("write", "mobius/output/package.py:save"),
    ("cache probe", "synth/trace.py:_try_probe"),
    ("torch.export", "synth/trace.py:_export"),
    ("decompositions", "decompose_unlowered"),
    ("replication", "synth/replicate.py:replicate"),
    ("meta model", "instantiate_on_meta"),
    ("key mapping", "checkpoint_key_mapper"),
    ("config", "hf_config_from_dict"),
    ("analysis", "synth/analysis.py:analyze"),
    ("report", "mobius/report/"),
    ("emit", "synth/emit.py:emit"),
    ("quantize (graph)", "mobius/quant/linears.py:quantize_linears"),
    ("genai config", "mobius/runtime/genai.py"),
]


OWN_PACKAGES = {"mobius", "patterns", "lowering"}


def _frames(frame: FrameType | None) -> tuple[str, ...]:
    names = []
    while frame is not None:
        code = frame.f_code
        name = f"{code.co_filename}:{code.co_name}"
        if code.co_name == "_find_and_load":  # the module being imported
            name += f":{frame.f_locals.get('name')}"
        names.append(name)
        frame = frame.f_back
    return tuple(reversed(names))


def profile(cli_args: list[str]) -> tuple[collections.Counter, float, int]:
    """(stack -> samples, process CPU seconds, exit status) of one in-process CLI run."""
    stacks: collections.Counter = collections.Counter()
    signal.signal(signal.SIGPROF, lambda _sig, frame: stacks.update([_frames(frame)]))
    start = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)
    try:
        from mobius.cli import main

        status = main(cli_args)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
    return stacks, time.process_time() - start, status


def phases(stacks: collections.Counter) -> dict[str, float]:
    """CPU seconds per phase (``PHASES``; the rest is ``other``)."""
    spent: collections.Counter = collections.Counter()
    for stack, count in stacks.items():
        joined = "\n".join(stack)
        name = next((p for p, marker in PHASES if marker in joined), "other")
        spent[name] += count * INTERVAL_S
    return {name: round(seconds, 2) for name, seconds in spent.most_common()}


def hottest(stacks: collections.Counter, focus: str, limit: int = 25) -> list[tuple[float, str]]:
    """The functions matching ``focus`` with the most samples anywhere on their stack."""
    inclusive: collections.Counter = collections.Counter()
    for stack, count in stacks.items():
        for name in set(stack):
            if focus in name:
                inclusive[name] += count
    return [(round(n * INTERVAL_S, 2), name) for name, n in inclusive.most_common(limit)]


def imports(stacks: collections.Counter) -> dict[str, float]:
    """Import CPU seconds per top-level package: each sample in an import goes to the outermost
    package on its stack that is not mobius's own (mobius's own where there is none)."""
    spent: collections.Counter = collections.Counter()
    for stack, count in stacks.items():
        loading = [f.rsplit(":", 1)[1].split(".")[0] for f in stack if ":_find_and_load:" in f]
        if loading:
            library = next((m for m in loading if m not in OWN_PACKAGES), loading[0])
            spent[library] += count * INTERVAL_S
    return {name: round(seconds, 2) for name, seconds in spent.most_common()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--focus", default="mobius/", help="list functions whose path has this")
    parser.add_argument("--save", type=Path, help="write every sampled stack here (JSON)")
    parser.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the mobius CLI arguments")
    args = parser.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    before = {name.split(".")[0] for name in sys.modules}
    stacks, cpu, status = profile(cli)
    imported = sorted(
        name
        for name in {name.split(".")[0] for name in sys.modules} - before
        if name not in sys.stdlib_module_names and not name.startswith("_")
    )
    sampled = sum(stacks.values()) * INTERVAL_S
    print(f"exit {status}; process CPU {cpu:.2f} s, main thread sampled {sampled:.2f} s")
    for name, seconds in phases(stacks).items():
        print(f"  {seconds:6.2f}  {name}")
    print(f"functions under {args.focus!r} (inclusive CPU s):")
    for seconds, name in hottest(stacks, args.focus):
        print(f"  {seconds:6.2f}  {name}")
    print("import CPU s by top-level package:")
    for name, seconds in imports(stacks).items():
        print(f"  {seconds:6.2f}  {name}")
    print(f"libraries imported (not the standard library): {', '.join(imported)}")
    if args.save:
        args.save.write_text(json.dumps([[list(s), n] for s, n in stacks.items()]))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
