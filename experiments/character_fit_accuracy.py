"""How well `world/character_fit.py` reads a character's parameters back from a picture of it.

    .venv/bin/python experiments/character_fit_accuracy.py --n 40 --out runs/character_fit_accuracy.json

For ``n`` held-out drawn characters (never in any training), the picture is the character's reference
sheet as a player would upload it again (enlarged to 300 x 300 and stored as JPEG at quality 80), in two
layouts: ``sheet`` (the whole sheet) and ``crop`` (cropped close around the figure, on white, so the
height does not show). Reported per layout: exact hair style, outfit and accessory set; the colour error
(mean absolute per channel, 0-255) of hair, top and skin; the height error; the fit's own error; seconds
per fit (mean and max) on this machine. Page: docs/results.md#your-own-characters.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from animegamer.core.atomic_io import write_json
from animegamer.game.characters import figure_mask
from animegamer.world.character_fit import fit_character
from animegamer.world.character_gen import held_out_characters, random_character, reference_sheet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from custom_character_probe import reuploaded  # noqa: E402  (the probe's "uploaded again" picture)


def close_crop(picture: np.ndarray, margin: int = 8) -> np.ndarray:
    ys, xs = np.nonzero(figure_mask(picture))
    crop = picture[max(0, ys.min() - margin):ys.max() + margin, max(0, xs.min() - margin):xs.max() + margin].copy()
    crop[figure_mask(crop) == 0] = 255
    return crop


def measure(n: int, layout: str) -> dict:
    rows = []
    for i, true in enumerate(tqdm(held_out_characters(n), desc=layout)):
        picture = reuploaded(reference_sheet(true, 256))
        if layout == "crop":
            picture = close_crop(picture)
        fit = fit_character(picture, figure_mask(picture), random_character(12345 + i, true.name))
        got = fit.spec
        rows.append({"character": true.name, "hair style": got.hair_style == true.hair_style,
                     "outfit": got.outfit_type == true.outfit_type,
                     "accessories": sorted(a.type for a in got.accessories) == sorted(a.type for a in true.accessories),
                     **{f"{k} error": float(np.abs(np.subtract(getattr(got, k), getattr(true, k))).mean())
                        for k in ("hair_color", "top", "skin")},
                     "height error": abs(got.height - true.height), "fit error": fit.error, "seconds": fit.seconds})
    keys = [k for k in rows[0] if k != "character"]
    return {"characters": n, **{k: float(np.mean([r[k] for r in rows])) for k in keys},
            "seconds max": float(max(r["seconds"] for r in rows)), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    result = {layout: measure(a.n, layout) for layout in ("sheet", "crop")}
    print(json.dumps({k: {m: v for m, v in r.items() if m != "rows"} for k, r in result.items()}, indent=1))
    if a.out:
        write_json(a.out, result)


if __name__ == "__main__":
    main()
