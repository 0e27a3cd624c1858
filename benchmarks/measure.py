"""Measure one conversion command in a subprocess: wall time, CPU time, peak RSS of its process
tree, the load average around it, and the tail of its output when it fails."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent


def tree_rss(proc: psutil.Process) -> int:
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure(cmd: list[str], timeout: float, interval: float = 0.05, cwd: Path = REPO) -> dict:
    """Run ``cmd`` in a subprocess; wall time, peak RSS (psutil samples of the tree, and the
    kernel's ``ru_maxrss`` of the child, whichever is larger), load average, error tail."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        proc = psutil.Process(child.pid)
        peak = 0
        timed_out = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, tree_rss(proc))
            if not timed_out and time.perf_counter() - started > timeout:
                for p in [*proc.children(recursive=True), proc]:
                    try:
                        p.kill()
                    except psutil.Error:
                        pass
                timed_out = True
            time.sleep(interval)
        wall = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read().decode(errors="replace")
    run = {
        "wall_s": round(wall, 2),
        "peak_rss_bytes": max(peak, usage.ru_maxrss * 1024),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
        "exit_code": code,
    }
    if code != 0 or timed_out:
        run["error"] = ("timed out\n" if timed_out else "") + text[-3000:]
    return run
