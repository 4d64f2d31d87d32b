"""Where the drawn motion level departs from the asked one, per verb: the world's shot, the TRUE sprite tracks on
play's stage (the layering's ceiling), and play's drawing from the stage (docs/layers.md, "The level through the
network"):

    .venv/bin/python experiments/level_in_layers.py --world runs/data/w9100 [--n 96] [--sprites RUN] [--out FILE.json]
    .venv/bin/python experiments/level_in_layers.py --world runs/data/w9100 --n 24 --sweep [--bare-verb] [--sprites RUN]

For each of ``--n`` held-out shots spread over the world, the flow magnitude the world's quantiser reads
(``world/flow.flow_magnitude``: DIS flow, per-row median removed, each pair's 99th percentile) and the level it gives,
for ``truth``, ``oracle`` (eval-drawn's: each character's true sprite track layered on the stage, play's camera),
``drawn`` (eval-drawn's ``drawn_standing``: play's drawing from the staged cut-outs, the true s_a and level) and
``stage`` (the oracle's place and camera with the characters left out: the flow the background alone adds).
Reported per system: level read = asked, the mean signed level error, and per verb the median flow over the
truth's and the level error. ``places``: where in the asked level's band each system's flow lies
(``paired_turns.place_in_band``: 0 at the middle, +-0.5 at the edges) and the spread of the differences: the stage's
own (oracle - truth: the same track on another background and camera) and the drawing's (drawn - oracle: the
animator against the track it stands for), the latter split into a bias per verb and what is left within a verb.
``--sweep``: does the animator follow the level asked? Each shot drawn from its true s_a at levels 1..5: the level
read = asked, by asked level, and the mean slope of the read level over the asked (1.0 follows it; docs/layers.md,
"A broom flies where the world flies it"); ``--bare-verb``: the same with the s_a of the motion text told without its
adverb (does the animator take the amount from the adverb?). A shot's verb cannot reach every level (a sleeper has no
level 5): each is also graded on the levels it can reach, those its TRUE tracks read on the stage when the world
plays the turn in each of the 8 adverbs' manners (``right_reachable``, ``slope_reachable``).
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.decoder.layered import acts_as_pair, draw_turn, framed, scene_frame, start_scene, tracks_as_played
from animegamer.decoder.layers import cutout_canvas
from animegamer.decoder.pipeline import SPRITES_DIR, STAGE_DIR, frames_from_uint8
from animegamer.decoder.stage import Stage
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.training.action_parts import ActionParts
from animegamer.training.phase_sprites import level_as_played
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.motion_catalog import load_motions
from animegamer.world.sprite_tracks import row_tracks, session_lengths
from paired_turns import place_in_band  # experiments/: the script's own folder


def setup(world_dir: str, n: int, model: Path, sprites: str | None) -> tuple:
    """The stage, the animator, E_a's parts, the quantiser, the world and the ``n`` shots spread over it."""
    decoder_dir = model / "shot_decoder"
    stage = Stage.from_pretrained(decoder_dir / STAGE_DIR)
    animator = load_animator(sprites or str(decoder_dir / SPRITES_DIR)).eval()
    world = WorldDataset(world_dir)
    idx = np.linspace(0, len(world.rows) - 1, min(n, len(world.rows))).round().astype(int)
    return stage, animator, ActionParts(decoder_dir), MotionQuantizer.load(), world, idx


def staged(stage: Stage, parts: ActionParts, row: dict, names: list[str]) -> tuple:
    """Play's start of the shot from the stage: its scene, the true s_a of it and the characters' references."""
    scene = framed(stage, start_scene(stage, row["place"], row["time"], names, stage.sprites,
                                      pair=acts_as_pair(names, row["motion"]), verb=row["motion"]), names, row["motion"])
    s_a = parts.encode(frames_from_uint8(scene_frame(stage, scene))[None], [row["motion_text"]])[0]
    references = {c: cutout_canvas(stage.sprites[c], stage.standing * stage.size[0]) for c in names}
    return scene, s_a, references


