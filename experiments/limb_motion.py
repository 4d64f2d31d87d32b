"""Is a quiet gesture drawn calm because the animator moves its limb too little, or because it paints it?
(docs/layers.md, "The limb's own motion"):

    .venv/bin/python experiments/limb_motion.py --world W9100 [--n 200] [--sprites RUN]

W9100: the held-out world of `bin/animegamer eval --seed 9100 --out OUT` (OUT/world). For the single-character shots
among ``--n`` spread over the world, the animator draws frames 0-16 from the character standing (the shot's true
s_a, the world's level; as ``drawn_change.py``). Three readings of each frame pair's fastest motion (the canvas's
138th fastest pixel, as many as a frame's 1 %, as ``measure_on_place.on_grey``), a shot's the mean over its pairs:
the true track's DIS flow over grey (truth); the motion the animator means, from its own warps (where each pixel of
frame t + 1 takes its picture from against frame t, through the body's affine and the per-pixel flow, weighed by the
share the mix gives the moved input and the moved reference; painted pixels count still); and its drawing's DIS flow
over grey. Also the share of the mix that is paint on the pixels where the true track changes, where the input and
the reference are both shown and how far apart their warps take the picture, the edges' softness, and two readings
of the change at play's scale: the level's measure on the shot's place (as ``measure_on_place.py``) and the canvas
average-pooled x4, each pair's 5 % largest changes. Per verb: the mean of log(truth / each); above 0 calmer than the
truth; then how each canvas reading correlates per shot with the reading on the place.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from animegamer.decoder.sprite_animator import FrameCue, SpriteAnimator, body_affines, to_unit
from animegamer.game.session import DEFAULT_WEIGHTS

sys.path.insert(0, str(Path(__file__).parent))
from drawn_change import single_shots  # noqa: E402  (sibling scripts: the same drawings, stage and shots)
from level_in_layers import setup, staged  # noqa: E402
from measure_on_place import FLOOR, RANK, on_grey, on_place  # noqa: E402

EDGE = 0.1  # half the colour step across a pixel's neighbours (of 1) that counts as an edge


def sources(affine: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """Where each pixel takes its picture from (T, 2, H, W), pixels: ``unet_blocks.warp``'s sampling positions."""
    t, _, h, w = flow.shape
    ys, xs = torch.meshgrid(torch.arange(h, dtype=flow.dtype), torch.arange(w, dtype=flow.dtype), indexing="ij")
    px, py = xs + flow[:, 0], ys + flow[:, 1]
    a = affine[:, :, :, None, None]
    return torch.stack([a[:, 0, 0] * px + a[:, 0, 1] * py + a[:, 0, 2], a[:, 1, 0] * px + a[:, 1, 1] * py + a[:, 1, 2]],
                       dim=1)


@torch.no_grad()
def meant_motion(animator: SpriteAnimator, ref: torch.Tensor, s_a: torch.Tensor, level: int,
                 true: np.ndarray, drawn: np.ndarray) -> tuple[float, float, float, float]:
    """The motion the animator means drawing frames 0..T-1 (``drawn`` (T, H, W, 4)) from standing (px a frame, mean
    over pairs of the RANK-th fastest pixel of the mix-weighted move of its warps' sources, on the drawing's edges),
    the paint's share of the mix where the true track (T, H, W, 4) in [0, 1] changes, the share of pixels showing
    both the moved input and the moved reference and how far apart their sources are there (px)."""
    cfg, t = animator.config, animator.config.frames
    cue = FrameCue(s_a[None].float().repeat(t, 1, 1), torch.full((t,), level), torch.arange(t),
                   torch.zeros(t, dtype=torch.long), torch.zeros(t))
    inp = ref.repeat(t, 1, 1, 1) * 2 - 1
    _, flow, mask, _, ref_flow, ref_mask, body = animator.net(inp, inp, cue.s_a, cue.level, cue.index, cue.role, cue.aug)
    a_in, a_ref = body_affines(body, cfg.height, cfg.width, cfg.offset_scale)
    w = torch.softmax(torch.cat([torch.zeros_like(mask), mask, ref_mask], dim=1).float(), dim=1)
    s_in, s_ref = sources(a_in, flow.float() * cfg.flow_scale), sources(a_ref, ref_flow.float() * cfg.flow_scale)
    move = (w[1:, :1] * (s_in[1:] - s_in[:-1]).norm(dim=1, keepdim=True)
            + w[1:, 2:] * (s_ref[1:] - s_ref[:-1]).norm(dim=1, keepdim=True))[:, 0]  # (T-1, H, W)
    # only where the drawing has an edge: a flow inside a flat patch of colour moves nothing a viewer (or DIS) sees
    pic = torch.from_numpy(np.ascontiguousarray(drawn[1:])).permute(0, 3, 1, 2)  # (T-1, 4, H, W)
    gx = F.pad((pic[..., :, 2:] - pic[..., :, :-2]).abs().amax(1), (1, 1)) / 2
    gy = F.pad((pic[..., 2:, :] - pic[..., :-2, :]).abs().amax(1), (0, 0, 1, 1)) / 2
    move = move * (torch.maximum(gx, gy) > EDGE)
    speeds = move.flatten(1).sort(dim=1).values[:, -RANK]
    changing = torch.from_numpy(np.abs(np.diff(true, axis=0)).max(-1) > 0.05)  # (T-1, H, W)
    paint = float(w[1:, 1][changing].mean()) if changing.any() else float("nan")
    # where the input and the reference are both shown (each >= 0.2), how far apart their warps take the picture:
    # two copies of a limb a few pixels apart read as one faint blur
    both = (w[:, 0] >= 0.2) & (w[:, 2] >= 0.2)
    split = float((s_in - s_ref).norm(dim=1)[both].mean()) if both.any() else 0.0
    return float(speeds.mean()), paint, float(both.float().mean()), split


