"""`animegamer train <phase> ...`: one subcommand per training module.

A training module provides `add_arguments(parser)` and `run(args) -> int`. Only the module of the
phase asked for is imported, so `animegamer train --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

# command name -> (module, one line of help). The paper's three phases, then the parts we train
# ourselves because no pretrained weights exist offline (autoencoder, vision tower) and the
# evaluator's action classifier.
PHASES: dict[str, tuple[str, str]] = {
    "decoder": ("animegamer.training.phase_a", "phase a: the action encoder E_a and the shot decoder"),
    "engine": ("animegamer.training.phase_b", "phase b: the game engine (LLM + LoRA)"),
    "adapt": ("animegamer.training.phase_c", "phase c: adapt the decoder to the engine's predictions"),
    "sprites": ("animegamer.training.phase_sprites",
                "the sprite animator: a character doing the verb, drawn on a canvas that follows its feet"),
    "vae": ("animegamer.training.fit_autoencoder", "the shot autoencoder (the decoder's latent space)"),
    "clip": ("animegamer.training.fit_vision_tower", "a CLIP-style vision tower (the evaluator's)"),
    "action": ("animegamer.training.fit_action_classifier", "the evaluator's video action classifier"),
    "frames": ("animegamer.training.fit_frame_classifier", "the evaluator's frame classifier (who, where, when)"),
    "reid": ("animegamer.training.fit_character_reid", "character re-identification (reference matching)"),
}


def phase_module(name: str) -> ModuleType:
    """The training module behind `animegamer train NAME`."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; choose one of {', '.join(PHASES)}")
    return importlib.import_module(PHASES[name][0])


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    train = subparsers.add_parser("train", help="train a phase: " + ", ".join(PHASES))
    tsub = train.add_subparsers(dest="phase", metavar="PHASE")
    tsub.required = True
    argv = sys.argv[1:] if argv is None else argv
    asked = argv[argv.index("train") + 1] if "train" in argv[:-1] else None
    for name, (_, doc) in PHASES.items():
        module = phase_module(name) if name == asked else None
        p = tsub.add_parser(name, help=doc, description=module.__doc__ if module else doc,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        if module is not None:
            module.add_arguments(p)
            p.set_defaults(func=module.run)
