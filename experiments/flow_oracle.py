"""How far can moving the first frame along a flow go? The ceiling of a decoder that warps a real picture.

    .venv/bin/python experiments/flow_oracle.py --data runs/data/picture_world --n 100 --out FILE.json

For held-out TRUE shots: the first frame warped along the true shot's own optical flow (frame k back to
frame 0, OpenCV DIS), at full resolution and at the decoder's latent grid (4x down, then up), graded as
`eval` grades a turn (the evaluator's verb, the motion level read from the pixels, who is on screen).
If this reads the verb and the level, a generator of flows (not pixels) can; if not, warping cannot.
"""
from __future__ import annotations

import argparse
import json

import cv2
import numpy as np
from tqdm.auto import tqdm

from animegamer.decoder.flow_motion import flows_to_first
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator
from animegamer.evaluation.metrics import motion_level_from_pixels
from animegamer.world.dataset import ShotDataset
from animegamer.world.flow import MotionQuantizer


def direct_flows(frames: np.ndarray) -> np.ndarray:
    """(T, H, W, 2): DIS from each frame straight back to frame 0 (frame 0: zeros)."""
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    g = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames]
    out = np.zeros((len(frames), *g[0].shape, 2), np.float32)
    for k in range(1, len(frames)):
        out[k] = dis.calc(g[k], g[0], None)
    return out


def warp_first(first: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """Bilinear, as these figures were measured (the game moves its pictures bicubic)."""
    h, w = first.shape[:2]
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    return np.stack([cv2.remap(first, xs + f[..., 0], ys + f[..., 1], cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE) for f in flows])


def coarse(flows: np.ndarray, factor: int = 4) -> np.ndarray:
    t, h, w, _ = flows.shape
    small = [cv2.resize(f, (w // factor, h // factor), interpolation=cv2.INTER_AREA) for f in flows]
    return np.stack([cv2.resize(s, (w, h), interpolation=cv2.INTER_LINEAR) for s in small])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    ev = Evaluator.load(DEFAULT_EVALUATOR)
    quant = MotionQuantizer.load()
    shots = ShotDataset(args.data, args.split, limit=args.n)
    variants = ("truth", "still", "direct", "chained", "chained_coarse4")
    res = {v: {"action": [], "level": [], "character": []} for v in variants}
    per_level = {v: {lv: [] for lv in range(1, 6)} for v in variants}
    for i in tqdm(range(len(shots)), desc="flow oracle"):
        row = shots.rows[i]
        true = np.asarray(shots[i]["frames"])
        chained = flows_to_first(true)
        clips = {"truth": true, "still": np.repeat(true[:1], len(true), 0),
                 "direct": warp_first(true[0], direct_flows(true)),
                 "chained": warp_first(true[0], chained),
                 "chained_coarse4": warp_first(true[0], coarse(chained))}
        truth_read = ev.frames.read_shot(true, len(row["characters"]))
        for v, clip in clips.items():
            level = motion_level_from_pixels(clip, quant)[0]
            res[v]["action"].append(float(ev.actions.predict(clip) == row["motion"]))
            res[v]["level"].append(float(level == int(row["motion_level"])))
            read = ev.frames.read_shot(clip, len(row["characters"]))
            res[v]["character"].append(float(set(read["characters"]) == set(row["characters"])))
            per_level[v][int(row["motion_level"])].append(res[v]["level"][-1])
        del truth_read
    report = {v: {k: float(np.mean(x)) for k, x in m.items()} | {
        "level_by_true_level": {str(lv): float(np.mean(x)) if x else None for lv, x in per_level[v].items()}}
        for v, m in res.items()}
    report["shots"] = len(shots)
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
