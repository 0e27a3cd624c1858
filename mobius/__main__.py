import sys

try:
    from mobius.cli import main
except KeyboardInterrupt:  # Ctrl-C before the CLI's own handlers are in place
    print("mobius: error: interrupted; the output was not written", file=sys.stderr)
    raise SystemExit(130) from None

code = main()
# A KeyboardInterrupt that escaped code run through exec() of a string (torch runs generated code
# so) sets CPython's "unhandled KeyboardInterrupt" flag even though main() caught it; `python -m`
# then ends by re-sending itself SIGINT (status -2) instead of exiting with 130. Every exec() of a
# string clears that flag first.
exec("pass")  # noqa: S102
raise SystemExit(code)
