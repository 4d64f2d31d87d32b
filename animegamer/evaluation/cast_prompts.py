"""`animegamer eval-cast`: characters asked together in a place: are they all on screen, there?

    animegamer eval-cast [--model M] [--n 24] [--size 2] [--seed 0] [--out runs/eval_cast.json] [--sheet S.png]

A player names any characters in any place. The stored shots (the visual anchors) show only some
(characters, place, time): two characters filmed together in a few places, never three. This plays
``--n`` prompts, each a new game's first turn: ``--size`` characters of the cast drawn at random, a
random place and time of day, a random verb (a held-out paraphrase for one or two characters, the
structured form for more). Each is played twice with the same seed: by the model as given (with its
stage, ``decoder/stage.py``, where no stored shot shows them there the first frame is composed) and
by the same model without its stage (only stored shots). The evaluator's frame classifier reads each
shot: the ``size`` characters it finds most likely, the place and the time. Reported per system, with
the paired difference and its standard error: all characters on screen, the place, the time, all
three, and where each first frame came from. Beside them, the ``truth``: the world's own shot of each
prompt's action (``world/shot.render_action``, the stand-in for a film; one or two characters), read by
the same classifier: how often the evaluator finds them in a shot that shows them for certain.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from animegamer.core.checkpoint import save_json_atomic
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.game.session import DEFAULT_WEIGHTS, Game
from animegamer.models.frame_classifier import FrameClassifier
from animegamer.world.cast import load_cast
from animegamer.world.instructions import Action, known_places, known_times, paraphrase, structured
from animegamer.world.motions import verbs
from animegamer.world.preview import save_png, shot_strip, stack_strips
from animegamer.world.shot import render_action

COLUMNS = ("characters", "place", "time", "all")
TRUTH = "truth (the world's shot)"
WORLD_CAST_MAX = 2  # the world's actions have one or two characters: more have no true shot


def prompts(cast: list[str], n: int, size: int, seed: int) -> list[tuple[Action, str]]:
    """``n`` (action, instruction) pairs: ``size`` distinct characters of ``cast``, a place, a time, a verb."""
    rng = np.random.default_rng(seed)
    places, times, specs = known_places(), known_times(), load_cast()
    out = []
    for _ in range(n):
        who = tuple(str(c) for c in rng.choice(cast, size, replace=False))
        pool = verbs(pair=False) + (verbs(pair=True) if size == 2 else [])
        action = Action(who, str(rng.choice(pool)), "", str(rng.choice(places)), str(rng.choice(times)))
        if size <= 2:
            text = paraphrase(action, rng, split="heldout", pronoun=[specs[c].pronoun for c in who])[0]
        else:  # the world's actions have one or two characters: the release's format lists any number
            text = structured(Action(who[:1], action.verb, "", action.place, action.time)).replace(
                f"Character: {who[0]};", f"Character: {', '.join(who)};")
        out.append((action, text))
    return out


def grade(classifier: FrameClassifier, frames: np.ndarray, action: Action) -> dict[str, float]:
    seen = classifier.read_shot(frames, len(action.characters))
    row = {"characters": float(seen["characters"] == sorted(action.characters)),
           "place": float(seen["place"] == action.place), "time": float(seen["time"] == action.time)}
    row["all"] = float(all(row.values()))
    return row


def _mean_se(values: list[float]) -> dict[str, float]:
    v = np.asarray(values, np.float64)
    return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0}


def evaluate(game: Game, classifier: FrameClassifier, items: list[tuple[Action, str]], seed: int,
             keep: int = 0, progress: bool = True) -> dict[str, Any]:
    """Each prompt played as a first turn with and without the model's stage (paired, same seed), and the world's
    own shot of its action (``TRUTH``, up to ``WORLD_CAST_MAX`` characters)."""
    stage = game.decoder.stage
    systems = {"with stage": stage, "without stage": None}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    truth: list[dict[str, Any]] = []
    strips = []
    try:
        for i, (action, text) in enumerate(tqdm(items, desc="eval-cast", unit="prompt", disable=not progress)):
            shots = []
            for name, st in systems.items():
                game.decoder.stage = st
                turn = game.new_session(list(action.characters), seed=seed + i).step(text)
                rows[name].append({"prompt": text, "characters": list(action.characters), "place": action.place,
                                   "time": action.time, "first_frame": turn.anchor,
                                   **grade(classifier, turn.frames, action)})
                shots.append(turn.frames)
            if len(action.characters) <= WORLD_CAST_MAX:
                h, w = shots[0].shape[1:3]
                frames = render_action(action, seed=seed + i, height=h, width=w, n_frames=len(shots[0]))
                truth.append({"prompt": text, **grade(classifier, frames, action)})
                shots.append(frames)
            if i < keep:
                strips.append(shot_strip(np.concatenate(shots, axis=2)))
    finally:
        game.decoder.stage = stage
    systems_out = {name: {c: _mean_se([r[c] for r in rs]) for c in COLUMNS} for name, rs in rows.items()}
    for name, rs in rows.items():
        sources = [r["first_frame"] for r in rs]
        systems_out[name]["first_frame"] = {s: sources.count(s) / len(sources) for s in sorted(set(sources))}
    a, b = rows["with stage"], rows["without stage"]
    paired = {c: _mean_se([x[c] - y[c] for x, y in zip(a, b)]) for c in COLUMNS}
    if truth:
        systems_out[TRUTH] = {c: _mean_se([r[c] for r in truth]) for c in COLUMNS}
        rows[TRUTH] = truth
    return {"prompts": len(items), "systems": systems_out, "paired (with - without)": paired, "turns": rows,
            "_strips": strips}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval-cast", help="characters asked together in a place: all on screen, there? "
                                                "(with and without the stage, paired)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(DEFAULT_WEIGHTS), help="a model directory (default: the shipped)")
    p.add_argument("--n", type=int, default=24, help="prompts (default: %(default)s)")
    p.add_argument("--size", type=int, default=2, help="characters per prompt (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON report")
    p.add_argument("--sheet", default=None, help="contact sheet (PNG): each prompt's shot with the stage, then without, then "
                                                  "the world's (for one or two characters)")
    p.add_argument("--keep", type=int, default=8, help="prompts on the sheet (default: %(default)s)")
    p.add_argument("--store", default=None, help="where the played games are saved (default: a temporary folder)")
    p.add_argument("--evaluator", default=str(DEFAULT_EVALUATOR), metavar="DIR",
                   help="the frame classifier that reads the shots: an evaluator directory, a `train frames` run "
                        "or its frame_classifier/ (default: the shipped evaluator's)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.n < 2 or not 1 <= args.size <= 4:
        raise SystemExit("eval-cast: --n must be >= 2 and --size 1 to 4")
    frames_dir = FrameClassifier.find(args.evaluator)
    if frames_dir is None:
        raise SystemExit(f"eval-cast: no frame classifier in {args.evaluator}")
    with tempfile.TemporaryDirectory() as scratch:
        game = Game.load(args.model, store=args.store or Path(scratch) / "saves")
        if game.decoder.stage is None:
            raise SystemExit(f"eval-cast: {args.model} has no stage (animegamer model stage MODEL adds one)")
        cast = [c for c in game.cast if c in load_cast() and c in game.decoder.stage.sprites]
        items = prompts(cast, args.n, args.size, args.seed)
        classifier = FrameClassifier.from_pretrained(frames_dir)
        result = evaluate(game, classifier, items, args.seed, keep=args.keep if args.sheet else 0,
                          progress=not args.no_progress)
    strips = result.pop("_strips")
    if args.sheet:
        save_png(stack_strips(strips), args.sheet)
        print(f"[eval-cast] sheet: {args.sheet} (each row: with the stage, then without, then the world's shot)")
    result.update({"model": str(args.model), "size": args.size, "seed": args.seed,
                   "frame_classifier": {"dir": str(frames_dir), "weights_blake2b": FrameClassifier.weights_hash(frames_dir)}})
    for name, cols in result["systems"].items():
        sources = cols.get("first_frame", {})
        print(f"{name:14s} " + "  ".join(f"{c} {cols[c]['mean']:.3f}±{cols[c]['se']:.3f}" for c in COLUMNS)
              + ("  first frame: " + ", ".join(f"{k} {v:.2f}" for k, v in sources.items()) if sources else ""))
    print("paired (with - without): " + "  ".join(f"{c} {v['mean']:+.3f}±{v['se']:.3f}"
                                                  for c, v in result["paired (with - without)"].items()))
    if args.out:
        save_json_atomic(result, args.out)
    return 0
