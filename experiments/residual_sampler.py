"""The residual sampler's data and its level read back (docs/layers.md, "A residual sampler over the drawing"; CorrDiff's
design: the regressor draws the mean, a diffusion model draws what the mean averaged away; the denoiser, its training
and sampling are experiments/residual_net.py):

    .venv/bin/python experiments/residual_sampler.py cache --world runs/data/e6000 --out RUNS/res_train.npz
    .venv/bin/python experiments/residual_sampler.py cache --world W9100 --n 200 --out RUNS/res_9100.npz
    .venv/bin/python experiments/residual_net.py train --cache RUNS/res_train.npz --steps 2000 --out RUNS/res
    .venv/bin/python experiments/residual_net.py sample --cache RUNS/res_9100.npz --run RUNS/res --out RUNS/s
    .venv/bin/python experiments/residual_sampler.py measure --cache RUNS/res_9100.npz --samples RUNS/s-*.npz --world W9100
    .venv/bin/python experiments/residual_sampler.py carry --world runs/data/e6000 --out .gpu/res_train.npz.xz

``cache``: the single-character shots of a world, each drawn by the shipped animator from standing (the shot's true
s_a and the world's level, as ``drawn_change.py``: frames 0-16 in one pass, as a scene starts in play; through
``residual_net.redraw``, as a device call redraws a carry), beside the
true track from phase 0; uint8 canvases (80 x 80, premultiplied RGBA), s_a (fp16).
``carry``: the same shots without the drawing, lzma-compressed, s_a kept as its motion text and f_v (E_a's input from
the staged first frame): about 18 KB a shot, for a device call (scripts/gpu_residual_sampler.sh) that redraws them.
``measure``: on held-out shots, each drawn (the regressor), sampled (``residual_net.py sample``) and true, read by the
level's measure pasted on the shot's place as play shows it (``measure_on_place.on_place``): the level read = the
world's, per verb log(true / drawn); the sample's noise (sharpness, Laplacian variance, over the truth's; L1 to the
truth).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.decoder.layered import scene_frame
from animegamer.decoder.pipeline import frames_from_uint8
from animegamer.evaluation import picture
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.world.flow import MotionQuantizer

sys.path.insert(0, str(Path(__file__).parent))
from drawn_change import staged_single  # noqa: E402  (sibling scripts: the same shots and stage)
from level_in_layers import setup  # noqa: E402
from measure_on_place import on_place, over_grey  # noqa: E402
from residual_net import read_npz, read_samples, redraw, write_npz  # noqa: E402

TRAVELS = {"fly_broom", "run", "jump", "walk", "fall"}  # verbs whose track moves the body over the stage (a jump's
#   height too: motions._jump's offset, not its pose); the canvas holds only the pose


@torch.no_grad()
def cache(world: str, n: int, out: str, carry: bool) -> None:
    """The world's single-character shots -> ``out`` (see the module's doc); ``carry``: without the drawing."""
    stage, animator, parts, _, wd, idx = setup(world, n, Path(DEFAULT_WEIGHTS), None)
    cols: dict[str, list] = collections.defaultdict(list)
    texts: dict[str, int] = {}
    cutouts: dict[str, tuple[int, np.ndarray]] = {}
    for row, track, scene, s_a, cutout in staged_single(stage, parts, wd, idx):
        f_v = parts.reference.patch_tokens(frames_from_uint8(scene_frame(stage, scene))[None].to(parts.device))
        if not cols["truth"]:  # the carry's s_a is rebuilt from its halves: check they make it
            again = torch.cat([parts.text_part([row["motion_text"]]), parts.encoder.visual(f_v)], dim=1)[0]
            assert torch.allclose(again.cpu(), s_a.cpu(), atol=1e-3), "s_a is not E_a's text part + visual(f_v)"
        who = cutouts.setdefault(track.name, (len(cutouts), cutout))
        assert np.array_equal(who[1], cutout), f"{track.name}: its standing cut-out differs between shots"
        if not carry:
            cols["s_a"].append(s_a.half().cpu().numpy())
        cols["truth"].append(track.rgba)
        cols["level"].append(int(row["motion_level"]))
        cols["verb"].append(row["motion"])
        cols["place"].append([row["place"], row["time"]])
        cols["text"].append(texts.setdefault(row["motion_text"], len(texts)))
        cols["who"].append(who[0])
        cols["f_v"].append(f_v[0].half().cpu().numpy())
    arrays = {k: np.stack(v) if k in ("truth", "s_a", "f_v") else np.array(v) for k, v in cols.items()}
    arrays["texts"] = np.array(list(texts))
    arrays["cutouts"] = np.stack([c for _, c in sorted(cutouts.values(), key=lambda v: v[0])])
    if not carry:  # the drawing as a device call redraws a carry: one path, the same pictures
        arrays["drawn"] = redraw(animator, arrays["cutouts"][arrays["who"]], torch.from_numpy(arrays["s_a"]),
                                 arrays["level"])
    write_npz(out, arrays)
    print(f"{len(arrays['truth'])} shots -> {out} ({Path(out).stat().st_size / 1e6:.1f} MB)")


def sharpness(frames: np.ndarray) -> float:
    """(T, H, W, 4) in [0, 1] -> the mean Laplacian variance of the canvas over grey (the evaluator's sharpness)."""
    return picture.sharpness(over_grey(frames))


def measure(cache_path: str, sample_files: list[str], world: str, out: str | None) -> None:
    stage = setup(world, 1, Path(DEFAULT_WEIGHTS), None)[0]
    quant = MotionQuantizer.load()
    z, sampled = read_npz(cache_path), read_samples(sample_files)
    if len(sampled) != len(z["drawn"]):
        raise SystemExit(f"{len(sampled)} shots sampled, {cache_path} holds {len(z['drawn'])}")
    rows, by_verb = [], collections.defaultdict(list)
    for k in tqdm(range(len(z["drawn"])), desc="shots"):
        row = {"place": str(z["place"][k][0]), "time": str(z["place"][k][1])}
        lv, verb = int(z["level"][k]), str(z["verb"][k])
        true, drawn = z["truth"][k] / 255.0, z["drawn"][k] / 255.0
        rec = {"verb": verb, "level": lv, "true": on_place(stage, row, true), "drawn": on_place(stage, row, drawn),
               "sharp_true": sharpness(true), "sharp_drawn": sharpness(drawn), "sampled": [], "sharp_sampled": [],
               "l1_drawn": float(np.abs(true - drawn).mean()), "l1_sampled": []}
        for x in sampled[k] / 255.0:
            rec["sampled"].append(on_place(stage, row, x))
            rec["sharp_sampled"].append(sharpness(x))
            rec["l1_sampled"].append(float(np.abs(true - x).mean()))
        rows.append(rec)
        by_verb[verb].append(rec)
    right = lambda key: [float(quant.level(r[key]) == r["level"]) for r in rows]  # noqa: E731
    samp = [float(quant.level(f) == r["level"]) for r in rows for f in r["sampled"]]
    paired = np.array([np.mean([quant.level(f) == r["level"] for f in r["sampled"]]) - (quant.level(r["drawn"]) == r["level"])
                       for r in rows])
    print(f"{len(rows)} shots; level read on the place = the world's: true {np.mean(right('true')):.3f}, drawn "
          f"{np.mean(right('drawn')):.3f}, sampled {np.mean(samp):.3f} (paired {paired.mean():+.3f} +/- "
          f"{paired.std(ddof=1) / math.sqrt(len(paired)):.3f})")
    still = np.array([r["verb"] not in TRAVELS for r in rows])
    print(f"in place ({still.sum()} shots; a travel's crossing of the stage is not on its canvas): true "
          f"{np.mean(np.array(right('true'))[still]):.3f}, drawn {np.mean(np.array(right('drawn'))[still]):.3f}, paired "
          f"sampled - drawn {paired[still].mean():+.3f} +/- {paired[still].std(ddof=1) / math.sqrt(still.sum()):.3f}")
    lg = lambda a, b: math.log(max(a, 0.05) / max(b, 0.05))  # noqa: E731
    print(f"sharpness over the truth's: drawn {np.mean([r['sharp_drawn'] for r in rows]) / np.mean([r['sharp_true'] for r in rows]):.3f}, "
          f"sampled {np.mean([np.mean(r['sharp_sampled']) for r in rows]) / np.mean([r['sharp_true'] for r in rows]):.3f}; "
          f"L1 to the truth: drawn {np.mean([r['l1_drawn'] for r in rows]):.4f}, sampled "
          f"{np.mean([np.mean(r['l1_sampled']) for r in rows]):.4f}")
    for verb, recs in sorted(by_verb.items()):
        print(f"{verb:10s} {len(recs):3d}  log(true/drawn) {np.mean([lg(r['true'], r['drawn']) for r in recs]):+.2f}  "
              f"log(true/sampled) {np.mean([lg(r['true'], f) for r in recs for f in r['sampled']]):+.2f}  right drawn "
              f"{np.mean([quant.level(r['drawn']) == r['level'] for r in recs]):.2f} sampled "
              f"{np.mean([quant.level(f) == r['level'] for r in recs for f in r['sampled']]):.2f}")
    if out:
        Path(out).write_text(json.dumps(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("cache", "carry"):
        c = sub.add_parser(name)
        c.add_argument("--world", required=True)
        c.add_argument("--n", type=int, default=100000, help="shots spread over the world (the single-character kept)")
        c.add_argument("--out", required=True, help="an .npz (cache) or .npz.xz (carry)")
    m = sub.add_parser("measure")
    m.add_argument("--cache", required=True)
    m.add_argument("--samples", required=True, nargs="+", help="residual_net.py sample's files of the same cache")
    m.add_argument("--world", required=True)
    m.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "measure":
        measure(a.cache, a.samples, a.world, a.out)
    else:
        cache(a.world, a.n, a.out, carry=a.cmd == "carry")


if __name__ == "__main__":
    main()
