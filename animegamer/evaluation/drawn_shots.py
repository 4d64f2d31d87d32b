"""Decoders compared from the TRUE first frame, s_a and level of held-out shots, shot by shot (paired).

    animegamer eval-drawn --framenet RUN --data WORLD_DIR [--n 48] [--out FILE.json] [--sheet FILE.jpg]
    animegamer eval-drawn --flowpaint RUN --data WORLD_DIR ...

Each held-out shot is drawn by every system from the same inputs and seed, and graded by the
evaluator (which shares nothing with the models): the action its video classifier names, who / where
/ when its frame classifier reads, sharpness (variance of the Laplacian, as a share of the truth's),
the motion level the world's flow quantiser reads from the pixels (= the level asked for), and **new
content**: the share of pixels that the first frame moved along the optical flow cannot explain
(``new_content``). Systems: ``framenet`` (every frame after the first is the denoiser's output) or
``flowpaint`` (every frame after the first is the first moved along the flow the network draws plus the
change it paints), and ``shipped`` (the shipped ShotDecoder: the first picture moved along drawn flows).
Differences are paired per shot, with standard errors.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.frame_diffusion import FrameDenoiser
from animegamer.decoder.flow_paint import FlowPaint
from animegamer.decoder.pipeline import FrameDrawer, ShotDecoder, draw_with, frames_from_uint8
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator
from animegamer.evaluation.metrics import motion_level_from_pixels, new_content
from animegamer.evaluation.picture import read_picture
from animegamer.training.framenet_data import ActionParts
from animegamer.training.phase_framenet import SHIPPED
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer
from animegamer.world.preview import save_png, shot_strip, stack_strips

Draw = Callable[[np.ndarray, torch.Tensor, int, int], np.ndarray]  # (first frame, s_a, level, seed) -> shot


def drawer_draw(drawer: FrameDrawer) -> Draw:
    """A frame drawer (FrameNet with the sampler it holds, or FlowPaint) as a system to grade."""
    def draw(first: np.ndarray, s_a: torch.Tensor, level: int, seed: int) -> np.ndarray:
        return draw_with(drawer, [first], s_a[None], torch.tensor([level]), torch.Generator().manual_seed(seed))[0]
    return draw


def shipped_draw(decoder: ShotDecoder) -> Draw:
    def draw(first: np.ndarray, s_a: torch.Tensor, level: int, seed: int) -> np.ndarray:
        return decoder(s_a.float(), level, torch.Generator().manual_seed(seed), source=first)
    return draw


def grade(evaluator: Evaluator, quant: MotionQuantizer, gen: np.ndarray, true: np.ndarray,
          row: dict[str, Any]) -> dict[str, float]:
    pic = read_picture(evaluator.frames, gen, true, row)
    return {"action": float(evaluator.actions.predict(gen) == row["motion"]),
            "character": pic["char_id"], "place": pic["place_id"], "time": pic["time_id"],
            "sharp": pic["sharp"], "sharp_true": pic["sharp_true"],
            "level": float(motion_level_from_pixels(gen, quant)[0] == row["motion_level"]),
            "new_content": new_content(gen)}


def mean_se(x: list[float]) -> dict[str, float]:
    a = np.asarray(x, np.float64)
    return {"mean": float(a.mean()), "se": float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0}


def compare(systems: dict[str, Draw], world: WorldDataset, rows: list[dict[str, Any]], s_a: torch.Tensor,
            evaluator: Evaluator, seed: int = 0, keep: int = 0, progress: bool = True) -> dict[str, Any]:
    """Every system draws every row from its true first frame, s_a and level; graded and paired."""
    quant = MotionQuantizer.load()
    per: dict[str, list[dict[str, float]]] = {k: [] for k in ["truth", *systems]}
    kept: list[tuple[dict[str, Any], dict[str, np.ndarray]]] = []
    for i, row in enumerate(tqdm(rows, desc="drawing", disable=not progress, dynamic_ncols=True)):
        true = world.frames(row)
        shots = {"truth": true, **{k: draw(true[0], s_a[i], int(row["motion_level"]), seed + i)
                                   for k, draw in systems.items()}}
        for k, frames in shots.items():
            per[k].append(grade(evaluator, quant, frames, true, row))
        if len(kept) < keep:
            kept.append((row, shots))
    out: dict[str, Any] = {"shots": len(rows), **summarize(per, rows)}
    names = list(systems)
    if len(names) == 2:  # paired: first minus second, per shot
        a, b = names
        out["paired"] = {f"{a} - {b}": {c: mean_se([x[c] - y[c] for x, y in zip(per[a], per[b])])
                                        for c in ("action", "character", "place", "level", "new_content")}}
    out["_per_shot"] = per
    if keep:
        out["_shots"] = kept
    return out


GRADED = ("action", "character", "place", "time", "level", "new_content")


def summarize(per: dict[str, list[dict[str, float]]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each system's graded shots (``grade``'s, in ``rows``' order) as means with standard errors, sharpness as
    a share of the truth's, and the action named per verb."""
    systems = {}
    for k, grades in per.items():
        cols = {c: mean_se([g[c] for g in grades]) for c in GRADED}
        cols["sharpness"] = {"mean": float(np.mean([g["sharp"] for g in grades])
                                           / np.mean([g["sharp_true"] for g in grades]))}
        systems[k] = cols
    by_verb: dict[str, dict[str, list[float]]] = {}
    for i, row in enumerate(rows):
        v = by_verb.setdefault(row["motion"], {k: [] for k in per})
        for k in per:
            v[k].append(per[k][i]["action"])
    return {"systems": systems,
            "action_by_verb": {v: {"shots": len(next(iter(h.values()))), **{k: float(np.mean(x)) for k, x in h.items()}}
                               for v, h in sorted(by_verb.items())}}


