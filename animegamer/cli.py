"""The `animegamer` command line: the one place that imports lazily.

Each command belongs to one subsystem's `cli` module, which declares its options and imports what it
runs at its top. Only the module of the command asked for is imported, so `animegamer --help` and
`animegamer world ...` never load the models.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from animegamer.core.errors import UserFacingError

# command -> (the subsystem cli module that registers it, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "play": ("animegamer.game.cli", "play the game: a web page on localhost (or --terminal)"),
    "serve": ("animegamer.game.cli", "the game as an HTTP JSON API (docs at /docs)"),
    "characters": ("animegamer.game.characters_cli", "your own characters: add one from a description, list, remove"),
    "sessions": ("animegamer.game.sessions_cli", "saved games: list, delete, export"),
    "model": ("animegamer.game.model_cli", "model directories: pack training runs into a playable model"),
    "world": ("animegamer.world.cli", "the synthetic anime world: render datasets, preview, catalogue"),
    "ingest": ("animegamer.ingest.cli", "your own animation files -> a training set (cuts, clips, motion levels)"),
    "annotate": ("animegamer.ingest.annotate_cli", "a local vision-language model annotates ingested clips"),
    "mix": ("animegamer.ingest.cli", "several datasets as one weighted training set (your films and the world)"),
    "train": ("animegamer.training.cli", "train a part: decoder (a), engine (b), adapt (c), vae, clip, action, frames"),
    "convert": ("animegamer.training.convert", "the paper's pretrained parts (CogVideoX VAE, CLIP) from local checkpoints"),
    "recipe": ("animegamer.recipes.cli", "rebuild a whole model (data, every phase, pack, evaluation) from a recipe"),
    "eval": ("animegamer.evaluation.cli", "play held-out world sessions through the game and grade them"),
    "eval-decoder": ("animegamer.evaluation.cli", "decode the TRUE s_a of held-out shots and grade them"),
    "eval-drawn": ("animegamer.evaluation.cli", "the sprite animator from held-out TRUE first frames, s_a and level, paired"),
    "eval-cast": ("animegamer.evaluation.cli", "characters asked together in a place: all on screen, there? (paired)"),
    "eval-engine": ("animegamer.evaluation.cli", "the engine's held-out report (level, deltas, s_a, history)"),
    "bench": ("animegamer.evaluation.cli", "seconds per turn, per stage, and peak memory of the game"),
    "bench-engine": ("animegamer.evaluation.cli", "the engine alone: seconds per turn, KV reuse, memory"),
    "bench-decoder": ("animegamer.evaluation.cli", "the shot decoder alone: decode time, steps x guidance sweep"),
    "bench-ingest": ("animegamer.ingest.cli", "ingest graded on a world film of known cuts and levels, timed"),
    "bench-long": ("animegamer.evaluation.cli", "a 200-turn game: time per turn and memory stay flat, reopen time"),
}


def _asked(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="animegamer", description="AnimeGamer: infinite anime life simulation, open and trainable.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    asked = _asked(argv)
    if asked in COMMANDS:
        module = importlib.import_module(COMMANDS[asked][0])
        module.register(sub, argv)
    for name, (_, doc) in COMMANDS.items():
        if name not in sub.choices:  # listed in --help; its options load when it is asked for
            sub.add_parser(name, help=doc)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError, UserFacingError) as e:
        # Bad input: one clear line, no traceback.
        print(f"animegamer {args.command}: error: {e}", file=sys.stderr)
        return 2
