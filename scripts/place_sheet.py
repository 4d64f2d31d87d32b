"""Contact sheet of every place x (day, sunset, night) with sampled props.

    python scripts/place_sheet.py --out /tmp/place_sheet.png [--height 96 --width 144 --scale 1]
        [--supersample 2] [--camera 0.5] [--seed 0] [--pan]

--supersample renders at k x the size and downsamples (INTER_AREA) like the shot composer does.
--pan adds columns at camera 0 and 1 (day) to check parallax.
--props draws a gallery instead: every prop kind of every place, one colour per cell, day and night.
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np

from animegamer.world.place_art import (
    PLACE_KEYS, TIMES, PlaceScene, PropInstance, describe_props, load_places, sample_props,
)


def render_cell(spec, t, props, h, w, ss, cam, seed):
    scene = PlaceScene(spec, t, props, h * ss, w * ss, seed=seed)
    img = scene.render(cam)
    img = scene.render_foreground(img, cam)
    if ss > 1:
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    return img


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/place_sheet.png")
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--width", type=int, default=144)
    ap.add_argument("--supersample", type=int, default=2)
    ap.add_argument("--scale", type=int, default=1, help="nearest-neighbour upscale of the final sheet")
    ap.add_argument("--camera", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pan", action="store_true")
    ap.add_argument("--props", action="store_true")
    a = ap.parse_args()
    places = load_places()
    if a.props:
        return prop_gallery(places, a)
    rows = []
    t0 = time.perf_counter()
    for i, key in enumerate(PLACE_KEYS):
        spec = places[key]
        props = sample_props(spec, np.random.default_rng(a.seed * 100 + i), n=3)
        cells = [render_cell(spec, t, props, a.height, a.width, a.supersample, a.camera, a.seed) for t in TIMES]
        if a.pan:
            cells += [render_cell(spec, "day", props, a.height, a.width, a.supersample, c, a.seed) for c in (0.0, 1.0)]
        sep = np.full((a.height, 2, 3), 255, np.uint8)
        row = np.concatenate(sum(([c, sep] for c in cells), [])[:-1], axis=1)
        label = f"{key}: {', '.join(describe_props(props))}"
        bar = np.full((12, row.shape[1], 3), 255, np.uint8)
        cv2.putText(bar, label, (2, 9), cv2.FONT_HERSHEY_PLAIN, 0.7, (30, 30, 30), 1, cv2.LINE_AA)
        rows += [bar, row]
    sheet = np.concatenate(rows, axis=0)
    if a.scale > 1:
        sheet = cv2.resize(sheet, None, fx=a.scale, fy=a.scale, interpolation=cv2.INTER_NEAREST)
    cv2.imwrite(a.out, cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    print(f"wrote {a.out} {sheet.shape[1]}x{sheet.shape[0]} in {time.perf_counter() - t0:.1f}s")


def prop_gallery(places, a) -> None:
    cells, per_row = [], 8
    for key in PLACE_KEYS:
        spec = places[key]
        for kind, opts in spec.props.items():
            kd = spec.prop_kinds[kind]
            for t in ("day", "night"):
                col = opts[(len(cells) // 2) % len(opts)]
                p = PropInstance(kind, "" if kd["colorless"] else col, 0.5, kd["layer"], kd["display"])
                img = render_cell(spec, t, [p], a.height, a.width, a.supersample, 0.5, a.seed)
                cv2.putText(img, f"{key[:5]} {p.describe()}"[:26], (2, 9), cv2.FONT_HERSHEY_PLAIN, 0.6, (0, 0, 0), 1, cv2.LINE_AA)
                cells.append(img)
    while len(cells) % per_row:
        cells.append(np.zeros_like(cells[0]))
    rows = [np.concatenate(cells[i:i + per_row], axis=1) for i in range(0, len(cells), per_row)]
    sheet = np.concatenate(rows, axis=0)
    cv2.imwrite(a.out, cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    print(f"wrote {a.out} {sheet.shape[1]}x{sheet.shape[0]} ({len(cells)} cells)")


if __name__ == "__main__":
    main()
