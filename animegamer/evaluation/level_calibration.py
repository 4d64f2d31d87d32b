"""Per-level calibration of a level-matched decoder's noise prior at SAMPLING time, on held-out shots.

    animegamer calibrate-levels sweep --decoder DIR --data WORLD --template-cache DECODER_RUN/cache/val_64 \
        --cache DIR [--split test] [--n 200] [--guidance 2] --grid "1:0.998,0.9995;5:0.4,0.2" --out FILE.json
    animegamer calibrate-levels cache --data WORLD --template-cache DECODER_RUN/cache/val_64 --cache DIR \
        [--split val] [--n 300]

A level-matched decoder (``--shared-noise-by-level``, docs/history.md#a-level-matched-noise-prior-2026-11-24-shipped-that-evening) draws a shot for
level k from noise that shares r_k of its variance across frames. Sampled from its training
fractions, the shipped one's pixels move one level too much at levels 1-2 and one level too little
at levels 4-5. Each r_k acts only on the shots drawn for level k, so each level's sampling fraction
can be chosen on its own: decode the TRUE s_a of held-out shots of level k at each candidate r_k
and count how often the world's DIS-flow quantiser reads level k from the pixels (the same reading
as eval-decoder's ACC-F). The shots calibrated on must not be the ones a result is reported on:
calibrate on the test split, report on val (``eval-decoder`` uses the val split).

``sweep`` builds the split's feature cache when it is missing (the same encoders and settings as
the template, a cache of the decoder run), then writes per shot and candidate the measured flow
and level, per level each candidate's accuracy and mean flow, and the chosen fractions (best
accuracy; ties go to the fraction nearest the training one) as ``pack_argument``, the value for
``model pack --sample-shared-noise``. ``cache`` only builds such a cache (for ``eval-decoder --cache``).

``--engine RUN --sessions RUN/sessions/test``: calibrate on the engine's PREDICTED s_a instead, as
the game gives them to the decoder (closed loop over the split's engine sessions whose every shot
is in the cache, each decoded at its shot's true level). Fractions chosen on the true s_a need not
suit the game: predicted s_a are smoother, and under guidance their shots move differently.
``--motion-guidance`` calibrates under that sampler setting (``DiffusionConfig.motion_guidance``).

``--knob motion-scale``: the grid holds per-level scales of the sampled latents' frame-to-frame part
(``SamplerConfig.motion_scale_by_level``) instead, the noise prior kept as the decoder
has it; ``pack_argument`` is then the value for ``model pack --sample-motion-scale``. No noise prior
makes the network's level-1 shots calm (docs/history.md#motion-guidance-and-a-calibration-on-the-engines-predictions-2026-11-25-shipped); this damps their flicker.

    animegamer calibrate-levels anchored --model MODEL --data WORLD [--split train] [--sessions 24] \
        --grid "1:0.4,1;5:1,2" --out FILE.json

``anchored``: the same sweep (``--knob``, motion-scale by default) for a model with visual anchors (decoder/anchors.py), whose
shots are drawn from real frames rather than the engine's smooth prediction and move differently. It
plays the split's sessions closed loop through the game, keeps each turn's drawn s_a and the engine's
level, and decodes those at each candidate value with the model's own sampler otherwise.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.atomic_io import write_json
from animegamer.core.runs import resolve_decoder, resolve_engine
from animegamer.decoder.pipeline import ShotDecoder, frames_to_uint8
from animegamer.decoder.sampler import MAX_MOTION_SCALE, add_sampler_arguments
from animegamer.engine.data import load_sessions
from animegamer.engine.model import load_engine
from animegamer.evaluation.metrics import motion_level_from_pixels
from animegamer.evaluation.run import session_characters
from animegamer.game.session import Game, turn_seed
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.training.phase_c import check_same_world, predict_sessions, shot_rows
from animegamer.training.shot_cache import CachedShots, build_cache, cache_encoders
from animegamer.world.dataset import ShotDataset, WorldDataset
from animegamer.world.flow import MotionQuantizer

# what a sweep can choose per level -> the DiffusionConfig field it sets (ties lean to the training
# fraction for shared-noise, to 1 = no change for motion-scale)
KNOBS = {"shared-noise": "shared_noise_by_level", "motion-scale": "motion_scale_by_level"}  # SamplerConfig fields


def parse_grid(text: str, knob: str = "shared-noise") -> dict[int, list[float]]:
    """"1:0.998,0.9995;5:0.4,0.2" -> {1: [0.998, 0.9995], 5: [0.4, 0.2]}; SystemExit on bad input.
    Candidates are shared-noise fractions in [0, 1), or with ``knob`` "motion-scale" motion scales in
    [0, MAX_MOTION_SCALE]."""

    fractions = knob == "shared-noise"
    valid = (lambda r: 0.0 <= r < 1.0) if fractions else (lambda r: 0.0 <= r <= MAX_MOTION_SCALE)
    what = "fractions in [0, 1)" if fractions else f"motion scales in [0, {MAX_MOTION_SCALE:g}]"
    grid: dict[int, list[float]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        level, _, values = part.partition(":")
        try:
            k, rs = int(level), [float(v) for v in values.split(",")]
        except ValueError:
            raise SystemExit(f"calibrate-levels: --grid takes LEVEL:R,R;LEVEL:R,... got {part!r}") from None
        if not 1 <= k <= 5 or not all(valid(r) for r in rs) or k in grid:
            raise SystemExit(f"calibrate-levels: --grid levels are 1..5, each once, with {what}; got {part!r}")
        grid[k] = rs
    if not grid:
        raise SystemExit("calibrate-levels: --grid is empty")
    return grid


def ensure_cache(template: Path, data: Path, split: str, n: int, out: Path):
    """The feature cache of the first ``n`` shots of ``split``, built (or resumed) with the encoders
    and settings recorded in ``template`` (a finished cache of the decoder run)."""

    if not (template / "meta.json").is_file():
        raise SystemExit(f"calibrate-levels: {template} is not a decoder feature cache (no meta.json)")
    meta = json.loads((template / "meta.json").read_text())
    meta = {k: v for k, v in meta.items() if k != "parts"} | {"split": split, "limit": n}
    if Path(meta["data"]).resolve() != data.resolve():
        raise SystemExit(f"calibrate-levels: the template cache {template} is of {meta['data']}, not {data}")
    shots = ShotDataset(str(data), split, limit=n)

    def encoders() -> dict:
        ae = ShotAutoencoder.from_pretrained(meta["vae"]["path"]).float().eval().requires_grad_(False)
        return cache_encoders(meta, ae)

    build_cache(shots, encoders, out, meta)
    return CachedShots(out)


def calibrate(decoder, cache, grid: dict[int, list[float]], guidance: float | None = None, seed: int = 0,
              progress: bool = True, predicted: dict[int, Any] | None = None,
              knob: str = "shared-noise") -> dict[str, Any]:
    """Decode every cached shot whose level is in ``grid`` at each of that level's candidate sampling
    fractions (the others kept) and read its level from the pixels; see the module doc. ``predicted``
    (cache row -> the engine's s_a (N, D) for that shot) decodes those instead of the true s_a, and
    only the shots it covers. ``knob`` "motion-scale" sweeps the per-level motion scale
    (``SamplerConfig.motion_scale_by_level``) instead, with the decoder's noise prior kept."""

    trained, training_prior = decoder.sampler, decoder.diffusion.shared_noise_by_level
    field = KNOBS[knob]
    if not decoder.config.use_motion_level:
        raise SystemExit("calibrate-levels: this decoder takes no motion level")
    if knob == "shared-noise":
        base = list(training_prior or [])
        if len(base) != 5:
            raise SystemExit("calibrate-levels: not a level-matched decoder (train it with --shared-noise-by-level)")
    else:
        base = [1.0] * 5  # no scaling: a tie keeps the network's own motion
    start = list(getattr(trained, field) or base)  # what the levels not in the grid keep
    quant = MotionQuantizer.load()
    # each shot's level; 0 for a shot not decoded here (no prediction for it), so it is never counted
    levels = [int(cache[i]["motion_level"]) if predicted is None or i in predicted else 0 for i in range(len(cache))]
    todo = [(i, r) for i in range(len(cache)) if levels[i] in grid for r in grid[levels[i]]]
    rows = []
    try:
        for i, r in tqdm(todo, desc="calibrate levels", disable=not progress, dynamic_ncols=True):
            item, k = cache[i], levels[i]
            # the game's own sampling path, with level k's fraction replaced
            decoder.sampler = dataclasses.replace(
                trained, **{field: [r if j == k - 1 else x for j, x in enumerate(start)]})
            with torch.no_grad():
                s_a = (decoder.net.action_encoder(item["f_md"][None], item["f_v"][None]) if predicted is None
                       else predicted[i][None].float())  # (1, N, D)
                lat = decoder.sample_latents(s_a, k, torch.Generator().manual_seed(seed + i), guidance=guidance)
            measured, flow = motion_level_from_pixels(frames_to_uint8(decoder.decode_latents(lat))[0], quant)
            rows.append({"shot": i, "level": k, "r": r, "measured": measured, "flow": flow})
    finally:
        decoder.sampler = trained
    per_level: dict[str, Any] = {}
    chosen = list(start)
    for k, rs in sorted(grid.items()):
        mine = [x for x in rows if x["level"] == k]
        if not mine:
            per_level[str(k)] = {"shots": 0, "chosen": start[k - 1], "note": "no shot of this level: kept"}
            continue
        acc = {r: float(np.mean([x["measured"] == k for x in mine if x["r"] == r])) for r in rs}
        flow = {r: float(np.mean([x["flow"] for x in mine if x["r"] == r])) for r in rs}
        best = max(rs, key=lambda r: (round(acc[r], 9), -abs(r - base[k - 1])))
        chosen[k - 1] = best
        per_level[str(k)] = {"shots": levels.count(k), "accuracy": {str(r): a for r, a in acc.items()},
                             "mean_flow": {str(r): f for r, f in flow.items()}, "chosen": best,
                             "neutral" if knob == "motion-scale" else "training_fraction": base[k - 1]}
    weights = [levels.count(k) for k in sorted(grid)]
    best_acc = [max(per_level[str(k)].get("accuracy", {"-": 0.0}).values()) for k in sorted(grid)]
    return {"knob": knob, "shots": sum(k > 0 for k in levels), "s_a": "true" if predicted is None else "predicted",
            "guidance": guidance if guidance is not None else trained.guidance, "motion_guidance": trained.motion_guidance,
            "sampling_shared_noise_by_level": trained.shared_noise_by_level,
            "sampling_motion_scale_by_level": trained.motion_scale_by_level,
            "thresholds": list(quant.thresholds), "training_fractions": training_prior, "per_level": per_level,
            "chosen": chosen, "pack_argument": ",".join(f"{r:g}" for r in chosen),
            "accuracy_at_chosen": float(np.average(best_acc, weights=weights)) if sum(weights) else None,
            "rows": rows}


def predicted_s_a(engine_run: str | Path, sessions_dir: Path, cache, data: Path, out: Path,
                  progress: bool = True) -> dict[int, Any]:
    """cache row -> the engine's closed-loop s_a (N, D) for that shot, over the engine sessions (of the
    cache's split) whose every shot is in the cache: what the decoder is given in the game. The
    predictions are kept in ``out`` (resumable, reused when there)."""

    if not sessions_dir.is_dir():
        raise SystemExit(f"calibrate-levels: --sessions {sessions_dir} is not an engine-sessions directory")
    check_same_world(sessions_dir, cache, data)
    rows = shot_rows(cache, data)
    sessions = [s for s in load_sessions(sessions_dir)[0] if all(d["shot"] in rows for d in s)]
    if not sessions:
        raise SystemExit(f"calibrate-levels: no session of {sessions_dir} has all its shots in the cache "
                         f"(are they of the split {cache.meta['split']!r}, and is --n large enough?)")
    engine = load_engine(resolve_engine(engine_run))
    engine.merge_lora(True)  # predict only
    pred = predict_sessions(engine, sessions, out, closed_loop=True, progress=progress, desc="engine predicts")
    return {rows[shot]: pred["s_a"][j] for j, shot in enumerate(pred["shot"])}


def run_sweep(args: argparse.Namespace) -> int:
    grid = parse_grid(args.grid, args.knob)  # bad input fails before anything loads
    if bool(args.engine) != bool(args.sessions):
        raise SystemExit("calibrate-levels: --engine and --sessions go together (the engine predicts s_a over the sessions)")
    if args.threads:
        torch.set_num_threads(args.threads)
    decoder = ShotDecoder.from_pretrained(resolve_decoder(args.decoder))
    if args.sampler_motion_guidance is not None:  # calibrate the levels under the sampler they will be played with
        decoder.sampler = dataclasses.replace(decoder.sampler, motion_guidance=args.sampler_motion_guidance)
    cache = ensure_cache(Path(args.template_cache), Path(args.data), args.split, args.n, Path(args.cache))
    predicted = None
    if args.engine:
        predicted = predicted_s_a(args.engine, Path(args.sessions), cache, Path(args.data),
                                  Path(args.predictions or Path(args.out).with_suffix("").as_posix() + "_predicted"),
                                  progress=not args.no_progress)
    report = calibrate(decoder, cache, grid, args.sampler_guidance, args.seed, progress=not args.no_progress,
                       predicted=predicted, knob=args.knob)
    report = {"decoder": str(args.decoder), "split": args.split,
              **({"engine": str(args.engine), "sessions": str(args.sessions)} if args.engine else {}), **report}
    write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1))
    return 0


