"""Where does a decoder's flicker come from, and does the motion level reach its motion at all?

    .venv/bin/python experiments/decoder_motion_diag.py DECODER_RUN [--n 16] [--cache DIR] [--out FILE.json]

On the first n held-out shots of the cache (their TRUE s_a), two measurements
(docs/results/frame_diff.md):

1. ``motion``: the own frame-to-frame change of latents (``decoder_eval.own_motion``) per true
   level, for the true shots, for samples at several sampler settings, and for the one-step x0
   prediction from the TRUE latent noised to timestep t.
2. ``level_effect``: the same shot and noisy input at level 1 and at level 5. The x0 prediction's
   own motion at each, the RMS difference between the two predictions, and for scale the RMS
   difference between predictions from the true s_a and another shot's s_a.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from animegamer.core.runs import resolve_decoder
from animegamer.evaluation.decoder_eval import latent_motion, own_motion
from animegamer.core.atomic_io import write_json
from animegamer.decoder.diffusion import Denoiser, draw_noise
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.training.shot_cache import CachedShots

SAMPLERS = ((6, 3.0), (6, 1.0), (20, 3.0))  # (steps, CFG)
TIMESTEPS = (100, 400, 700, 950)


def x0_prediction(den: Denoiser, x_t: torch.Tensor, t: int, s_a: torch.Tensor, level: int) -> torch.Tensor:
    """The network's one-step x0 estimate (diffusion space) from x_t under v-prediction."""
    a = den.noise_schedule.alphas_cumprod[t]
    v = den.net(x_t, torch.tensor([t]), s_a, torch.tensor([level]))
    return a.sqrt() * x_t - (1 - a).sqrt() * v


def noised(den: Denoiser, latents: torch.Tensor, t: int, seed: int, level: int) -> torch.Tensor:
    x0 = den.normalize(latents[None].float())  # (1, F, C', h, w)
    # the shot's own level picks the noise prior of a level-matched decoder (as in training)
    noise = draw_noise(tuple(x0.shape), den.config, torch.Generator().manual_seed(seed),
                       motion_level=torch.tensor([level]) if den.net.config.use_motion_level else None)
    a = den.noise_schedule.alphas_cumprod[t]
    return a.sqrt() * x0 + (1 - a).sqrt() * noise


@torch.no_grad()
def diagnose(dec: ShotDecoder, cache: CachedShots, n: int) -> dict:
    den = Denoiser(dec.net, dec.diffusion).eval()
    motion: dict[str, dict[int, list[float]]] = {}
    effect: dict[str, dict[str, list[float]]] = {}

    def add(key: str, level: int, value: float | None) -> None:
        if value is not None:
            motion.setdefault(key, {}).setdefault(level, []).append(value)

    n = min(n, len(cache))
    for i in range(n):
        item, other = cache[i], cache[(i + 7) % len(cache)]
        level = int(item["motion_level"])
        s_a = dec.net.action_encoder(item["f_md"][None], item["f_v"][None])  # (1, N, D)
        s_other = dec.net.action_encoder(other["f_md"][None], other["f_v"][None])
        add("true", level, latent_motion(dec, item["latents"]))
        for steps, cfg in SAMPLERS:
            lat = dec.sample_latents(s_a, level, torch.Generator().manual_seed(i), steps, cfg)
            add(f"sample_{steps}_steps_cfg_{cfg:g}", level, latent_motion(dec, lat[0]))
        for t in TIMESTEPS:
            x_t = noised(den, item["latents"], t, seed=i, level=level)
            pred = {lv: x0_prediction(den, x_t, t, s_a, lv) for lv in {1, 5, level}}
            add(f"x0_prediction_t{t}", level, own_motion(dec.autoencoder, pred[level][0]))
            e = effect.setdefault(f"t{t}", {k: [] for k in ("motion_level_1", "motion_level_5", "rms_level_1_vs_5",
                                                           "rms_true_vs_other_s_a")})
            e["motion_level_1"].append(own_motion(dec.autoencoder, pred[1][0]))
            e["motion_level_5"].append(own_motion(dec.autoencoder, pred[5][0]))
            e["rms_level_1_vs_5"].append(float((pred[1] - pred[5]).pow(2).mean().sqrt()))
            other_pred = x0_prediction(den, x_t, t, s_other, level)
            e["rms_true_vs_other_s_a"].append(float((pred[level] - other_pred).pow(2).mean().sqrt()))
    return {
        "shots": n,
        "motion": {k: {str(lv): float(np.mean(v)) for lv, v in sorted(d.items())} for k, d in motion.items()},
        "level_effect": {t: {k: float(np.mean(v)) for k, v in d.items()} for t, d in effect.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("decoder", help="a `train decoder` / `train adapt` run dir or its shot_decoder/")
    ap.add_argument("--cache", default="runs/decoder_pre/cache/val_64", help="held-out feature cache")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the result as JSON here")
    args = ap.parse_args()
    if args.n < 1:
        raise SystemExit("--n must be >= 1")
    torch.set_num_threads(args.threads)
    result = {"decoder": args.decoder, **diagnose(ShotDecoder.from_pretrained(resolve_decoder(args.decoder)).eval(),
                                                  CachedShots(args.cache), args.n)}
    print(json.dumps(result, indent=1))
    if args.out:
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
