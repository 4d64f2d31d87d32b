"""Can FrameNet read its noisy input? Packing designs compared on one protocol (docs/framenet.md).

    .venv/bin/python experiments/framenet_bottleneck.py --train runs/data/train400 --test runs/data/w9100 \
        --steps 150 --out docs/framenet/bottleneck.json

Each design trains from scratch for --steps steps (batch 8, the same shots, crops and noise for every design)
on 48 x 48 crops around each shot's largest change, with the change parametrization (D = first + 0.5 F) or EDM
on the change from the first frame ("residual": D = first + c_skip r + c_out F, r = x - first).
Graded on held-out crops: the MSE of D(x; sigma) at each sigma, paired per crop against copying the first
frame. A network that can read its input reaches about sigma^2 at small sigma (the input itself is that
close); one whose first level is too narrow for the values it packs stays near the copy's error. Then a shot
drawn with each parametrization's sampler: its MSE to the truth and its sharpness (eval's) over
the truth's (1 = as sharp, below blurred, far above noisy). --save-dir keeps each design's weights as a
FrameNet run that draws whole frames.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from animegamer.decoder.frame_diffusion import EDMConfig, FrameDenoiser, FrameSamplerConfig, sample_frames
from animegamer.decoder.frame_net import FrameNet, frame_net_preset
from animegamer.decoder.pipeline import frames_from_uint8
from animegamer.evaluation.picture import sharpness
from animegamer.training.framenet_data import ActionParts
from animegamer.world.dataset import WorldDataset

# The packing trained on the GPU (4 frames a map, first level 96: 192 values a cell into 96 channels) is refused
# by FrameNetConfig since this comparison (its row in docs/framenet.md was measured at commit ec9984d+).
DESIGNS = {
    "group2_w128": dict(group=2, channels=(128, 160, 224)),  # 96 values into 128
    "group1_w64": dict(group=1, channels=(64, 128, 192)),  # 48 values into 64 (DIAMOND: a frame a map)
    # the same network, EDM on the change from the first frame (skip path, preconditioning at the change's scale)
    "group1_w64_residual": dict(group=1, channels=(64, 128, 192),
                                edm=dict(prediction="residual", sigma_data=0.25, p_mean=-1.2, p_std=1.2)),
}
# how each parametrization draws (its own noise range): "change" as eval-drawn graded it, "residual" DIAMOND's
SAMPLERS = {"change": FrameSamplerConfig(steps=1, sigma_max=5.0, sigma_min=0.2, aug=0.0),
            "residual": FrameSamplerConfig(steps=3, sigma_max=5.0, sigma_min=0.002, aug=0.0)}
SIGMAS = (0.05, 0.2, 0.5, 1.0)
CROP = 48


def crops(world: WorldDataset, rows: list[dict], parts: ActionParts) -> dict[str, torch.Tensor]:
    """Each shot cropped to CROP x CROP around where it changes most, with its s_a and level."""
    frames, first_full = [], []
    for r in rows:
        f = world.frames(r)  # (T, H, W, 3) uint8
        change = np.abs(f[1:].astype(np.int16) - f[:1]).sum(axis=(0, 3))  # (H, W)
        k = np.ones(CROP) / CROP
        score = np.apply_along_axis(lambda v: np.convolve(v, k, "valid"), 1, change)
        score = np.apply_along_axis(lambda v: np.convolve(v, k, "valid"), 0, score)
        y, x = np.unravel_index(np.argmax(score), score.shape)
        frames.append(frames_from_uint8(f[:, y:y + CROP, x:x + CROP]))
        first_full.append(frames_from_uint8(f[0]))
    s_a = parts.encode(torch.stack(first_full), [r["motion_text"] for r in rows])
    return {"frames": torch.stack(frames), "s_a": s_a, "motion_level": torch.tensor([r["motion_level"] for r in rows])}


def grade(model: FrameDenoiser, test: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    fr, n = test["frames"], len(test["frames"])
    out = {"copy": ((fr[:, :1] - fr[:, 1:]) ** 2).mean(dim=(1, 2, 3, 4)).tolist()}
    with torch.no_grad():
        for s in SIGMAS:
            x = fr[:, 1:] + s * torch.randn(fr[:, 1:].shape, generator=torch.Generator().manual_seed(7))
            d = model.denoise(x, torch.full((n,), s), fr[:, 0], test["s_a"], test["motion_level"], torch.zeros(n))
            out[f"sigma_{s}"] = ((d - fr[:, 1:]) ** 2).mean(dim=(1, 2, 3, 4)).tolist()
        drawn = sample_frames(model, fr[:, 0], test["s_a"], test["motion_level"], SAMPLERS[model.edm.prediction],
                              torch.Generator().manual_seed(11))
    out["sample"] = ((drawn - fr[:, 1:]) ** 2).mean(dim=(1, 2, 3, 4)).tolist()
    # detail against the truth's: eval's sharpness of the drawn frames over the true frames' (1 = as sharp;
    # below 1 blur, far above 1 noise)
    out["detail_ratio"] = [sharpness(uint8_frames(a)) / sharpness(uint8_frames(b)) for a, b in zip(drawn, fr[:, 1:])]
    return out


def uint8_frames(frames: torch.Tensor) -> np.ndarray:
    """(T, 3, H, W) in [-1, 1] -> uint8 (T, H, W, 3)."""
    return ((frames.permute(0, 2, 3, 1).clamp(-1, 1) + 1) * 127.5).round().byte().numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--model", default="animegamer/weights/default/shot_decoder")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--shots", type=int, default=400)
    ap.add_argument("--out", required=True)
    ap.add_argument("--designs", nargs="*", default=list(DESIGNS), choices=list(DESIGNS))
    ap.add_argument("--save-dir", default=None,
                    help="keep each design's weights here, configured for whole 96 x 144 frames (the net is convolutional)")
    ap.add_argument("--grade-every", type=int, default=0, help="also grade every N steps (the trend with length)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    parts = ActionParts(args.model)
    tw, ew = WorldDataset(args.train), WorldDataset(args.test)
    train = crops(tw, tw.split_rows("train")[:args.shots], parts)
    test = crops(ew, ew.rows[::5][:48], parts)
    results = {}
    for name in args.designs:
        design = dict(DESIGNS[name])
        edm = EDMConfig(**design.pop("edm", {}))
        torch.manual_seed(0)
        cfg = frame_net_preset("default", height=CROP, width=CROP, **design)
        model = FrameDenoiser(FrameNet(cfg), edm)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        g = torch.Generator().manual_seed(1)
        losses, trend = [], {}
        for step in range(args.steps):
            idx = torch.randint(0, len(train["frames"]), (8,), generator=g)
            torch.manual_seed(1000 + step)  # the same noise draws for every design
            loss, _ = model({k: v[idx] for k, v in train.items()})
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if args.grade_every and (step + 1) % args.grade_every == 0 and step + 1 < args.steps:
                model.eval()
                trend[step + 1] = {k: float(np.mean(v)) for k, v in grade(model, test).items()}
                print(name, step + 1, json.dumps({k: round(v, 4) for k, v in trend[step + 1].items()}), flush=True)
                model.train()
        model.eval()
        if args.save_dir:
            whole = FrameNet(dataclasses.replace(cfg, height=96, width=144))
            whole.load_state_dict(model.net.state_dict())
            FrameDenoiser(whole, edm, SAMPLERS[edm.prediction]).save_pretrained(Path(args.save_dir) / name)
        graded = grade(model, test)
        results[name] = {"design": {k: list(v) if isinstance(v, tuple) else v for k, v in design.items()},
                         "edm": edm.to_dict(), "sampler": SAMPLERS[edm.prediction].to_dict(),
                         "parameters_m": sum(p.numel() for p in model.parameters()) / 1e6,
                         "last_losses": float(np.mean(losses[-20:])), "trend": trend,
                         **{k: {"mean": float(np.mean(v)), "se": float(np.std(v, ddof=1) / np.sqrt(len(v)))}
                            for k, v in graded.items()},
                         "paired_vs_copy": {k: {"mean": float(np.mean(np.subtract(v, graded["copy"]))),
                                                "se": float(np.std(np.subtract(v, graded["copy"]), ddof=1)
                                                            / np.sqrt(len(v)))}
                                            for k, v in graded.items() if k not in ("copy", "detail_ratio")}}
        print(name, json.dumps({k: round(v["mean"], 4) for k, v in results[name].items()
                                if isinstance(v, dict) and "mean" in v}), flush=True)
    Path(args.out).write_text(json.dumps({"steps": args.steps, "crop": CROP, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
