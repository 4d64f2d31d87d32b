"""What the shot autoencoder keeps of a true frame: PSNR / L1 of its round trip, and a picture of it.

    .venv/bin/python experiments/autoencoder_round_trip.py DATA AE [AE ...] --sheet OUT.jpg [--shots 40]

DATA: a world dataset (its train split); each AE: an autoencoder directory (a model's
shot_decoder/autoencoder, a `train vae` run's final/autoencoder). 40 shots drawn with a fixed seed,
all 17 frames of each encoded and decoded; the sheet shows the first frame of 8 of them, the truth
first and then each autoencoder's round trip, enlarged 2x.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from PIL import Image

from animegamer.decoder.pipeline import frames_from_uint8, frames_to_uint8
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.world.dataset import ShotDataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("autoencoders", nargs="+")
    ap.add_argument("--sheet", required=True)
    ap.add_argument("--shots", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    aes = [ShotAutoencoder.from_pretrained(p).float().eval() for p in args.autoencoders]
    ds = ShotDataset(args.data, "train", limit=400)
    picks = np.random.default_rng(0).choice(len(ds), min(args.shots, len(ds)), replace=False)
    l1 = [[] for _ in aes]
    psnr = [[] for _ in aes]
    rows = []
    for j, i in enumerate(picks):
        truth = np.asarray(ds[int(i)]["frames"])  # (T, H, W, 3) uint8
        x = frames_from_uint8(truth)[None]
        row = [truth[0]]
        for k, ae in enumerate(aes):
            with torch.no_grad():
                back = frames_to_uint8(ae.decode(ae.encode(x)).clamp(-1, 1))[0]
            d = back.astype(np.float32) - truth.astype(np.float32)
            l1[k].append(float(np.abs(d).mean()))
            psnr[k].append(float(10 * np.log10(255 ** 2 / max((d ** 2).mean(), 1e-6))))
            row.append(back[0])
        if j < 8:
            rows.append(np.concatenate(row, 1))
    sheet = Image.fromarray(np.concatenate(rows, 0))
    sheet.resize((sheet.width * 2, sheet.height * 2), Image.NEAREST).save(args.sheet, quality=85)
    print(json.dumps({"shots": len(picks), "data": args.data, "autoencoders": [
        {"path": p, "psnr_db": float(np.mean(psnr[k])), "l1_of_255": float(np.mean(l1[k]))}
        for k, p in enumerate(args.autoencoders)]}, indent=1))


if __name__ == "__main__":
    main()