def measure(world_dir: str, n: int, model: Path, sprites: str | None = None) -> list[dict]:
    stage, animator, parts, quant, world, idx = setup(world_dir, n, model, sprites)
    lengths = session_lengths(world.rows)
    out = []
    torch.manual_seed(0)
    for i in tqdm(idx, desc="shots"):
        row = world.rows[i]
        true = world.frames(row)
        tracks = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], true.shape[0])
        names = [tr.name for tr in tracks]
        oracle = tracks_as_played(stage, row["place"], row["time"], [tr.rgba for tr in tracks],
                                  [tr.offset for tr in tracks], row["motion"])
        scene, s_a, references = staged(stage, parts, row, names)
        with torch.no_grad():
            drawn = draw_turn(animator, stage, scene, names, s_a, int(row["motion_level"]), references,
                              verb=row["motion"])[0]
        # the stage alone: the same camera and place with the characters left out (what the background adds)
        empty = tracks_as_played(stage, row["place"], row["time"], [np.zeros_like(tr.rgba) for tr in tracks],
                                 [tr.offset for tr in tracks], row["motion"])
        rec = {"verb": row["motion"], "level": int(row["motion_level"]), "characters": len(names),
               "place": row["place"]}
        for name, frames in (("truth", true), ("oracle", oracle), ("drawn", drawn), ("stage", empty)):
            mag = flow_magnitude(np.ascontiguousarray(frames))
            rec[name] = {"flow": mag, "level": quant.level(mag)}
        out.append(rec)
    return out


def without_adverb(row: dict) -> dict:
    """The row with its motion text told without the adverb ("wildly dance" -> "dance")."""
    words = [w for w in row["motion_text"].split() if w != row["adverb"]] if row["adverb"] else None
    return dict(row, motion_text=" ".join(words)) if words else row


def sweep(world_dir: str, n: int, model: Path, sprites: str | None = None, bare: bool = False) -> dict:
    """Each of ``n`` held-out shots drawn at asked levels 1..5 from the same true s_a, and the level read; ``bare``:
    the s_a of the motion text without its adverb."""
    stage, animator, parts, quant, world, idx = setup(world_dir, n, model, sprites)
    lengths = session_lengths(world.rows)
    recs = []
    for i in tqdm(idx, desc="shots"):
        reachable = reachable_levels(stage, quant, world.rows[i], lengths, world.frames(world.rows[i]).shape[0])
        row = without_adverb(world.rows[i]) if bare else world.rows[i]
        names = list(row["characters"])
        scene, s_a, references = staged(stage, parts, row, names)
        read = []
        for level in range(1, 6):
            with torch.no_grad():
                drawn = draw_turn(animator, stage, scene, names, s_a, level, references, verb=row["motion"])[0]
            read.append(quant.level(flow_magnitude(np.ascontiguousarray(drawn))))
        recs.append({"verb": row["motion"], "adverb": row["adverb"], "level": int(row["motion_level"]), "read": read,
                     "reachable": reachable})
    hit = np.array([[r["read"][k] == k + 1 for k in range(5)] for r in recs], float)
    slope = np.mean([np.polyfit(np.arange(1, 6), r["read"], 1)[0] for r in recs])
    reach = [[r["read"][k - 1] == k for k in r["reachable"]] for r in recs]
    spread = [r for r in recs if len(r["reachable"]) > 1]
    return {"right_by_asked_level": hit.mean(0).round(3).tolist(), "right_all": float(hit.mean()),
            "slope": float(slope), "reachable_per_shot": float(np.mean([len(r["reachable"]) for r in recs])),
            "right_reachable": float(np.mean([x for xs in reach for x in xs])),
            "slope_reachable": float(np.mean([np.polyfit(r["reachable"], [r["read"][k - 1] for k in r["reachable"]],
                                                         1)[0] for r in spread])),
            "shots": recs}