def contact_sheet(kept: list[tuple[dict[str, Any], dict[str, np.ndarray]]], path: str | Path, frames: int = 5) -> Path:
    """Each shot's systems stacked (truth first), ``frames`` frames each, labelled."""
    strips = []
    for row, shots in kept:
        for name, f in shots.items():
            label = {**row, "instruction": f"[{name}] {row['instruction']}"}
            strips.append(shot_strip(f, label, tuple(np.linspace(0, 1, frames))))
    return save_png(stack_strips(strips), path)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval-drawn", help="decoders from the TRUE first frame, s_a and level, paired",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--framenet", help="a `train framenet` run (or its final/)")
    which.add_argument("--flowpaint", help="a `train flowpaint` run (or its final/)")
    p.add_argument("--data", required=True, help="a world dataset whose shots none of the systems trained on")
    p.add_argument("--model", default=str(SHIPPED), help="the model whose decoder is compared and whose E_a gives s_a")
    p.add_argument("--n", type=int, default=48, help="shots (spread over the dataset)")
    p.add_argument("--steps", type=int, default=None, help="FrameNet's Euler steps (default: its sampler's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON report")
    p.add_argument("--sheet", default=None, help="contact sheet (PNG) of the first --keep shots")
    p.add_argument("--keep", type=int, default=8)
    p.add_argument("--no-shipped", action="store_true", help="FrameNet alone (no paired baseline)")
    p.set_defaults(func=run)


def graded_rows(world: WorldDataset, n: int) -> list[dict[str, Any]]:
    """The n shots eval-drawn grades: evenly spaced over the dataset."""
    idx = np.linspace(0, len(world.rows) - 1, min(n, len(world.rows))).round().astype(int)
    return [world.rows[i] for i in idx]


def run(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    world = WorldDataset(args.data)
    rows = graded_rows(world, args.n)
    decoder_dir = resolve_decoder(args.model)
    parts = ActionParts(decoder_dir)
    first = torch.stack([frames_from_uint8(world.frames(r)[0]) for r in rows])  # (N, 3, H, W)
    s_a = parts.encode(first, [r["motion_text"] for r in rows])  # (N, n, D)
    systems: dict[str, Draw] = {}
    if args.flowpaint:
        systems["flowpaint"] = drawer_draw(FlowPaint.from_pretrained(args.flowpaint))
    else:
        denoiser = FrameDenoiser.from_pretrained(args.framenet)
        # the sampler the run was saved with (its noise range belongs to its parametrization); --steps overrides
        sampler = denoiser.sampler = replace(denoiser.sampler, steps=args.steps) if args.steps else denoiser.sampler
        systems["framenet"] = drawer_draw(denoiser)
    if not args.no_shipped:
        systems["shipped"] = shipped_draw(ShotDecoder.from_pretrained(decoder_dir))
    result = compare(systems, world, rows, s_a, Evaluator.load(DEFAULT_EVALUATOR), args.seed,
                     keep=args.keep if args.sheet else 0)
    if args.sheet:
        contact_sheet(result.pop("_shots"), args.sheet)
        print(f"[eval-drawn] sheet: {args.sheet}")
    if args.framenet:
        result["sampler"] = sampler.to_dict()
    result["run"] = str(args.framenet or args.flowpaint)
    for name, cols in result["systems"].items():
        print(f"{name:9s} " + "  ".join(f"{c} {v['mean']:.3f}" + (f"±{v['se']:.3f}" if "se" in v else "")
                                        for c, v in cols.items()))
    for name, cols in result.get("paired", {}).items():
        print(f"paired {name}: " + "  ".join(f"{c} {v['mean']:+.3f}±{v['se']:.3f}" for c, v in cols.items()))
    if args.out:
        save_json_atomic(result, args.out)
    return 0
