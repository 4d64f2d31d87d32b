"""Engines' motion level beside the world's two references, on the same held-out turns.

    .venv/bin/python experiments/engine_level_scene.py RUNS_DIR NAME [NAME ..]

Reads the dumps RUNS_DIR/level_probe/NAME_{val,test}_*.pt of ``experiments/engine_level_probe.py
dump`` (teacher forced, window 3). Fits the lookup table and the additive log-flow model with and
without who acts and where (``world.level_ceiling``) on the training turns of every world those
dumps come from, pooled (the effects of a character or a place are the same in each world), and
prints per split: each reference's accuracy, each engine's accuracy, its paired difference to the
first engine, and how often it sides with the scene model on the turns where the scene model and
the one without characters and place disagree (where knowing who acts and where changes the level).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from animegamer.world.dataset import WorldDataset
from animegamer.world.level_ceiling import AdditiveLevelModel, LevelTable


def _se(x: np.ndarray) -> str:
    return f"{x.mean():.3f} +- {x.std() / len(x) ** 0.5:.3f}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    probe = Path(argv[0]) / "level_probe"
    names = argv[1:]
    dumps = {n: {p.name[len(n) + 1:-3]: torch.load(p) for p in sorted(probe.glob(f"{n}_*.pt"))
                 if p.name[len(n) + 1:].split("_")[0] in ("val", "test")} for n in names}
    parts = sorted(dumps[names[0]])
    if not parts or any(sorted(d) != parts for d in dumps.values()):
        raise SystemExit(f"every engine needs the same dumps; found {({n: sorted(d) for n, d in dumps.items()})}")
    worlds, rows_of = {}, {}
    for part in parts:  # the world each dump's sessions were built from, and its turn rows
        sdir = Path(dumps[names[0]][part]["sessions"])
        w = json.loads((sdir / "engine_meta.json").read_text())["build"]["world"]
        worlds[part] = w
        if w not in rows_of:
            rows_of[w] = WorldDataset(w).rows
    train = [r for rows in rows_of.values() for r in rows if r["split"] == "train"]
    table, scene, plain = LevelTable(train), AdditiveLevelModel(train, scene=True), AdditiveLevelModel(train, scene=False)
    print(f"references fit on {len(train)} training turns of {len(rows_of)} worlds")
    for split in ("val", "test"):
        ps = [p for p in parts if p.startswith(split)]
        if not ps:
            continue
        held, hits = [], {n: [] for n in names}
        for part in ps:
            sdir = Path(dumps[names[0]][part]["sessions"])
            ids = [json.loads(line)["id"] for line in (sdir / "engine_sessions.jsonl").read_text().splitlines() if line]
            by_key = {(r["session"], r["turn"]): r for r in rows_of[worlds[part]]}
            first = dumps[names[0]][part]
            rows = [by_key[(int(ids[s]), t)] for s, t in first["where"].tolist()]
            for n in names:
                d = dumps[n][part]
                if not torch.equal(d["where"], first["where"]):
                    raise SystemExit(f"{n}_{part}: not the turns of {names[0]}_{part}")
                hits[n].append(d["logits"].argmax(-1).numpy() + 1)
            held += rows
        truth = np.array([r["motion_level"] for r in held])
        s_pred, p_pred = scene.predict(held), plain.predict(held)
        differ = s_pred != p_pred
        print(f"\n{split}: {len(held)} turns ({', '.join(ps)})")
        print(f"  lookup table                               {_se(np.array([table.predict(r) == r['motion_level'] for r in held], float))}")
        print(f"  additive, verb / adverb / stamina / cast   {_se((p_pred == truth).astype(float))}")
        print(f"  additive, + characters and place (scene)   {_se((s_pred == truth).astype(float))}")
        print(f"  turns where the two additive models differ: {int(differ.sum())}")
        base = None
        for n in names:
            pred = np.concatenate(hits[n])
            ok = (pred == truth).astype(float)
            line = f"  engine {n:<10} {_se(ok)}; sides with the scene model where they differ {float((pred == s_pred)[differ].mean()):.3f}"
            if base is not None:
                line += f"; minus {names[0]} (paired) {_se(ok - base)}"
            else:
                base = ok
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
