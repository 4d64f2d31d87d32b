"""How much the animator's drawing moves against its true track, verb by verb, on the canvas (docs/layers.md, "The
level as a place in its band"):

    .venv/bin/python experiments/drawn_change.py --world W9100 [--n 200] [--sprites RUN] [--out FILE.json]

W9100: the held-out world of `bin/animegamer eval --seed 9100 --out OUT` (OUT/world). For the single-character shots
among ``--n`` spread over the world, the animator draws frames 0-16 from the character standing, with the shot's true
s_a and the world's level, against the true track from phase 0 (``sprite_tracks.row_tracks(phase=0.0)``). Per verb:
the mean absolute change frame to frame, drawn over true (summed over the verb's shots), the whole body's sway
(the alpha centroid's spread over the frames, px), and the body head's affine against the world's (the canvas
centre's spread over the frames, px, and the head's error a frame). Overall: the same ratios, the median and mean
|log| of the per-shot change ratios. Below 1: the drawing moves less than the world would.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.decoder.sprite_animator import FrameCue, SpriteAnimator, to_unit, true_affine
from animegamer.decoder.stage import Stage
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.training.action_parts import ActionParts
from animegamer.world.dataset import WorldDataset
from animegamer.world.sprite_tracks import SpriteTrack, row_tracks, session_lengths

sys.path.insert(0, str(Path(__file__).parent))
from level_in_layers import setup, staged  # noqa: E402  (a sibling script: the same stage, world and shots)


def sway_and_change(frames: np.ndarray) -> tuple[float, float]:
    """(T, H, W, 4) in [0, 1] -> the alpha centroid's spread over frames (px), the mean absolute frame change."""
    alpha = frames[..., 3]
    ys, xs = np.mgrid[:alpha.shape[1], :alpha.shape[2]]
    mass = alpha.sum((1, 2)) + 1e-6
    cx, cy = (alpha * xs).sum((1, 2)) / mass, (alpha * ys).sum((1, 2)) / mass
    return float(np.sqrt(cx.var() + cy.var())), float(np.abs(np.diff(frames, axis=0)).mean())


def draw_from_standing(animator: SpriteAnimator, ref: torch.Tensor, s_a: torch.Tensor,
                       level: int) -> tuple[np.ndarray, torch.Tensor | None]:
    """Frames 0..T-1 drawn from the standing cut-out ``ref`` (1, 4, H, W) in one pass, as ``SpriteAnimator.draw``
    draws them (T, H, W, 4), and the body head's backward affines of the input (T, 2, 3; None without a body warp)."""
    t = animator.config.frames
    cue = FrameCue(s_a[None].float().repeat(t, 1, 1), torch.full((t,), level), torch.arange(t),
                   torch.zeros(t, dtype=torch.long), torch.zeros(t))
    with torch.no_grad():
        drawn, _, affines = animator.frame(ref.repeat(t, 1, 1, 1), ref.repeat(t, 1, 1, 1), cue, mode="bicubic")
    return drawn.permute(0, 2, 3, 1).numpy(), None if affines is None else affines[0]


def staged_single(stage: Stage, parts: ActionParts, world: WorldDataset, idx: np.ndarray,
                  ) -> Iterator[tuple[dict, SpriteTrack, dict, torch.Tensor, np.ndarray]]:
    """The single-character shots among ``idx`` as play starts them: (row, its true track from phase 0, the staged
    scene, the shot's true s_a, the character's standing cut-out (H, W, 4) uint8)."""
    lengths = session_lengths(world.rows)
    for i in tqdm(idx, desc="shots"):
        row = world.rows[i]
        if len(row["characters"]) != 1:
            continue
        track = row_tracks(row, lengths[(int(row["seed"]), int(row["session"]))], 17, phase=0.0)[0]
        scene, s_a, references = staged(stage, parts, row, [track.name])
        yield row, track, scene, s_a, references[track.name]


def single_shots(stage: Stage, animator: SpriteAnimator, parts: ActionParts, world: WorldDataset, idx: np.ndarray,
                 ) -> Iterator[tuple[dict, SpriteTrack, np.ndarray, torch.Tensor | None]]:
    """The single-character shots among ``idx``: (row, its true track from phase 0, the animator's drawing of it
    from standing at the shot's true s_a and the world's level (T, H, W, 4), the body head's affines)."""
    for row, track, _, s_a, cutout in staged_single(stage, parts, world, idx):
        ref = to_unit(torch.from_numpy(np.ascontiguousarray(cutout)))[None]
        yield (row, track, *draw_from_standing(animator, ref, s_a, int(row["motion_level"])))


def body_sway(animator: SpriteAnimator, affines: torch.Tensor | None, track: SpriteTrack) -> tuple[float, float, float]:
    """The body head's affines from standing against the world's: the canvas centre's spread over the frames (px),
    drawn and true, and the mean distance between the two a frame (px); zeros without a body warp."""
    if affines is None:
        return 0.0, 0.0, 0.0
    cfg, t = animator.config, animator.config.frames
    centre = torch.tensor([(cfg.width - 1) / 2, (cfg.height - 1) / 2, 1.0])
    drawn = affines @ centre
    standing = torch.from_numpy(track.standing_body)[None].repeat(t, 1, 1)
    true = true_affine(standing, torch.from_numpy(track.body)) @ centre
    return float(drawn.std(0).norm()), float(true.std(0).norm()), float((drawn - true).abs().sum(-1).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--sprites", default=None, help="a `train sprites` run (default: the shipped animator)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    stage, animator, parts, _, world, idx = setup(args.world, args.n, Path(DEFAULT_WEIGHTS), args.sprites)
    by_verb: dict[str, list[tuple[float, ...]]] = collections.defaultdict(list)
    for row, track, drawn, affines in single_shots(stage, animator, parts, world, idx):
        d_sway, d_change = sway_and_change(drawn)
        t_sway, t_change = sway_and_change(track.rgba.astype(np.float32) / 255)
        body = body_sway(animator, affines, track)
        by_verb[row["motion"]].append((d_sway, t_sway, d_change, t_change, *body))
    verbs = {}
    for verb, recs in sorted(by_verb.items()):
        r = np.array(recs)
        verbs[verb] = {"shots": len(r), "sway_drawn": float(r[:, 0].mean()), "sway_true": float(r[:, 1].mean()),
                       "change_ratio": float(r[:, 2].sum() / r[:, 3].sum()), "body_head_sway": float(r[:, 4].mean()),
                       "body_true_sway": float(r[:, 5].mean()), "body_head_error": float(r[:, 6].mean())}
        print(f"{verb:10s} {len(r):3d} shots  sway {r[:, 0].mean():5.2f} / {r[:, 1].mean():5.2f} px  "
              f"change drawn / true {verbs[verb]['change_ratio']:.2f}  body head {r[:, 4].mean():5.2f} / "
              f"{r[:, 5].mean():5.2f} px, error {r[:, 6].mean():.2f} px")
    r = np.concatenate([np.array(v) for v in by_verb.values()])
    logs = np.log(r[:, 2] / r[:, 3])
    out = {"shots": len(r), "change_ratio": float(r[:, 2].sum() / r[:, 3].sum()), "median_log": float(np.median(logs)),
           "mean_abs_log": float(np.abs(logs).mean()), "body_sway_ratio": float(r[:, 4].sum() / r[:, 5].sum()),
           "body_head_error": float(r[:, 6].mean()), "verbs": verbs}
    print(json.dumps({k: v for k, v in out.items() if k != "verbs"}))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
