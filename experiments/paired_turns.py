"""Two systems of one `animegamer eval` run compared turn by turn (paired differences with standard errors).

    .venv/bin/python experiments/paired_turns.py runs/eval_stage/systems/layered.jsonl runs/eval_stage/systems/animegamer.jsonl [--out FILE.json]

Columns: the action the evaluator names, who / where / when its frame classifier reads, the level read from the
pixels = the true level (acc_f_pixels), = the engine's (pixels_engine), the engine's = the true level (engine_true),
new content, and sharpness as a share of the truth's; plus the action per verb, and the pixels = the engine's where
the engine is right and where it is wrong (not paired: each system's own engine); and where in the engine's band the
drawn flow lies (``place_in_band``: 0 at the band's middle, +-0.5 at its edges): its mean and spread per system.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

from animegamer.world.flow import MotionQuantizer

COLUMNS = ("action_acc", "char_id", "place_id", "time_id", "acc_f_pixels", "pixels_engine", "engine_true",
           "new_content")


def with_levels(r: dict) -> dict:
    """The row with pixels_engine and engine_true: the level columns an eval's systems/*.jsonl rows imply."""
    return {**r, "pixels_engine": float(r["ml_pixels"] == r["ml_engine"]),
            "engine_true": float(r["ml_engine"] == r["ml_true"])}


def place_in_band(flow: float, level: int, quant: MotionQuantizer) -> float:
    """Where ``flow`` lies against ``level``, in levels: the level ``flow`` reads, plus where in that band it lies in
    log magnitude (-0.5 at the band's lower edge, +0.5 at its upper; band 1 as wide as band 2, band 5 as band 4),
    held to 1..5 (below level 1's middle nothing reads too still, above level 5's nothing too lively), minus
    ``level``: 0 at the middle of the asked band, +-0.5 at its edges."""
    logs = np.log(np.asarray(quant.thresholds, dtype=np.float64))
    read = quant.level(flow)
    lo = logs[read - 2] if read > 1 else 2 * logs[0] - logs[1]
    hi = logs[read - 1] if read < len(logs) + 1 else 2 * logs[-1] - logs[-2]
    position = read - 0.5 + (np.log(max(flow, 1e-9)) - lo) / (hi - lo)
    return float(np.clip(position, 1, len(logs) + 1) - level)


def mean_se(x: list[float]) -> dict[str, float]:
    a = np.asarray(x, np.float64)
    return {"mean": float(a.mean()), "se": float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--verbs", default=None, help="the eval's world turns.jsonl, for the action per verb")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = [{(r["session"], r["turn"]): with_levels(r) for r in map(json.loads, open(f)) if r} for f in (args.a, args.b)]
    keys = sorted(set(rows[0]) & set(rows[1]))
    out: dict = {"turns": len(keys), "a": args.a, "b": args.b, "columns": {}}
    for c in COLUMNS:
        xa, xb = [float(rows[0][k][c]) for k in keys], [float(rows[1][k][c]) for k in keys]
        out["columns"][c] = {"a": mean_se(xa), "b": mean_se(xb), "a - b": mean_se([x - y for x, y in zip(xa, xb)])}
    sharp = [[rows[i][k]["sharp"] / max(rows[i][k]["sharp_true"], 1e-6) for k in keys] for i in (0, 1)]
    out["columns"]["sharpness"] = {"a": mean_se(sharp[0]), "b": mean_se(sharp[1]),
                                   "a - b": mean_se([x - y for x, y in zip(*sharp)])}
    for name, system in zip("ab", rows):
        for right in (True, False):
            hit = [system[k]["pixels_engine"] for k in keys if bool(system[k]["engine_true"]) == right]
            out[f"pixels_engine_where_engine_{'right' if right else 'wrong'}_{name}"] = (
                {"turns": len(hit), "mean": float(np.mean(hit))} if hit else None)
    quant = MotionQuantizer.load()
    for name, system in zip("ab", rows):
        place = [place_in_band(system[k]["flow"], system[k]["ml_engine"], quant) for k in keys]
        out[f"drawn_place_in_engine_band_{name}"] = {"mean": float(np.mean(place)), "sd": float(np.std(place))}
    if args.verbs:
        verb = {(r["session"], r["turn"]): r["motion"] for r in map(json.loads, open(args.verbs))}
        per: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for k in keys:
            per[verb[k]].append((rows[0][k]["action_acc"], rows[1][k]["action_acc"]))
        out["action_by_verb"] = {v: {"turns": len(x), "a": float(np.mean([p[0] for p in x])),
                                     "b": float(np.mean([p[1] for p in x]))} for v, x in sorted(per.items())}
    for c, v in out["columns"].items():
        print(f"{c:13s} a {v['a']['mean']:.3f}  b {v['b']['mean']:.3f}  a-b {v['a - b']['mean']:+.3f} ± {v['a - b']['se']:.3f}")
    for k, v in out.items():
        if k.startswith("pixels_engine_where") and v:
            print(f"{k}: {v['mean']:.3f} of {v['turns']} turns")
        if k.startswith("drawn_place_in_engine_band"):
            print(f"{k}: mean {v['mean']:+.3f}, spread {v['sd']:.3f} of a level")
    for v, x in out.get("action_by_verb", {}).items():
        print(f"  {v:10s} {x['turns']:3d} turns  a {x['a']:.2f}  b {x['b']:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
