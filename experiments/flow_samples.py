"""What the motion network draws, against the true flows: how smooth, and how the moved picture compares.

    .venv/bin/python experiments/flow_samples.py --model runs/model_flow --data runs/data/picture_world \
        --cache runs/chain/cache_train100 --n 30 --out FILE.json --sheet FILE.png

For held-out shots (the cache's true s_a, as `eval-decoder`): the first frame moved along the true flows
and along the drawn ones under each post-processing variant; per variant the PSNR of the moved frames
against the true shot, the flows' spatial roughness (mean |gradient| over the latent grid, against the
true flows') and the level read from the pixels.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

import cv2
import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.decoder.flow_motion import FlowCodec, flows_to_first, warp_picture
from animegamer.decoder.motion_control import steer
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.evaluation.metrics import motion_level_from_pixels
from animegamer.training.shot_cache import CachedShots
from animegamer.world.dataset import ShotDataset
from animegamer.world.flow import MotionQuantizer
from animegamer.world.preview import save_png, shot_strip, stack_strips


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float32) - b.astype(np.float32)) ** 2).mean())
    return 10 * np.log10(255 ** 2 / max(mse, 1e-6))


def roughness(flows: np.ndarray, s: int = 4) -> float:
    t, h, w, _ = flows.shape
    small = np.stack([cv2.resize(f, (w // s, h // s), interpolation=cv2.INTER_AREA) for f in flows[1:]]) / s
    return float(np.abs(np.diff(small, axis=1)).mean() + np.abs(np.diff(small, axis=2)).mean())


def temporal_fit(flows: np.ndarray, order: int = 2) -> np.ndarray:
    """Each pixel's path over the shot as a polynomial in k through 0 (frame 0 has no flow)."""
    t = len(flows)
    k = np.arange(1, t, dtype=np.float32)
    x = np.stack([k ** (j + 1) for j in range(order)], 1)  # (T-1, order)
    y = flows[1:].reshape(t - 1, -1)
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    out = flows.copy()
    out[1:] = (x @ coef).reshape(flows[1:].shape)
    return out


def spatial_blur(flows: np.ndarray, sigma: float) -> np.ndarray:
    return np.stack([cv2.GaussianBlur(f, (0, 0), sigma) for f in flows])


POST = {"fit2": lambda f: temporal_fit(f, 2), "fit1": lambda f: temporal_fit(f, 1),
        "blur4": lambda f: spatial_blur(f, 4.0), "blur8": lambda f: spatial_blur(f, 8.0),
        "fit2_blur4": lambda f: spatial_blur(temporal_fit(f, 2), 4.0),
        "fit2_blur8": lambda f: spatial_blur(temporal_fit(f, 2), 8.0), "blur12": lambda f: spatial_blur(f, 12.0),
        "blur8x1.3": lambda f: spatial_blur(f, 8.0) * 1.3, "fit2_blur8x1.3": lambda f: spatial_blur(temporal_fit(f, 2), 8.0) * 1.3}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--cache", required=True)
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--steps", default="6,20")
    p.add_argument("--guidance", default="1,2")
    p.add_argument("--control", type=float, default=None, help="steer each moved shot's level, flows scaled <= this")
    p.add_argument("--only", default=None, help="comma-separated post-processing variants (default: all)")
    p.add_argument("--out", default=None)
    p.add_argument("--sheet", default=None)
    args = p.parse_args()
    torch.set_num_threads(2)
    dec = ShotDecoder.from_pretrained(f"{args.model}/shot_decoder")
    codec = FlowCodec.for_autoencoder(dec.autoencoder)
    cache = CachedShots(args.cache)
    shots = ShotDataset(args.data, cache.meta["split"])
    by_shot = {r["shot"]: i for i, r in enumerate(shots.rows)}
    quant = MotionQuantizer.load()
    variants = ["true"] + [f"s{s}_g{g}" for s in args.steps.split(",") for g in args.guidance.split(",")]
    variants += [f"{variants[1]}+{k}" for k in POST if args.only is None or k in args.only.split(",")]
    res = {v: {"psnr": [], "rough": [], "level": []} for v in variants}
    rows_sheet = []
    for i in tqdm(range(min(args.n, len(cache)))):
        item = cache[i]
        row = shots.rows[int(cache.tensors["index"][i])]
        true = np.asarray(shots[by_shot[row["shot"]]]["frames"])
        level = int(item["motion_level"])
        with torch.no_grad():
            s_a = dec.net.action_encoder(item["f_md"][None], item["f_v"][None])
        flows = {"true": codec.unpack(codec.pack(flows_to_first(true))[None], true.shape[1:3])[0]}
        for v in variants[1:]:
            if "+" in v:
                base, post = v.split("+")
                flows[v] = POST[post](flows[base])
                continue
            s, g = (float(x[1:]) for x in v.split("_"))
            sampler = dataclasses.replace(dec.motion.sampler, steps=int(s), guidance=g)
            flows[v] = dec.motion.sample_flows(s_a, torch.tensor([level]), codec, true.shape[1:3],
                                               torch.Generator().manual_seed(i), sampler)[0]
        strips = []
        for v, f in flows.items():
            moved = warp_picture(true[0], f)
            if args.control and v != "true":
                moved = steer(moved, level, args.control, lambda r, f=f: warp_picture(true[0], f * r))
            res[v]["psnr"].append(psnr(moved[1:], true[1:]))
            res[v]["rough"].append(roughness(f))
            res[v]["level"].append(float(motion_level_from_pixels(moved, quant)[0] == level))
            strips.append(shot_strip(moved))
        if i < 8:
            rows_sheet.append(np.concatenate(strips + [shot_strip(true, row)], axis=1))
    report = {v: {k: float(np.mean(x)) for k, x in m.items()} for v, m in res.items()}
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)
    if args.sheet:
        save_png(stack_strips(rows_sheet), args.sheet)


if __name__ == "__main__":
    main()
