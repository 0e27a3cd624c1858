"""``mobius cache list`` and ``mobius cache clear``: what the graph cache holds, and emptying it."""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from mobius.graph_cache import evict, store

__all__ = ["add_parser", "build_options", "run"]


def add_parser(sub: Any) -> None:
    """Add ``cache list|clear`` to the CLI's subcommands."""
    c = sub.add_parser(
        "cache",
        help="list or clear the graph cache ($MOBIUS_CACHE, default ~/.cache/mobius)",
        description="Builds keep their graphs here; a later build of the same shape writes only "
        "its weights. At most $MOBIUS_CACHE_MAX_BYTES (default 2G; 0: no cap): the least "
        "recently used entries go first.",
    )
    c.add_argument("action", choices=["list", "clear"])
    c.add_argument("--json", action="store_true", help="list: one JSON document")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing")


def add_no_cache_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither use nor fill the graph cache (also: MOBIUS_NO_CACHE=1)",
    )


def build_options(args: argparse.Namespace) -> dict[str, Any]:
    """Every option of ``mobius build`` that can shape the package (the cache key's options)."""
    return {
        "command": args.command,
        "dtype": args.dtype,
        "ep": args.ep,
        "task": args.task,
        "no_weights": args.no_weights,
        "trust_remote_code": args.trust_remote_code,
        "strict": args.strict,
        "precision": args.precision,
        "block_size": args.block_size,
        "symmetric": args.symmetric,
        "accuracy_level": args.accuracy_level,
        "quant_exclude": list(args.quant_exclude),
        "component": args.component,
        "features": list(args.features),
        "max_seq_len": args.max_seq_len,
        "release": args.release,
        "lora_inputs": args.lora_inputs,
    }


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def run(args: argparse.Namespace) -> int:
    """Run ``mobius cache ACTION``; exit status 0."""
    if args.action == "clear":
        count, freed = store.clear()
        if not args.quiet:
            print(f"removed {count} graph cache entries ({_size(freed)}) from {store.cache_root()}")
        return 0
    found = store.entries()
    sizes = {e.key: e.size() for e in found}
    total, cap = sum(sizes.values()), evict.max_bytes()
    if args.json:
        rows = [
            {
                "key": e.key,
                "path": str(e.path),
                "bytes": sizes[e.key],
                "created": e.manifest.get("created"),
                "last_used": e.last_used(),
                "src": e.manifest.get("src"),
                **e.manifest.get("summary", {}),
            }
            for e in found
        ]
        document = {
            "root": str(store.cache_root()),
            "total_bytes": total,
            "max_bytes": cap,
            "entries": rows,
        }
        print(json.dumps(document, indent=1))
        return 0
    if args.quiet:
        return 0
    limit = f"at most {_size(cap)}" if cap is not None else "no size cap"
    print(
        f"{store.cache_root()}: {len(found)} entries, {_size(total)} ({limit}, "
        f"${evict.ENVIRONMENT}); last used, oldest first"
    )
    for e in sorted(found, key=lambda e: e.last_used()):
        summary = e.manifest.get("summary", {})
        options = summary.get("options", {})
        used = datetime.datetime.fromtimestamp(e.last_used()).isoformat(sep=" ", timespec="seconds")
        shown = " ".join(
            f"{k}={v}"
            for k, v in options.items()
            if v not in (None, False, [], "build") and k != "block_size"
        )
        print(
            f"{e.key[:16]}  {used}  {_size(sizes[e.key]):>10}  {summary.get('model_type', '?')}  "
            f"{shown}  ({e.manifest.get('src')})"
        )
    return 0
