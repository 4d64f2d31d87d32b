"""A sampler over the animator's drawing: a shot's 17 frames drawn together as a residual over the regressor's mean
(docs/layers.md, "A residual sampler over the drawing"; CorrDiff's design: the regressor draws the mean, a small
diffusion model draws what the mean averaged away):

    .venv/bin/python experiments/residual_sampler.py cache --world runs/data/e6000 --out RUNS/res_train.npz
    .venv/bin/python experiments/residual_sampler.py cache --world W9100 --n 200 --out RUNS/res_9100.npz
    .venv/bin/python experiments/residual_sampler.py train --cache RUNS/res_train.npz --steps 2000 --out RUNS/res
    .venv/bin/python experiments/residual_sampler.py measure --cache RUNS/res_9100.npz --run RUNS/res --world W9100
    .venv/bin/python experiments/residual_sampler.py denoise --cache RUNS/res_9100.npz --run RUNS/res

``cache``: the single-character shots of a world, each drawn by the shipped animator from standing (the shot's true
s_a and the world's level, as ``drawn_change.py``: frames 0-16 in one pass, as a scene starts in play), beside the
true track from phase 0; uint8 canvases (80 x 80, premultiplied RGBA).
``train``: an EDM denoiser (diffusers' UNet2DModel on the canvas space-to-depth 2x, 40 x 40) of the residual
truth - drawing of all 17 frames at once (68 channels), given the drawing in place and the level
as a class; resumable (``--resume``), an EMA of the weights saved beside them.
``measure``: on held-out shots, each drawn (the regressor), sampled (drawing + a residual drawn by ``--steps`` Heun
steps from noise; ``--seeds`` samples a shot) and true, read by the level's measure pasted on the shot's place as
play shows it (``measure_on_place.on_place``): the level read = the world's, per verb log(true / drawn); the
sample's noise (sharpness, Laplacian variance, over the truth's; L1 to the truth).
``denoise``: the TRUE residual noised at a few sigmas and denoised once (can it denoise at all?).
"""
from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import UNet2DModel
from tqdm.auto import tqdm

from animegamer.evaluation import picture
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.world.flow import MotionQuantizer

sys.path.insert(0, str(Path(__file__).parent))
from drawn_change import single_shots  # noqa: E402  (sibling scripts: the same drawings, stage and shots)
from level_in_layers import setup  # noqa: E402
from measure_on_place import on_place, over_grey  # noqa: E402

FRAMES, CH = 17, 4
TRAVELS = {"fly_broom", "run", "jump", "walk", "fall"}  # verbs whose track moves the body over the stage (a jump's
#   height too: motions._jump's offset, not its pose); the canvas holds only the pose
S2D = 2  # space-to-depth: 80 x 80 -> 40 x 40 (a step of 8 shots 1.3 s on one core; at 80 x 80 twice that)


def cache(world: str, n: int, out: str) -> None:
    stage, animator, parts, _, wd, idx = setup(world, n, Path(DEFAULT_WEIGHTS), None)
    drawn, truth, level, verb, place = [], [], [], [], []
    for row, track, d, _ in single_shots(stage, animator, parts, wd, idx):
        drawn.append(np.round(np.clip(d, 0, 1) * 255).astype(np.uint8))
        truth.append(track.rgba)
        level.append(int(row["motion_level"]))
        verb.append(row["motion"])
        place.append([row["place"], row["time"]])
    np.savez(out, drawn=np.stack(drawn), truth=np.stack(truth), level=np.array(level), verb=np.array(verb),
             place=np.array(place))
    print(f"{len(drawn)} shots -> {out}")


def build(width: tuple[int, ...] = (64, 96, 128)) -> UNet2DModel:
    cin, cout = (2 * FRAMES * CH) * S2D ** 2, FRAMES * CH * S2D ** 2
    return UNet2DModel(sample_size=80 // S2D, in_channels=cin, out_channels=cout, block_out_channels=width,
                       layers_per_block=1, down_block_types=("DownBlock2D",) * (len(width) - 1) + ("AttnDownBlock2D",),
                       up_block_types=("AttnUpBlock2D",) + ("UpBlock2D",) * (len(width) - 1), norm_num_groups=32,
                       num_class_embeds=6)


def to_net(x: torch.Tensor) -> torch.Tensor:
    """(B, T, H, W, 4) -> (B, T*4*S2D^2, H/S2D, W/S2D)."""
    b = x.shape[0]
    return F.pixel_unshuffle(x.permute(0, 1, 4, 2, 3).reshape(b, FRAMES * CH, 80, 80), S2D)


