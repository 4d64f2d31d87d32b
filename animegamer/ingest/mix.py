"""`animegamer mix`: several datasets as one training set, each weighted, without copying a clip.

    mix_datasets([("data/films", 3.0), ("runs/data/big", 0.5)], "data/films_and_world")

The mixture is a dataset directory in the world's format whose ``turns.jsonl`` lists the sessions of
every part, renumbered, with each row's ``shot`` pointing at the part's file (an absolute path,
which ``WorldDataset.frames`` reads as it is). A weight w repeats every session of its part
floor(w) times and draws the fraction left over (seeded): 3 lists each film session three times,
0.5 half the world's sessions. Splits are kept, so the held-out sessions stay held out. The parts
must share the shot size, frame count and frame rate. Every training phase reads the result with
``--data``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from animegamer.core.atomic_io import write_json, write_jsonl
from animegamer.ingest.video import IngestError
from animegamer.world.dataset import FORMAT, VERSION, WorldDataset

SHAPE_KEYS = ("height", "width", "frames", "fps")


def parse_part(text: str) -> tuple[str, float]:
    """``DIR`` (weight 1) or ``DIR:WEIGHT`` (weight > 0)."""
    head, sep, tail = text.rpartition(":")
    if not (sep and head):
        return text, 1.0
    try:
        w = float(tail)
    except ValueError:
        return text, 1.0  # a ':' that is part of the path
    if not (w > 0 and math.isfinite(w)):
        raise IngestError(f"{text}: a weight must be a positive number, got {tail!r}")
    return head, w


def mix_datasets(parts: list[tuple[str | os.PathLike, float]], out: str | os.PathLike, seed: int = 0) -> dict[str, Any]:
    """The mixture of the module doc in ``out`` (turns.jsonl and meta.json, written last); returns meta."""
    if len(parts) < 2:
        raise IngestError("mix needs at least two datasets")
    out = Path(out)
    if (out / "shots").exists():
        raise IngestError(f"{out} holds a dataset with its own clips; mix into another --out")
    worlds = []
    for path, w in parts:
        try:
            worlds.append((WorldDataset(path), float(w)))
        except (FileNotFoundError, ValueError) as e:
            raise IngestError(f"{path}: {e}") from None
    first = worlds[0][0].meta
    for world, _ in worlds[1:]:
        bad = [k for k in SHAPE_KEYS if world.meta.get(k) != first.get(k)]
        if bad:
            raise IngestError(f"{world.root} has other shots than {worlds[0][0].root}: "
                              + ", ".join(f"{k} {world.meta.get(k)} vs {first.get(k)}" for k in bad))
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    listed, session = [], 0
    for world, w in worlds:
        sessions = world.sessions()
        whole, frac = divmod(w, 1.0)
        extra = rng.permutation(len(sessions))[:round(frac * len(sessions))]
        chosen = [s for s in sessions for _ in range(int(whole))] + [sessions[i] for i in sorted(extra)]
        root = world.root.resolve()
        for s in chosen:
            rows += [dict(r, session=session, shot=str(root / r["shot"]), mixed_from=str(root)) for r in s]
            session += 1
        listed.append({"data": str(root), "weight": w, "sessions": len(sessions), "sessions_listed": len(chosen)})
    if not rows:
        raise IngestError("the weights leave no session in the mixture")
    write_jsonl(out / "turns.jsonl", rows)
    meta = {"format": FORMAT, "version": VERSION, "seed": None, **{k: first[k] for k in SHAPE_KEYS},
            "sessions": rows[-1]["session"] + 1, "max_turns": max(r["turn"] for r in rows) + 1,
            "turns_total": len(rows), "motion_thresholds": first.get("motion_thresholds"),
            "level_counts": {str(k): sum(r["motion_level"] == k for r in rows) for k in range(1, 6)},
            "mix": listed}
    write_json(out / "meta.json", meta)
    return meta
