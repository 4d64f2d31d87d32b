"""How well clips are named by reference pictures (evaluation/character_match.py, `annotate --references`).

    bin/animegamer world render --sessions 40 --turns 5 --seed 9400 --cast CAST.yaml --out runs/match/held_world
    .venv/bin/python experiments/reference_match.py runs/match/held_world --cast CAST.yaml --out result.json

``--cast``: the cast file the world was rendered with (default: the world's own 10). Each character's
reference sheet, as a player would upload it again (the probe's `reuploaded`), is the reference picture;
every clip of the world (up to ``--clips``) is named by the gallery and compared with the world's own
labels: the first name right (the nearest reference is one of the clip's characters), the exact set,
and name precision / recall. ``--held-out-cast N`` writes a cast of N drawn characters never used in any
training (seeds from HELD_OUT_SEED + 500) to the file given by --cast first.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from animegamer.core.atomic_io import write_json, write_text
from animegamer.evaluation.character_match import ReferenceGallery
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.world.cast import load_cast, parse_cast
from animegamer.world.character_gen import HELD_OUT_SEED, character_entry, random_character, reference_sheet
from animegamer.world.dataset import WorldDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from custom_character_probe import reuploaded  # noqa: E402

NAMES = ["Ash", "Bea", "Cy", "Dee", "Eli", "Fay", "Gus", "Ivy", "Kai", "Liv", "Max", "Nia"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=None, help="a rendered world")
    ap.add_argument("--cast", default=None)
    ap.add_argument("--held-out-cast", type=int, default=None, metavar="N")
    ap.add_argument("--reid", default=str(DEFAULT_EVALUATOR / REID_DIR))
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.held_out_cast:
        cast = {n: character_entry(random_character(HELD_OUT_SEED + 500 + i, n))
                for i, n in enumerate(NAMES[:a.held_out_cast])}
        write_text(a.cast, yaml.safe_dump({"characters": cast}, sort_keys=False))
        print(f"wrote {a.cast}; render a world with it (world render --cast {a.cast}), then run this on it")
        return
    specs = parse_cast(yaml.safe_load(Path(a.cast).read_text()), a.cast) if a.cast else load_cast()
    gallery = ReferenceGallery.from_pictures({n: reuploaded(reference_sheet(s, 256)) for n, s in specs.items()},
                                             CharacterReID.from_pretrained(a.reid), progress=True)
    world = WorldDataset(a.data)
    rows = world.rows[:a.clips]
    first = exact = hit = named = true = 0
    for r in tqdm(rows, desc="clips"):
        who, _ = gallery.name(world.frames(r))
        first += who[0] in r["characters"]
        exact += set(who) == set(r["characters"])
        hit += len(set(who) & set(r["characters"]))
        named += len(who)
        true += len(r["characters"])
    n = len(rows)
    result = {"data": a.data, "cast": a.cast or "the world's", "references": len(specs), "clips": n,
              "first name right": first / n, "first name standard error": float(np.sqrt(first / n * (1 - first / n) / n)),
              "exact set": exact / n, "precision": hit / named, "recall": hit / true,
              "two-character clips": sum(len(r["characters"]) == 2 for r in rows),
              "fit errors": gallery.fit_errors, "reid": a.reid}
    print(json.dumps(result, indent=1))
    if a.out:
        write_json(a.out, result)


if __name__ == "__main__":
    main()