def from_net(y: torch.Tensor) -> torch.Tensor:
    b = y.shape[0]
    return F.pixel_shuffle(y, S2D).reshape(b, FRAMES, CH, 80, 80).permute(0, 1, 3, 4, 2)


class Denoiser(torch.nn.Module):
    """EDM preconditioning (Karras et al. 2022) of the residual given the drawing."""

    def __init__(self, sigma_data: float, width: tuple[int, ...] = (64, 96, 128)) -> None:
        super().__init__()
        self.net, self.sigma_data = build(width), sigma_data

    def forward(self, noisy: torch.Tensor, sigma: torch.Tensor, drawn: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
        sd, s = self.sigma_data, sigma.view(-1, 1, 1, 1, 1)
        c_in, c_skip = 1 / torch.sqrt(s ** 2 + sd ** 2), sd ** 2 / (s ** 2 + sd ** 2)
        c_out = s * sd / torch.sqrt(s ** 2 + sd ** 2)
        x = torch.cat([to_net(noisy * c_in), to_net(drawn * 2 - 1)], dim=1)
        out = from_net(self.net(x, torch.log(sigma) / 4, class_labels=level).sample)
        return c_skip * noisy + c_out * out


def batches(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = np.load(path)
    return z["drawn"], z["truth"], z["level"]


def train(cache_path: str, steps: int, out: str, batch: int, lr: float, resume: bool) -> None:
    torch.set_num_threads(1)
    drawn, truth, level = batches(cache_path)
    res = truth.astype(np.float32) / 255 - drawn.astype(np.float32) / 255
    sigma_data = float(res.std())
    del res
    run = Path(out)
    run.mkdir(parents=True, exist_ok=True)
    model = Denoiser(sigma_data)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    step, log = 0, []
    if resume and (run / "ckpt.pt").exists():
        ck = torch.load(run / "ckpt.pt", weights_only=False)
        model.load_state_dict(ck["model"]); ema.load_state_dict(ck["ema"]); opt.load_state_dict(ck["opt"])
        step, log = ck["step"], ck["log"]
    rng = np.random.default_rng(step)
    bar = tqdm(range(step, steps), initial=step, total=steps, desc="residual")
    for step in bar:
        i = rng.integers(0, len(drawn), batch)
        d = torch.from_numpy(drawn[i]).float() / 255
        r = torch.from_numpy(truth[i]).float() / 255 - d
        sigma = torch.exp(torch.randn(batch) * 1.2 - 1.2) * sigma_data / 0.5  # EDM's P_mean -1.2 at sigma_data 0.5
        noisy = r + sigma.view(-1, 1, 1, 1, 1) * torch.randn_like(r)
        pred = model(noisy, sigma, d, torch.from_numpy(level[i]).long())
        w = (sigma ** 2 + sigma_data ** 2) / (sigma * sigma_data) ** 2
        loss = (w.view(-1, 1, 1, 1, 1) * (pred - r) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100)
        with torch.no_grad():
            for p, q in zip(ema.parameters(), model.parameters()):
                p.lerp_(q, 1 - 0.995)
        log.append(float(loss))
        bar.set_postfix(loss=f"{np.mean(log[-50:]):.3f}")
        if (step + 1) % 250 == 0 or step + 1 == steps:
            tmp = run / "ckpt.pt.tmp"
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                        "step": step + 1, "log": log, "sigma_data": sigma_data}, tmp)
            tmp.replace(run / "ckpt.pt")


def load(run: str) -> Denoiser:
    """A run folder (its latest checkpoint) or a checkpoint file -> its EMA denoiser."""
    path = Path(run) if Path(run).is_file() else Path(run) / "ckpt.pt"
    ck = torch.load(path, weights_only=False)
    model = Denoiser(ck["sigma_data"])
    model.load_state_dict(ck["ema"])
    return model.eval()


