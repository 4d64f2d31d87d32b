"""Does a sampling sprite animator read the frame it is given noised? Held-out tracks drawn from the character
standing, the L1 of what it draws (frames 1..16) given the TRUE frame noised at sigma, against the truth:

    .venv/bin/python experiments/denoise_check.py --runs RUN [RUN ...] [--data runs/data/w9100]

A sampler that reads its noised frame draws far closer at a small sigma (the answer is in its input) than at a
large one (``gap``: the L1 at the largest sigma minus at the smallest, per track, its mean and standard error); a
regressor (``sampler_steps`` 0) reads no noise and scores the same at every sigma. Tracks: the first
three of each quiet verb among the held-out world's train-split rows, from phase 0 (what a drawing from standing is
taught), as experiments/mark_motion.py.
"""
from __future__ import annotations

import argparse
import json

import torch

from animegamer.decoder.sprite_animator import FrameCue, to_unit
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.training.phase_sprites import sprite_tensors
from sprite_sheet import single_shots  # experiments/, beside this script

SIGMAS = (0.05, 0.1, 0.3, 1.0, 3.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--data", default="runs/data/w9100")
    ap.add_argument("--verbs", default="sleep,eat,read,sit,wave,laugh")
    ap.add_argument("--per-verb", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    shots, s_a = single_shots(args.data, args.verbs.split(","), args.per_verb, 300)
    sp = sprite_tensors(shots.rows, shots.frames.shape[1], 2, False, canonical=True)
    report = {}
    for run in args.runs:
        model = load_animator(run)
        errors: dict[float, list[float]] = {s: [] for s in SIGMAS}
        torch.manual_seed(0)
        with torch.no_grad():
            for j in range(len(sp.role)):
                shot = sp.shot[j:j + 1]
                truth = to_unit(sp.canonical["rgba"][j])[1:]  # (T-1, 4, H, W)
                t = truth.shape[0]
                ref = to_unit(sp.standing[j:j + 1]).expand(t, -1, -1, -1)
                cue = FrameCue(s_a[shot].float().expand(t, -1, -1), shots.levels[shot].expand(t),
                               torch.arange(1, t + 1), sp.role[j:j + 1].expand(t), torch.zeros(t))
                noise = torch.randn(1, 4, *truth.shape[-2:]).expand(t, -1, -1, -1)
                for s in SIGMAS:
                    noisy = ((truth * 2 - 1 + s * noise, torch.full((t,), s)) if model.config.sampler_steps
                             else None)
                    drawn = model.frame(ref, ref, cue, noisy=noisy)[0]
                    errors[s].append(float((drawn - truth).abs().mean()))
        gap = torch.tensor(errors[SIGMAS[-1]]) - torch.tensor(errors[SIGMAS[0]])  # per track: what the noise told
        report[run] = {**{str(s): round(sum(v) / len(v), 5) for s, v in errors.items()},
                       "gap": round(float(gap.mean()), 5), "gap_se": round(float(gap.std() / len(gap) ** 0.5), 5)}
        print(run, report[run], f"({len(sp.role)} tracks)")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
