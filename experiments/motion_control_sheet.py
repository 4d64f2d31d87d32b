"""What one system changes against another: the turns of one `animegamer eval` where a column differs
between the two (by default the level the decoded pixels read), first / middle / last frame of each
side by side, and the true shot.

    .venv/bin/python experiments/motion_control_sheet.py EVAL_DIR --base animegamer --system mc3 \
        --out docs/images/motion_control_contact_sheet.jpg [--turns 12] [--by anchor]

Rows are labelled with the engine's level and the level (and flow) the pixels read for each system; with
``--by anchor`` (the turns drawn from another kind of anchor) with the true verb and whether the
evaluator's action classifier named it for each system.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from animegamer.game.store import SessionStore, frames_of
from animegamer.world.dataset import WorldDataset


def rows_of(eval_dir: Path, system: str) -> dict[tuple[int, int], dict]:
    lines = (eval_dir / "systems" / f"{system}.jsonl").read_text().splitlines()
    return {(r["session"], r["turn"]): r for r in map(json.loads, filter(None, lines))}


def clips_of(eval_dir: Path, system: str, world_sessions: list[int]) -> dict[tuple[int, int], Path]:
    store = SessionStore(eval_dir / "games" / system, clean=False)
    saved = sorted(store.list_sessions(), key=lambda r: r.created_at)  # played in the order of the world's sessions
    return {(w, t.idx): t.clip for w, s in zip(world_sessions, saved) for t in store.load_turns(s.id)}


def three(frames: np.ndarray) -> np.ndarray:
    return np.concatenate([frames[0], frames[len(frames) // 2], frames[-1]], axis=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_dir", type=Path)
    ap.add_argument("--base", default="animegamer")
    ap.add_argument("--system", required=True)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--by", default="ml_pixels", help="the per-turn column that must differ (default ml_pixels)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    base, other = rows_of(args.eval_dir, args.base), rows_of(args.eval_dir, args.system)
    changed = [k for k in sorted(base) if k in other and base[k].get(args.by) != other[k].get(args.by)]
    print(f"{len(changed)} of {len(base)} turns differ in {args.by} with {args.system}")
    world = WorldDataset(args.eval_dir / "world")
    truth = {(r["session"], r["turn"]): r for r in world.rows}
    sessions = sorted({r["session"] for r in world.rows})
    clip_a, clip_b = clips_of(args.eval_dir, args.base, sessions), clips_of(args.eval_dir, args.system, sessions)
    pieces = []
    for key in changed[:args.turns]:
        a, b = frames_of(clip_a[key]), frames_of(clip_b[key])
        t = world.frames(truth[key])
        strip = np.concatenate([three(a), np.full((a.shape[1], 6, 3), 255, np.uint8), three(b),
                                np.full((a.shape[1], 6, 3), 255, np.uint8), three(t)], axis=1)
        label = np.full((14, strip.shape[1], 3), 255, np.uint8)
        img = Image.fromarray(label)
        text = (f"engine level {base[key]['ml_engine']} | {args.base}: reads {base[key]['ml_pixels']} "
                f"(flow {base[key]['flow']:.2f}) | {args.system}: reads {other[key]['ml_pixels']} "
                f"(flow {other[key]['flow']:.2f}) | truth: level {base[key]['ml_true']}")
        if args.by != "ml_pixels":
            named = {1.0: "named", 0.0: "not named"}
            text = (f"{truth[key]['motion']}: \"{truth[key]['instruction'][:70]}\" | {args.base}: {base[key].get('anchor')}, "
                    f"{named.get(base[key].get('action_acc'), '?')} | {args.system}: {other[key].get('anchor')}, "
                    f"{named.get(other[key].get('action_acc'), '?')}")
        ImageDraw.Draw(img).text((2, 1), text, fill=(0, 0, 0))
        pieces += [np.asarray(img), strip]
    sheet = np.concatenate(pieces, axis=0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(sheet).save(args.out, quality=88)
    print(f"wrote {args.out} ({sheet.shape[1]} x {sheet.shape[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
