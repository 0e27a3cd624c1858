import sys

try:
    from mobius import failures

    failures.install_signal_handlers()  # before the heavier imports: a signal now stops cleanly
    from mobius.cli import main
except KeyboardInterrupt as exc:  # SIGINT or SIGTERM while starting
    status = getattr(exc, "exit_code", 130)  # 143 for SIGTERM (failures.Terminated)
    what = "terminated" if status == 143 else "interrupted"
    print(f"mobius: error: {what}; the output was not written", file=sys.stderr)
    raise SystemExit(status) from None

code = main()
# A KeyboardInterrupt that escaped code run through exec() of a string (torch runs generated code
# so) sets CPython's "unhandled KeyboardInterrupt" flag even though main() caught it; `python -m`
# then ends by re-sending itself SIGINT (status -2) instead of exiting with 130. Every exec() of a
# string clears that flag first.
exec("pass")  # noqa: S102
raise SystemExit(code)