def edge_ratio(true: np.ndarray, drawn: np.ndarray) -> float:
    """log of the true track's mean edge strength (the largest colour step to a neighbour, over its pixels with any
    alpha) over the drawing's: above 0 the drawing is softer."""
    def edges(x: np.ndarray) -> float:
        g = np.maximum(np.abs(np.diff(x, axis=1))[:, :, :-1].max(-1), np.abs(np.diff(x, axis=2))[:, :-1].max(-1))
        return float(g[x[:, :-1, :-1, 3] > 0.05].mean())
    return float(np.log(edges(true) / edges(drawn)))


def pooled_change(frames: np.ndarray, pool: int = 4, share: float = 0.05) -> float:
    """(T, H, W, 4) in [0, 1] -> the mean over pairs of their ``share`` largest changes (max over channels) on the
    canvas average-pooled ``pool`` x: frame-to-frame change at about play's scale, flicker smoothed away."""
    x = F.avg_pool2d(torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2), pool)
    d = (x[1:] - x[:-1]).abs().amax(1).flatten(1)
    return float(d.topk(max(1, int(d.shape[1] * share)), dim=1).values.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--sprites", default=None, help="a `train sprites` run (default: the shipped animator)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    stage, animator, parts, _, world, idx = setup(args.world, args.n, Path(DEFAULT_WEIGHTS), args.sprites)
    by_verb: dict[str, list[tuple[float, ...]]] = collections.defaultdict(list)
    for row, track, drawn, _ in single_shots(stage, animator, parts, world, idx):
        true = track.rgba.astype(np.float32) / 255
        _, s_a, references = staged(stage, parts, row, [track.name])
        ref = to_unit(torch.from_numpy(np.ascontiguousarray(references[track.name])))[None]
        meant, paint, both, split = meant_motion(animator, ref, s_a, int(row["motion_level"]), true, drawn)
        truth = max(on_grey(true), FLOOR)
        place = [max(on_place(stage, row, x), FLOOR) for x in (true, drawn)]
        pooled = [max(pooled_change(x), 1e-3) for x in (true, drawn)]
        mean = [max(float(np.abs(np.diff(x, axis=0)).mean()), 1e-4) for x in (true, drawn)]
        by_verb[row["motion"]].append((np.log(truth / max(meant, FLOOR)), np.log(truth / max(on_grey(drawn), FLOOR)),
                                       paint, both, split, edge_ratio(true, drawn), np.log(place[0] / place[1]),
                                       np.log(pooled[0] / pooled[1]), np.log(mean[0] / mean[1])))
    print("verb       shots  log(truth/meant)  log(truth/drawn DIS)  paint@change  both shown  split px  log(edge t/d)"
          "  on place  pooled x4")
    every = [x for recs in by_verb.values() for x in recs]
    for verb, recs in sorted(by_verb.items()) + [("all", every)]:
        m = np.nanmean(np.array(recs), axis=0)
        print(f"{verb:10s} {len(recs):5d}  {m[0]:+16.2f}  {m[1]:+20.2f}  {m[2]:12.2f}  {m[3]:10.2f}  {m[4]:8.2f}  "
              f"{m[5]:+13.2f}  {m[6]:+8.2f}  {m[7]:+9.2f}")
    r = np.array(every)
    for name, col in (("the warps' meant motion", 0), ("DIS over grey", 1), ("pooled x4, 5 % largest", 7),
                      ("full-resolution mean change", 8)):
        print(f"per shot, log(truth / drawn) on the place against {name}: correlation "
              f"{np.corrcoef(r[:, 6], r[:, col])[0, 1]:.2f}")


if __name__ == "__main__":
    main()
