"""Where one mobius conversion spends its time: import, trace, emit, write (wall and CPU seconds).

Runs the steps of ``mobius.convert.build`` one by one in this process and prints one JSON
object: per phase the wall and CPU (user + system, all threads) seconds, plus the peak RSS.

- ``import``: torch, transformers, onnx_ir, onnxscript and mobius itself;
- ``trace``: reading the config and headers, building the model on meta, ``torch.export``, the
  fallback decisions (``mobius.synth.prepare.prepare``);
- ``emit``: pattern matching and the explain report, lowering to ONNX, binding the weights;
- ``write``: ``ModelPackage.save``: every weight read, cast, checked and written.

    python benchmarks/convert_phases.py CKPT OUT [--dtype f16] [--no-weights]
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

_T0, _C0 = time.perf_counter(), time.process_time()


class Phases:
    def __init__(self) -> None:
        self.last = (_T0, _C0)
        self.phases: dict[str, dict[str, float]] = {}

    def mark(self, name: str) -> None:
        now = (time.perf_counter(), time.process_time())
        self.phases[name] = {
            "wall_s": round(now[0] - self.last[0], 2),
            "cpu_s": round(now[1] - self.last[1], 2),
        }
        self.last = now


def run(checkpoint: Path, output: Path, dtype: str, timeout: float) -> dict:
    """One in-process mobius conversion timed phase by phase (``convert_phases.py``)."""
    shutil.rmtree(output, ignore_errors=True)
    subprocess.run(["sync"], check=False)
    cmd = [sys.executable, str(Path(__file__).resolve()), str(checkpoint), str(output)]
    env = dict(
        os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(Path(__file__).resolve().parents[1])
    )
    done = subprocess.run(
        [*cmd, "--dtype", dtype],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    shutil.rmtree(output, ignore_errors=True)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load_1min": os.getloadavg()[0]}


def main(argv: list[str]) -> int:
    phases = Phases()
    import onnx_ir  # noqa: F401
    import onnxscript  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from mobius.convert import parse_dtype
    from mobius.output.package import ModelPackage
    from mobius.output.weights import Checkpoint
    from mobius.report import ExplainReport
    from mobius.synth.analysis import analyze
    from mobius.synth.emit import emit
    from mobius.synth.prepare import prepare

    phases.mark("import")
    src, out = argv[0], argv[1]
    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "f32"
    weights = "--no-weights" not in argv
    prepared = prepare(
        src, dtype=parse_dtype(dtype), task=None, weights=weights, trust_remote_code=False
    )
    phases.mark("trace")
    ExplainReport.from_analysis(analyze(prepared), source=src)
    traced = prepared.traced
    binder = traced.binder(Checkpoint(prepared.source.tensors) if weights else None)
    captured = prepared.use_cache and not traced.cache_in_graph
    model = emit(traced, binder, name="model", use_cache=captured)
    phases.mark("emit")
    ModelPackage(model=model).save(out, overwrite=True)
    phases.mark("write")
    total = {
        "wall_s": round(time.perf_counter() - _T0, 2),
        "cpu_s": round(time.process_time() - _C0, 2),
    }
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"phases": phases.phases, "total": total, "peak_rss_bytes": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
