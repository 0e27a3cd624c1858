import sys

try:
    from mobius import failures

    failures.install_signal_handlers()  # before the heavier imports: a signal now stops cleanly
    from mobius.cli import run
except KeyboardInterrupt as exc:  # SIGINT or SIGTERM while starting
    status = getattr(exc, "exit_code", 130)  # 143 for SIGTERM (failures.Terminated)
    what = "terminated" if status == 143 else "interrupted"
    print(f"mobius: error: {what}; the output was not written", file=sys.stderr)
    raise SystemExit(status) from None

run()