def anchored_draws(game: Game, sessions: list[list[dict[str, Any]]], world_seed: int,
                   progress: bool = True) -> tuple[list[torch.Tensor], list[int]]:
    """Play world sessions closed loop through ``game`` (as ``eval`` does): each turn's drawn s_a (N, D)
    (the history keeps it: AnchorConfig.history "drawn") and the engine's level."""
    anchors = game.decoder.anchors
    if anchors is None or anchors.config.history != "drawn":
        raise SystemExit("calibrate-levels anchored: the model has no visual anchors that keep what was drawn "
                         "(model pack --anchors DATA)")
    drawn, levels = [], []
    for rows in tqdm(sessions, desc="play", unit="session", disable=not progress, dynamic_ncols=True):
        game.engine.reset_cache()
        session = game.new_session(session_characters(rows), seed=turn_seed(world_seed, rows[0]["session"]),
                                   states=dict(rows[0]["states_before"]))
        for row in rows:
            turn = session.step(row["instruction"])
            drawn.append(turn.s_a.float())
            levels.append(int(turn.motion_level))
    return drawn, levels


def run_anchored(args: argparse.Namespace) -> int:
    grid = parse_grid(args.grid, args.knob)
    if args.threads:
        torch.set_num_threads(args.threads)
    world = WorldDataset(args.data)
    sessions = world.sessions(args.split)[: args.sessions]
    if not sessions:
        raise SystemExit(f"calibrate-levels anchored: {args.data} has no {args.split} sessions")
    store = Path(args.out).with_suffix("").as_posix() + "_games"
    game = Game.load(args.model, store=store)
    drawn, levels = anchored_draws(game, sessions, int(world.meta.get("seed", 0)), progress=not args.no_progress)
    cache = [{"motion_level": k} for k in levels]  # decoded at the ENGINE's level: the game's match
    report = calibrate(game.decoder, cache, grid, seed=args.seed, progress=not args.no_progress,
                       predicted=dict(enumerate(drawn)), knob=args.knob)
    report = {"model": str(args.model), "data": str(args.data), "split": args.split, "sessions": len(sessions),
              **report, "s_a": "drawn (visual anchors)"}
    write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1))
    return 0


