"""Run ``mobius build`` and send the process a real signal at a chosen point
(``test_cli_signals.py`` runs it).

    python _interrupt_at.py STEP SIGNAL [convert] -- BUILD ARGS...

STEP is where the signal is raised: ``tracing`` (inside torch's fake-tensor dispatch, while
torch.export runs the model), ``emitting`` (while an FX node is lowered to ONNX) or ``writing``
(while the external data file is written). With ``convert``, the fake-tensor dispatch turns the
KeyboardInterrupt into an unrelated TypeError, as torch did in the bug report.
"""

from __future__ import annotations

import os
import signal
import sys


def _signal_on_call(owner, name: str, call: int, signum: int, convert: bool = False) -> None:
    original = getattr(owner, name)
    calls = 0

    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        try:
            if calls == call:
                os.kill(os.getpid(), signum)  # the handler runs at the next bytecode
            return original(*args, **kwargs)
        except KeyboardInterrupt:
            if not convert:
                raise
            raise TypeError("'NoneType' object is not iterable") from None

    setattr(owner, name, wrapper)


def main() -> int:
    split = sys.argv.index("--")
    step, signame, *options = sys.argv[1:split]
    signum = getattr(signal, signame)
    if step == "tracing":
        from torch._subclasses.fake_tensor import FakeTensorMode

        _signal_on_call(FakeTensorMode, "dispatch", 200, signum, convert="convert" in options)
    elif step == "emitting":
        from mobius.synth import emit

        _signal_on_call(emit, "node_handler", 20, signum)
    elif step == "writing":
        from onnx_ir import external_data

        _signal_on_call(external_data, "_write_tensor_at", 3, signum)
    else:
        raise SystemExit(f"unknown step {step}")
    from mobius.cli import main as cli

    return cli(["build", *sys.argv[split + 1 :]])


if __name__ == "__main__":
    raise SystemExit(main())
