"""Where in a game the drawn level misses the engine's (docs/layers.md, "The turn is not the cause: verbs, and who
stands by"):

    .venv/bin/python experiments/level_by_turn.py runs/eval_cand_9100 runs/eval_cand_9200 [more eval dirs] [--out F]

Each eval directory is one `animegamer eval --out DIR` (its ``systems/animegamer.jsonl`` and ``world/turns.jsonl``);
directories played on the same world (same seed) pool. For each played turn, level from the pixels = the engine's
(``ml_pixels == ml_engine``) by:
- ``turn``: the turn's index in its session, with what the verb and level mix alone would give
  (``expected``: each turn's verb-and-level rate over all turns, averaged per turn index): a trend the mix explains
  is the verbs', not the turn's;
- ``kind``: how play drew it, from the world's script: ``staged`` (a game's first turn, a new place or time, or
  someone new named: the stage stands the scene), ``new_verb`` (the same scene, who acts does another verb: a new
  shot), ``goes_on`` (the same verb goes on from the frame shown);
- ``bystanders``: whether anyone named earlier in the scene stands by (holds still) while others act;
each also where the engine's level is the true one (``engine_right``).
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np


def turn_kinds(world_turns: Path) -> dict[tuple[int, int], dict]:
    """(session, turn) -> how play draws it (``kind``), how many stand by, its index, verb and true level."""
    out, scene, last = {}, set(), {}
    for line in world_turns.read_text().splitlines():
        r = json.loads(line)
        chars = r["characters"]
        if r["turn"] == 0 or r["place_changed"] or r.get("time_changed") or not set(chars) <= scene:
            kind, scene, last = "staged", set(chars), {}
        elif all(last.get(c) == r["motion"] for c in chars):
            kind = "goes_on"
        else:
            kind = "new_verb"
        out[(r["session"], r["turn"])] = {"kind": kind, "bystanders": len(scene) - len(chars), "turn": r["turn"],
                                          "verb": r["motion"]}
        for c in chars:
            last[c] = r["motion"]
    return out


def load(dirs: list[str]) -> list[dict]:
    rows = []
    for d in dirs:
        kinds = turn_kinds(Path(d) / "world" / "turns.jsonl")
        for line in (Path(d) / "systems" / "animegamer.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows.append({**kinds[(r["session"], r["turn"])], "level": r["ml_engine"],
                         "hit": float(r["ml_pixels"] == r["ml_engine"]), "miss": r["ml_pixels"] - r["ml_engine"],
                         "engine_right": r["ml_engine"] == r["ml_true"]})
    return rows


def rate(rows: list[dict]) -> dict:
    hit = np.array([r["hit"] for r in rows])
    return {"turns": len(rows), "level_right": round(float(hit.mean()), 3),
            "se": round(float(hit.std(ddof=1) / np.sqrt(len(hit))), 3) if len(hit) > 1 else None,
            "mean_signed_miss": round(float(np.mean([r["miss"] for r in rows])), 3)}


def summarize(rows: list[dict]) -> dict:
    by_mix = collections.defaultdict(list)
    for r in rows:
        by_mix[(r["verb"], r["level"])].append(r["hit"])
    mix = {k: float(np.mean(v)) for k, v in by_mix.items()}
    out: dict = {"all": rate(rows), "turn": {}, "kind": {}, "bystanders": {}}
    for t in sorted({r["turn"] for r in rows}):
        sel = [r for r in rows if r["turn"] == t]
        out["turn"][t] = {**rate(sel), "expected": round(float(np.mean([mix[(r["verb"], r["level"])] for r in sel])),
                                                         3),
                          "engine_right": rate([r for r in sel if r["engine_right"]])}
    for k in ("staged", "new_verb", "goes_on"):
        sel = [r for r in rows if r["kind"] == k]
        if sel:
            out["kind"][k] = {**rate(sel), "engine_right": rate([r for r in sel if r["engine_right"]])}
    for b, name in ((False, "none"), (True, "some")):
        sel = [r for r in rows if (r["bystanders"] > 0) == b]
        if sel:
            out["bystanders"][name] = {**rate(sel), "engine_right": rate([r for r in sel if r["engine_right"]])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("evals", nargs="+", help="`animegamer eval --out` directories")
    ap.add_argument("--out", default=None, help="JSON report")
    args = ap.parse_args()
    res = summarize(load(args.evals))
    print(json.dumps(res, indent=1))
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