def run_cache(args: argparse.Namespace) -> int:
    built = ensure_cache(Path(args.template_cache), Path(args.data), args.split, args.n, Path(args.cache))
    print(f"{args.cache}: {len(built)} shots of the {args.split} split")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate-levels", help="choose a level-matched decoder's sampling noise (or motion "
                              "scale) per level on held-out shots", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    def common(q: argparse.ArgumentParser, split: str, n: int) -> None:
        q.add_argument("--data", required=True, help="the world dataset the decoder was trained on")
        q.add_argument("--template-cache", required=True, help="a finished cache of the decoder run (its val_K)")
        q.add_argument("--cache", required=True, help="the split's cache directory (built when missing)")
        q.add_argument("--split", default=split, help="(default: %(default)s)")
        q.add_argument("--n", type=int, default=n, help="first shots of the split (default: %(default)s)")

    s = sub.add_parser("sweep", help="measure each level's candidate fractions and choose one")
    s.add_argument("--decoder", required=True, help="`train decoder` / `train adapt` run dir (or shot_decoder/)")
    common(s, "test", 200)
    s.add_argument("--grid", required=True, metavar="K:R,R;K:R,...", help="candidate values per level")
    s.add_argument("--knob", choices=sorted(KNOBS), default="shared-noise",
                   help="what the grid holds: shared-noise fractions (pack with --sample-shared-noise) or "
                        "motion scales of the sampled latents (pack with --sample-motion-scale); the "
                        "other is kept as the decoder has it (pass a packed model's shot_decoder/ to keep "
                        "its calibration) (default: %(default)s)")
    add_sampler_arguments(s, ("guidance", "motion_guidance"))
    s.add_argument("--engine", default=None, help="calibrate on this engine's PREDICTED s_a (closed loop over "
                   "--sessions) instead of the true s_a: what the decoder is given in the game")
    s.add_argument("--sessions", default=None, help="engine sessions of --split (with --engine), e.g. "
                   "ENGINE_RUN/sessions/test; those whose every shot is in the cache are used")
    s.add_argument("--predictions", default=None, help="where the predicted s_a are kept (default: next to --out)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--out", required=True, help="JSON report")
    s.set_defaults(func=run_sweep)
    a = sub.add_parser("anchored", help="the motion-scale sweep for a model with visual anchors, on its drawn s_a "
                       "over a world's sessions played through the game")
    a.add_argument("--model", required=True, help="a model directory whose decoder has visual anchors")
    a.add_argument("--data", required=True, help="a world dataset the evaluation does not play")
    a.add_argument("--split", default="train", help="(default: %(default)s)")
    a.add_argument("--sessions", type=int, default=24, help="first sessions of the split (default: %(default)s)")
    a.add_argument("--grid", required=True, metavar="K:S,S;K:S,...", help="candidate values per level")
    a.add_argument("--knob", choices=sorted(KNOBS), default="motion-scale",
                   help="what the grid holds (as in sweep; the other is kept as the model has it) (default: %(default)s)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--threads", type=int, default=None)
    a.add_argument("--no-progress", action="store_true")
    a.add_argument("--out", required=True, help="JSON report (its pack_argument: model pack --sample-motion-scale)")
    a.set_defaults(func=run_anchored)
    c = sub.add_parser("cache", help="only build a split's feature cache (for eval-decoder --cache)")
    common(c, "val", 300)
    c.set_defaults(func=run_cache)
