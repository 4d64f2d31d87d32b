"""Does a FrameNet read its input on whole held-out frames? D's error by noise level, runs paired per shot.

    .venv/bin/python experiments/framenet_whole_frame_error.py --data runs/data/w9100 \
        --runs runs/framenet_cpu/step500_ema runs/param/models/group1_w64_residual --out docs/framenet/whole_error.json

The 48 shots eval-drawn grades (evenly spaced over the dataset), their TRUE first frame, s_a and level; frames
1..16 noised at each sigma (the same noise for every run), denoised once; the MSE to the truth per shot, beside
copying the first frame. Every run after the first is paired per shot against the first. A network that reads
its input reaches about sigma^2 at small sigma; what it draws from the first frame, s_a and level alone shows
at large sigma.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.runs import resolve_decoder
from animegamer.decoder.frame_diffusion import FrameDenoiser
from animegamer.decoder.pipeline import frames_from_uint8
from animegamer.evaluation.drawn_shots import graded_rows
from animegamer.training.framenet_data import ActionParts
from animegamer.training.phase_framenet import SHIPPED
from animegamer.world.dataset import WorldDataset

SIGMAS = (0.05, 0.2, 0.5, 1.0)


def mean_se(v: list[float]) -> list[float]:
    return [float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    world = WorldDataset(args.data)
    rows = graded_rows(world, args.n)
    shots = torch.stack([frames_from_uint8(world.frames(r)) for r in rows])  # (N, T, 3, H, W)
    s_a = ActionParts(resolve_decoder(SHIPPED)).encode(shots[:, 0], [r["motion_text"] for r in rows])
    level = torch.tensor([r["motion_level"] for r in rows])
    per_run: dict[str, dict[str, list[float]]] = {}
    for run in args.runs:
        model = FrameDenoiser.from_pretrained(run)
        out = {"copy": ((shots[:, 1:] - shots[:, :1]) ** 2).mean(dim=(1, 2, 3, 4)).tolist()}
        for s in SIGMAS:
            errs = []
            for i in tqdm(range(len(rows)), desc=f"{Path(run).name} sigma {s}", leave=False):
                g = torch.Generator().manual_seed(1000 * i + int(s * 100))
                x = shots[i:i + 1, 1:] + s * torch.randn(shots[i:i + 1, 1:].shape, generator=g)
                with torch.no_grad():
                    d = model.denoise(x, torch.full((1,), s), shots[i:i + 1, 0], s_a[i:i + 1], level[i:i + 1],
                                      torch.zeros(1))
                errs.append(float(((d - shots[i:i + 1, 1:]) ** 2).mean()))
            out[f"sigma_{s}"] = errs
        per_run[run] = out
        print(run, json.dumps({k: round(float(np.mean(v)), 4) for k, v in out.items()}), flush=True)
    base = args.runs[0]
    result = {"data": args.data, "n": len(rows), "runs": args.runs,
              "summary": {r: {k: mean_se(v) for k, v in o.items()} for r, o in per_run.items()},
              "paired_vs_first": {r: {k: mean_se(list(np.subtract(v, per_run[base][k]))) for k, v in o.items()
                                      if k != "copy"} for r, o in per_run.items() if r != base},
              "per_shot": per_run}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for r, cols in result["paired_vs_first"].items():
        print(f"paired {r} - {base}: " + "  ".join(f"{k} {m:+.4f}±{se:.4f}" for k, (m, se) in cols.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