def reachable_levels(stage: Stage, quant: MotionQuantizer, row: dict, lengths: dict, n_frames: int) -> list[int]:
    """The levels the shot's true tracks read on the stage, played by the world in each adverb's manner."""
    out = set()
    for adverb in load_motions()[1]:
        tracks = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], n_frames, phase=0.0, adverb=adverb)
        out.add(level_as_played(stage, quant, row["place"], row["time"], [t.rgba for t in tracks],
                                [t.offset for t in tracks], row["motion"]))
    return sorted(out)


def summarize(recs: list[dict]) -> dict:
    res = {}
    for s in ("truth", "oracle", "drawn"):
        err = np.array([r[s]["level"] - r["level"] for r in recs])
        res[s] = {"level_right": float((err == 0).mean()), "se": float((err == 0).std(ddof=1) / np.sqrt(len(err))),
                  "mean_error": float(err.mean()), "per_level_error": {
                      int(k): float(np.mean([r[s]["level"] - r["level"] for r in recs if r["level"] == k]))
                      for k in sorted({r["level"] for r in recs})}}
    by = collections.defaultdict(list)
    for r in recs:
        by[r["verb"]].append(r)
    res["by_verb"] = {v: {"shots": len(rs), **{f"{s}_flow_over_truth": float(np.median(
        [r[s]["flow"] / max(r["truth"]["flow"], 1e-6) for r in rs])) for s in ("oracle", "drawn")},
        **{f"{s}_level_error": float(np.mean([r[s]["level"] - r["level"] for r in rs])) for s in ("oracle", "drawn")},
        "truth_flow": float(np.median([r["truth"]["flow"] for r in rs])),
        "stage_flow": float(np.median([r["stage"]["flow"] for r in rs]))}
        for v, rs in sorted(by.items())}
    res["places"] = places(recs)
    return res


def places(recs: list[dict]) -> dict:
    """Where in the asked band each system's flow lies, and the spread of the stage's and the drawing's errors."""
    quant = MotionQuantizer.load()
    at = {s: np.array([place_in_band(r[s]["flow"], r["level"], quant) for r in recs]) for s in ("truth", "oracle", "drawn")}
    out: dict = {s: {"mean": float(x.mean()), "spread": float(x.std())} for s, x in at.items()}
    stage, drawing = at["oracle"] - at["truth"], at["drawn"] - at["oracle"]
    verbs = [r["verb"] for r in recs]
    bias = {v: float(np.mean([d for d, w in zip(drawing, verbs) if w == v])) for v in sorted(set(verbs))}
    per_shot_bias = np.array([bias[v] for v in verbs])
    out["stage_error"] = {"mean": float(stage.mean()), "spread": float(stage.std())}
    out["drawing_error"] = {"mean": float(drawing.mean()), "spread": float(drawing.std()),
                            "between_verbs": float(per_shot_bias.std()),
                            "within_verb": float((drawing - per_shot_bias).std()), "by_verb": bias}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", required=True)
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--model", default=str(DEFAULT_WEIGHTS))
    ap.add_argument("--sprites", default=None, help="another sprite animator: a `train sprites` run, its final/ or a "
                    "checkpoint (EMA weights)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--sweep", action="store_true", help="draw each shot at asked levels 1..5: does the level follow?")
    ap.add_argument("--bare-verb", action="store_true", help="with --sweep: s_a from the motion text without its adverb")
    ap.add_argument("--threads", type=int, default=2, help="1 beside a training run: small forwards on shared cores")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.sweep:
        res = sweep(args.world, args.n, Path(args.model), args.sprites, args.bare_verb)
        print({k: v for k, v in res.items() if k != "shots"})
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1))
        return
    recs = measure(args.world, args.n, Path(args.model), args.sprites)
    res = summarize(recs)
    for s in ("truth", "oracle", "drawn"):
        print(s, {k: v for k, v in res[s].items()})
    for v, r in res["by_verb"].items():
        print(f"{v:12s}", r)
    print("places", {k: v for k, v in res["places"].items()})
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": res, "shots": recs}, indent=1))


if __name__ == "__main__":
    main()
