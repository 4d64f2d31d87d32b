"""The `animegamer` command line. Each subsystem registers its own subcommands."""
from __future__ import annotations

import argparse
import importlib
import sys

from animegamer.errors import UserFacingError

# (module, what it adds). Imported lazily so `animegamer world ...` never loads torch models.
_SUBSYSTEMS = (
    "animegamer.world.cli",
    "animegamer.training.cli",
    "animegamer.game.cli",
    "animegamer.evaluation.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="animegamer", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _SUBSYSTEMS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name):  # the subsystem does not exist (yet)
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError, UserFacingError) as e:
        # Bad input: one clear line, no traceback.
        print(f"animegamer {args.command}: error: {e}", file=sys.stderr)
        return 2
