"""Write a cast sheet: every character side by side (default look + outfit variants).

    python scripts/cast_sheet.py [--out /tmp/cast_sheet.png] [--size 144] [--variants]
"""
from __future__ import annotations

import argparse

import cv2
import numpy as np

from animegamer.world.cast import load_cast, look_for_variant
from animegamer.world.character_art import character_portrait


def cast_sheet(size: int = 144, variants: bool = False) -> np.ndarray:
    cast = load_cast()
    rows = []
    n_var = 1 + (max(len(s.outfit_variants) for s in cast.values()) if variants else 0)
    for v in range(n_var):
        tiles = []
        for spec in cast.values():
            if v <= len(spec.outfit_variants):
                tile = character_portrait(spec, look_for_variant(spec, v), size)
            else:
                tile = np.full((size, size, 3), 230, np.uint8)
            if v == 0:
                cv2.putText(tile, spec.name, (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (40, 30, 50), 1, cv2.LINE_AA)
            tiles.append(tile)
        rows.append(np.concatenate(tiles, 1))
    return np.concatenate(rows, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="/tmp/cast_sheet.png")
    ap.add_argument("--size", type=int, default=144)
    ap.add_argument("--variants", action="store_true", help="one row per outfit variant")
    a = ap.parse_args()
    img = cast_sheet(a.size, a.variants)
    cv2.imwrite(a.out, cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    print(f"wrote {a.out} ({img.shape[1]}x{img.shape[0]})")


if __name__ == "__main__":
    main()
