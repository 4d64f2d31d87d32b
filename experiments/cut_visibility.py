"""How visible are the world's cuts at the level of pixels? (Issue: ingest's cut recall.)

    bin/animegamer world render --sessions 40 --turns 5 --seed 9200 --out runs/cuts/w9200
    .venv/bin/python experiments/cut_visibility.py runs/cuts/w9200 --out runs/cuts/cut_visibility_9200.json

For every change of drawing in the world's sessions played one after another (the ingest benchmark's
film, before it is held on threes and compressed), the motion-compensated change: DIS optical flow
from one drawing to the next, the next drawing warped back along it, and the mean absolute difference
that remains (grey levels). A drawing change inside a shot is mostly explained by the flow; a cut that
changes the scene is not. The question is where the cuts the detector misses, same-scene cuts, fall
among ordinary drawing changes: a cut whose remaining change is below what many drawing changes inside
shots show cannot be told from them by its pixels, whatever the detector.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from animegamer.core.atomic_io import write_json
from animegamer.ingest.bench import cut_kind
from animegamer.world.dataset import WorldDataset


def remaining_change(a: np.ndarray, b: np.ndarray, dis: cv2.DISOpticalFlow) -> float:
    """Grey frames a -> b: the mean absolute difference left after warping b back along the flow."""
    flow = dis.calc(a, b, None)
    h, w = a.shape
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    warped = cv2.remap(b, gx + flow[..., 0], gy + flow[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return float(np.abs(warped.astype(np.float32) - a.astype(np.float32)).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="a rendered world (world render --out)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    world = WorldDataset(a.data)
    rows = [r for s in world.sessions() for r in s]
    grey = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for r in rows for f in world.frames(r)]
    per_shot = world.meta["frames"]
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    change = np.array([remaining_change(grey[t - 1], grey[t], dis) for t in tqdm(range(1, len(grey)), desc="flow")])
    kind = {k * per_shot - 1: cut_kind(rows[k], rows[k - 1]) for k in range(1, len(rows))}
    inside = np.array([change[t] for t in range(len(change)) if t not in kind])
    p50, p90, p99 = (float(np.percentile(inside, q)) for q in (50, 90, 99))
    result = {"data": str(a.data), "drawing changes inside shots": len(inside), "cuts": len(kind),
              "inside shots: median / p90 / p99": [p50, p90, p99], "by kind": {}}
    for k in sorted(set(kind.values())):
        x = np.array([change[t] for t, v in kind.items() if v == k])
        result["by kind"][k] = {"cuts": len(x), "median": float(np.median(x)),
                                "below the inside-shot p90": int((x < p90).sum()),
                                "below the inside-shot median": int((x < p50).sum())}
    print(json.dumps(result, indent=1))
    if a.out:
        write_json(a.out, result)


if __name__ == "__main__":
    main()
