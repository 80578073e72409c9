"""The `qtg` admin command: `qtg <subcommand> …`.

Each subcommand lives in its own module `qtg/cli/<name>.py` exposing
`register(subparsers)`, which adds its parser and sets `run=<function>` (the
function takes the parsed arguments and returns the exit code). To add one,
write the module and add its name to COMMANDS.

Exit codes: 0 success, 1 "no, but asked politely" (e.g. `migrate --check`
with pending migrations), 2 an error: a bad setting, a migration problem, a
database that cannot be reached. Errors are one line on stderr, never a
traceback, and never a password.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from qtg.cli.common import EXPECTED_ERRORS, error_line

#: Subcommand modules under qtg.cli, in the order `qtg --help` lists them.
COMMANDS: tuple[str, ...] = (
    "migrate",
    "audit",
    "token",
    "watch",
    "prune",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qtg", description="qtg admin command (the runtime itself is bin/qtg-runtime)"
    )
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMANDS:
        importlib.import_module(f"qtg.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except EXPECTED_ERRORS as exc:
        print(f"qtg {args.command}: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"qtg {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
