"""`animegamer world ...`: render datasets, list the catalogue, preview, fit motion levels, bench."""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import yaml

from animegamer.core.atomic_io import write_json, write_text
from animegamer.world.catalog import catalog
from animegamer.world.character_gen import character_entry, random_character
from animegamer.world.dataset import RenderConfig, WorldDataset, relabel_motion_levels, render_dataset
from animegamer.world.flow import MotionQuantizer
from animegamer.world.level_ceiling import additive_level_ceiling, level_ceiling
from animegamer.world.preview import cast_sheet, contact_sheet, session_video


def _positive(kind: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{kind} must be an integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{kind} must be >= 1, got {v}")
        return v
    return parse


def register(sub: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    world = sub.add_parser("world", help="the synthetic anime world: render datasets, preview, catalogue")
    wsub = world.add_subparsers(dest="world_command", metavar="WORLD_COMMAND")
    wsub.required = True

    p = wsub.add_parser("render", help="render a dataset of multi-turn game sessions")
    p.add_argument("--sessions", type=_positive("--sessions"), required=True)
    p.add_argument("--turns", type=_positive("--turns"), default=5, help="turns per session (max if --min-turns)")
    p.add_argument("--min-turns", type=_positive("--min-turns"), default=None)
    p.add_argument("--out", required=True, help="output directory (must not hold a finished dataset)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--height", type=int, default=96)
    p.add_argument("--width", type=int, default=144)
    p.add_argument("--frames", type=int, default=17, help="frames per shot, 4k+1")
    p.add_argument("--fps", type=int, default=8)
    p.add_argument("--workers", type=_positive("--workers"), default=2)
    p.add_argument("--cast", default=None, metavar="FILE",
                   help="who plays: a cast file, e.g. `world characters --random N`'s characters.yaml "
                        "(default: the world's 10)")
    p.add_argument("--groups", type=float, default=0.0, metavar="SHARE",
                   help="share of the turns of a verb of one that two do together, side by side (the "
                        "evaluator's data; default 0: one actor, as the model's data)")
    p.set_defaults(func=_render)

    p = wsub.add_parser("characters", help="draw new characters: their parameters (a cast file) and reference sheets")
    p.add_argument("--random", type=_positive("--random"), required=True, metavar="N", help="how many to draw")
    p.add_argument("--seed", type=int, default=0,
                   help="the first character's seed (each next one +1; seeds from 1000000 up are the held-out "
                        "characters kept for evaluation)")
    p.add_argument("--out", required=True, help="directory: characters.yaml (a cast file) and reference_sheets.png")
    p.set_defaults(func=_characters)

    p = wsub.add_parser("catalog", help="list cast, places, motions, interactions, adverbs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_catalog)

    p = wsub.add_parser("preview", help="contact sheet of a dataset (and a session video)")
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True, help="PNG path for the contact sheet")
    p.add_argument("--shots", type=_positive("--shots"), default=24)
    p.add_argument("--session", type=int, default=None, help="also write this session as GIF + MP4 beside --out")
    p.set_defaults(func=_preview)

    p = wsub.add_parser("demo", help="render a few sessions and write a contact sheet, GIF and MP4")
    p.add_argument("--out", default="demo", help="output directory")
    p.add_argument("--sessions", type=_positive("--sessions"), default=8)
    p.add_argument("--turns", type=_positive("--turns"), default=4)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_demo)

    p = wsub.add_parser("fit-levels", help="fit the 5 motion-level thresholds to a dataset's flow")
    p.add_argument("--data", required=True)
    p.add_argument("--save", action="store_true", help="store them as the packaged thresholds")
    p.add_argument("--relabel", action="store_true",
                   help="rewrite the dataset's motion_level labels with the packaged thresholds")
    p.set_defaults(func=_fit_levels)

    p = wsub.add_parser("level-ceiling", help="how well the motion level can be predicted from what the engine "
                                              "is told (a lookup table and an additive log-flow model fit on "
                                              "train, scored on val + test)")
    p.add_argument("--data", required=True, nargs="+", help="one or more world datasets (pooled)")
    p.add_argument("--train-subsets", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                   metavar="N,N,..", help="also fit the scene model on random subsets of N training turns")
    p.set_defaults(func=_level_ceiling)

    p = wsub.add_parser("bench", help="shots per second rendered and annotated (flow included)")
    p.add_argument("--sessions", type=_positive("--sessions"), default=200,
                   help="1000 shots by default: enough that process start-up does not dominate")
    p.add_argument("--turns", type=_positive("--turns"), default=5)
    p.add_argument("--workers", type=_positive("--workers"), default=2)
    p.add_argument("--json", dest="json_out", default=None, help="also write the result here")
    p.set_defaults(func=_bench)


def _render(args: argparse.Namespace) -> int:
    cfg = RenderConfig(sessions=args.sessions, turns=args.turns, seed=args.seed, height=args.height,
                       width=args.width, frames=args.frames, fps=args.fps, workers=args.workers,
                       min_turns=args.min_turns, cast=args.cast, groups=args.groups)
    meta = render_dataset(cfg, args.out)
    print(json.dumps({k: meta[k] for k in ("turns_total", "shots_per_second", "bytes_per_1000_shots",
                                           "level_counts")}, indent=2))
    return 0


def _catalog(args: argparse.Namespace) -> int:
    cat = catalog()
    if args.json:
        print(json.dumps(cat, indent=2))
        return 0
    for section, items in cat.items():
        print(f"{section} ({len(items)}):")
        for item in items:
            print("  " + (item if isinstance(item, str) else ", ".join(f"{k}={v}" for k, v in item.items())))
    return 0


def _preview(args: argparse.Namespace) -> int:
    path = contact_sheet(args.data, args.out, n_shots=args.shots)
    print(f"contact sheet: {path}")
    if args.session is not None:
        for p in session_video(args.data, args.session, Path(args.out).with_suffix("")):
            print(f"session video: {p}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    data = out / "data"
    if data.exists():
        shutil.rmtree(data)
    render_dataset(RenderConfig(sessions=args.sessions, turns=args.turns, seed=args.seed), data)
    print(f"cast sheet:    {cast_sheet(out / 'cast.png')}")
    print(f"contact sheet: {contact_sheet(data, out / 'contact_sheet.png')}")
    for p in session_video(data, 0, out / "session0"):
        print(f"session video: {p}")
    return 0


def _fit_levels(args: argparse.Namespace) -> int:
    world = WorldDataset(args.data)
    mags = np.array([r["flow_magnitude"] for r in world.rows])
    q = MotionQuantizer.fit(mags)
    print(json.dumps({"thresholds": q.thresholds, "shots": len(mags)}))
    if args.save:
        q.save(fitted_on=f"{len(mags)} shots of {args.data} (seed {world.meta['seed']})")
        print("saved as the packaged thresholds")
    if args.relabel:
        counts = relabel_motion_levels(args.data, MotionQuantizer.load())
        print(f"relabelled {args.data}: level counts {counts}")
    return 0


def _level_ceiling(args: argparse.Namespace) -> int:
    train, held = [], []
    for d in args.data:  # several worlds pool: the effects of characters and places are the same in each
        world = WorldDataset(d)
        train += world.split_rows("train")
        held += world.split_rows("val") + world.split_rows("test")
    report = {"lookup_table": level_ceiling(train, held), **additive_level_ceiling(train, held)}
    if args.train_subsets:  # how much data the scene model needs: random training subsets (seed 0)
        order = np.random.default_rng(0).permutation(len(train))
        report["additive_with_characters_and_place_by_training_turns"] = {
            n: additive_level_ceiling([train[i] for i in order[:n]], held)["additive_with_characters_and_place"]
            for n in args.train_subsets if n <= len(train)}
    print(json.dumps(report, indent=1))
    return 0


def _bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = render_dataset(RenderConfig(sessions=args.sessions, turns=args.turns, seed=12345,
                                           workers=args.workers), tmp)
    result = {"shots": meta["turns_total"], "seconds": meta["render_seconds"],
              "shots_per_second": meta["shots_per_second"], "workers": args.workers,
              "bytes_per_1000_shots": meta["bytes_per_1000_shots"], "target_shots_per_second": 20}
    print(json.dumps(result, indent=2))
    if args.json_out:
        write_json(args.json_out, result)
    return 0


def _characters(args: argparse.Namespace) -> int:
    specs = [random_character(args.seed + i, f"New{args.seed + i}") for i in range(args.random)]
    out = Path(args.out)
    cast = {"version": 1, "characters": {s.name: character_entry(s) for s in specs}}
    write_text(out / "characters.yaml", "# drawn by `animegamer world characters`; load_cast(path) reads it\n"
               + yaml.safe_dump(cast, sort_keys=False, allow_unicode=True))
    sheet = cast_sheet(out / "reference_sheets.png", specs=specs)
    for s in specs:
        print(f"{s.name}: {s.description}")
    print(f"wrote {out / 'characters.yaml'} and {sheet}")
    return 0
