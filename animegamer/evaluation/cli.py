"""`animegamer eval` (the paper's table on held-out sessions) and `animegamer bench` (per-stage
latency and memory of a turn); `eval-decoder`, `eval-drawn` and `eval-cast` register from their modules."""
from __future__ import annotations

import argparse
import json
import shlex
import sys

import torch

from animegamer.core.atomic_io import write_json
from animegamer.core.devices import add_device_arguments
from animegamer.engine import evaluate as engine_evaluate
from animegamer.evaluation import cast_prompts, decoder_eval, drawn_shots
from animegamer.evaluation.bench import decoder as bench_decoder
from animegamer.evaluation.bench import engine as bench_engine
from animegamer.evaluation.bench import long_session as bench_long
from animegamer.evaluation.bench.game import bench_game, format_table
from animegamer.evaluation.report import format_summary
from animegamer.evaluation.run import DEFAULT_SEED, EvalConfig, held_out_world, parse_ablation, run_eval


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    decoder_eval.add_parser(subparsers)
    drawn_shots.add_parser(subparsers)
    cast_prompts.add_parser(subparsers)
    ev = subparsers.add_parser(
        "eval", help="play held-out world sessions through the game and grade them (the paper's table)",
        description="Play held-out world sessions through GameSession (as a player would) with the model, its "
                    "ablations and baselines (each another model dir), grade every turn against the ground truth, "
                    "and write OUT/eval.json, eval.md, eval.png and contact_sheet.png.")
    ev.add_argument("--sessions", type=int, default=20, help="held-out sessions to play (default: %(default)s)")
    ev.add_argument("--out", required=True, metavar="DIR", help="output directory (reruns reuse finished systems)")
    ev.add_argument("--model", default=None, metavar="PATH",
                    help="model directory with engine/ and shot_decoder/ (default: the shipped model)")
    src = ev.add_mutually_exclusive_group()
    src.add_argument("--data", default=None, metavar="WORLD_DIR", help="use this world's test split")
    src.add_argument("--seed", type=int, default=None,
                     help="render held-out sessions at this world seed into OUT/world (default: 9000)")
    ev.add_argument("--turns", type=int, default=5, help="turns per rendered session (default: %(default)s)")
    ev.add_argument("--height", type=int, default=96, help="rendered frame height (default: %(default)s)")
    ev.add_argument("--width", type=int, default=144, help="rendered frame width (default: %(default)s)")
    ev.add_argument("--frames", type=int, default=17, help="rendered frames per shot (default: %(default)s)")
    ev.add_argument("--evaluator", default=None, metavar="CLIP_DIR",
                    help="a `train clip` run trained apart from the model's tower (other seed); "
                         "default: animegamer/weights/evaluator if present, else no CLIP columns")
    ev.add_argument("--action-classifier", default=None, metavar="ACTION_DIR",
                    help="video action classifier for the action column (`animegamer train action` run); "
                         "default: the one beside the evaluator's tower, if any")
    ev.add_argument("--ablation", action="append", default=[], metavar="NAME=MODEL_PATH",
                    help="another system to play on the same sessions, e.g. 'no adaptation=DIR' or 'GC=DIR' "
                         "(repeatable)")
    ev.add_argument("--window-ablation", type=int, action="append", default=[], metavar="W",
                    help="replay the model with engine history window W, e.g. 1 or 0 (repeatable)")
    ev.add_argument("--contact-turns", type=int, default=8, help="turns on the contact sheet (default: %(default)s)")
    ev.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ev.add_argument("--fresh", action="store_true", help="replay every system even if OUT holds its graded turns")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_device_arguments(ev)
    ev.set_defaults(func=_eval)

    ee = subparsers.add_parser(
        "eval-engine", help="the engine's held-out report: motion level, state deltas, s_a, history windows",
        description=engine_evaluate.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    engine_evaluate.add_arguments(ee)
    ee.set_defaults(func=engine_evaluate.run)

    for name, module, doc in (("bench-engine", bench_engine, "the engine alone: seconds per turn, KV reuse, memory"),
                              ("bench-decoder", bench_decoder, "the shot decoder alone: decode time, training step, "
                                                               "steps x guidance sweep"),
                              ("bench-long", bench_long, "one long game: is the last turn as fast and small as the "
                                                         "first, and how fast does it reopen")):
        bp = subparsers.add_parser(name, help=doc, description=module.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(bp)
        bp.set_defaults(func=module.run)

    b = subparsers.add_parser(
        "bench", help="per-stage seconds per turn and peak memory of the game on this machine",
        description="Play a fixed instruction script through the game and report per-stage medians (engine, "
                    "diffusion sampling, autoencoder decode, saving), seconds per turn and peak RSS, for engine "
                    "window 1 vs k, with and without KV reuse.")
    b.add_argument("--model", default=None, metavar="PATH",
                   help="model directory with engine/ and shot_decoder/ (default: the shipped model)")
    b.add_argument("--turns", type=int, default=6, help="turns per row; medians over turns 1.. (default: %(default)s)")
    b.add_argument("--windows", default=None, help="engine history windows, comma separated (default: 1,<model's>)")
    b.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    b.add_argument("--no-kv-off", action="store_true", help="skip the rows without KV reuse")
    b.add_argument("--out", default=None, metavar="FILE.json", help="also write the result as JSON")
    b.add_argument("--json", action="store_true", help="print JSON instead of the table")
    add_device_arguments(b, quantize=True)
    b.set_defaults(func=_bench)


def _command() -> str:
    return "animegamer " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _eval(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)

    world = held_out_world(args.sessions, args.turns, DEFAULT_SEED if args.seed is None else args.seed,
                           args.height, args.width, args.frames)
    report = run_eval(EvalConfig(
        args.out, model=args.model, data=args.data, world=world, evaluator=args.evaluator,
        actions=args.action_classifier, ablations=[parse_ablation(a) for a in args.ablation],
        window_ablations=args.window_ablation, contact_turns=args.contact_turns, fresh=args.fresh,
        progress=not args.no_progress, command=_command(), device=args.device, precision=args.precision))
    print(format_summary(report))
    print("PSNR / SSIM / MS-SSIM (*) are a stand-in for DreamSim.")
    for w in report["warnings"]:
        print(f"warning: {w}")
    print(f"wrote {args.out}/eval.md, eval.json, eval.png, contact_sheet.png")
    return 0


def _bench(args: argparse.Namespace) -> int:
    try:
        windows = tuple(int(w) for w in args.windows.split(",")) if args.windows else None
    except ValueError:
        raise ValueError(f"--windows takes comma-separated integers, e.g. 1,5; got {args.windows!r}") from None
    result = bench_game(args.model, turns=args.turns, windows=windows, threads=args.threads,
                        kv=(True,) if args.no_kv_off else (True, False), device=args.device, precision=args.precision,
                        quantize=args.quantize)
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0