@torch.no_grad()
def sample(model: Denoiser, drawn: torch.Tensor, level: torch.Tensor, steps: int, gen: torch.Generator) -> torch.Tensor:
    """Heun's sampler over Karras' sigmas (EDM): drawn (B, T, H, W, 4) in [0, 1] -> the sampled shot, clamped,
    premultiplied."""
    sd = model.sigma_data
    smax, smin, rho = 20 * sd, 0.002, 7.0
    t = torch.linspace(0, 1, steps)
    sigmas = (smax ** (1 / rho) + t * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    sigmas = torch.cat([sigmas, torch.zeros(1)])
    x = torch.randn(drawn.shape, generator=gen) * sigmas[0]
    for i in range(steps):
        s, s_next = sigmas[i], sigmas[i + 1]
        den = model(x, s.repeat(len(x)), drawn, level)
        d = (x - den) / s
        x_next = x + (s_next - s) * d
        if s_next > 0:
            d2 = (x_next - model(x_next, s_next.repeat(len(x)), drawn, level)) / s_next
            x_next = x + (s_next - s) * (d + d2) / 2
        x = x_next
    shot = (drawn + x).clamp(0, 1)
    return torch.cat([torch.minimum(shot[..., :3], shot[..., 3:]), shot[..., 3:]], dim=-1)


@torch.no_grad()
def denoise(cache_path: str, run: str, every: int) -> None:
    """Can it denoise at all? Every ``every``-th held-out shot's TRUE residual noised at sigma, denoised once: L1 to the
    residual, against the noisy input and against drawing no residual (the regressor alone)."""
    torch.set_num_threads(1)
    z, model = np.load(cache_path), load(run)
    idx = np.arange(0, len(z["drawn"]), every)
    d = torch.from_numpy(z["drawn"][idx]).float() / 255
    r = torch.from_numpy(z["truth"][idx]).float() / 255 - d
    lv, gen = torch.from_numpy(z["level"][idx]).long(), torch.Generator().manual_seed(0)
    print(f"{len(idx)} shots; L1 of no residual (the regressor) {r.abs().mean():.4f}")
    for s in (0.01, 0.03, 0.1, 0.3, 1.0):
        noisy = r + s * torch.randn(r.shape, generator=gen)
        out = torch.cat([model(noisy[i:i + 4], torch.full((len(noisy[i:i + 4]),), s), d[i:i + 4], lv[i:i + 4])
                         for i in range(0, len(noisy), 4)])
        print(f"sigma {s}: L1 denoised {(out - r).abs().mean():.4f}, noisy {(noisy - r).abs().mean():.4f}")


def sharpness(frames: np.ndarray) -> float:
    """(T, H, W, 4) in [0, 1] -> the mean Laplacian variance of the canvas over grey (the evaluator's sharpness)."""
    return picture.sharpness(over_grey(frames))


def measure(cache_path: str, run: str, world: str, steps: int, seeds: int, out: str | None) -> None:
    torch.set_num_threads(1)
    stage = setup(world, 1, Path(DEFAULT_WEIGHTS), None)[0]
    quant = MotionQuantizer.load()
    z = np.load(cache_path)
    model = load(run)
    rows, by_verb = [], collections.defaultdict(list)
    for k in tqdm(range(len(z["drawn"])), desc="shots"):
        row = {"place": str(z["place"][k][0]), "time": str(z["place"][k][1])}
        lv, verb = int(z["level"][k]), str(z["verb"][k])
        true, drawn = z["truth"][k] / 255.0, z["drawn"][k] / 255.0
        d = torch.from_numpy(drawn).float()[None]
        rec = {"verb": verb, "level": lv, "true": on_place(stage, row, true), "drawn": on_place(stage, row, drawn),
               "sharp_true": sharpness(true), "sharp_drawn": sharpness(drawn), "sampled": [], "sharp_sampled": [],
               "l1_drawn": float(np.abs(true - drawn).mean()), "l1_sampled": []}
        for s in range(seeds):
            x = sample(model, d, torch.tensor([lv]), steps, torch.Generator().manual_seed(1000 * k + s))[0].numpy()
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
    c = sub.add_parser("cache")
    c.add_argument("--world", required=True)
    c.add_argument("--n", type=int, default=100000)
    c.add_argument("--out", required=True)
    t = sub.add_parser("train")
    t.add_argument("--cache", required=True)
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=2e-4)
    t.add_argument("--out", required=True)
    t.add_argument("--resume", action="store_true")
    m = sub.add_parser("measure")
    m.add_argument("--cache", required=True)
    m.add_argument("--run", required=True)
    m.add_argument("--world", required=True)
    m.add_argument("--steps", type=int, default=4)
    m.add_argument("--seeds", type=int, default=2)
    m.add_argument("--out", default=None)
    n = sub.add_parser("denoise")
    n.add_argument("--cache", required=True)
    n.add_argument("--run", required=True)
    n.add_argument("--every", type=int, default=8)
    a = ap.parse_args()
    if a.cmd == "cache":
        torch.set_num_threads(1)
        cache(a.world, a.n, a.out)
    elif a.cmd == "train":
        train(a.cache, a.steps, a.out, a.batch, a.lr, a.resume)
    elif a.cmd == "denoise":
        denoise(a.cache, a.run, a.every)
    else:
        measure(a.cache, a.run, a.world, a.steps, a.seeds, a.out)


if __name__ == "__main__":
    main()
