"""Who is on screen in a film drawn in another style: ways to name its clips' characters, against its truth.

    .venv/bin/python experiments/sprite_names_probe.py runs/sprite/film runs/sprite/ingested --out names_probe.json

The film and its ingest: experiments/sprite_film.py. Each way names every clip of the ingested film that lies
in one shot; right when the name is one of the shot's characters (6 characters: chance 1/6):
- ``reid_pasted``: the re-identification network (`models/character_reid.py`) with galleries made of each
  reference picture's cut-out pasted into 24 of the film's own frames (so the places and the style of
  drawing are the film's, and only the character differs);
- ``reid_labelled_k``: the same network, each character's mean embedding over k clips a person labelled
  (k = 1, 3, 5; 5 draws each), the other clips named by the nearest;
- ``colour``: the Swain-Ballard ratio histogram of each reference picture's figure (hue x saturation)
  back-projected onto the clip's frames; the best character-sized window's density.
(``annotate --references``, the shipped path, is graded by ``sprite_film.py grade --names``.)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from animegamer.core.atomic_io import write_json
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.game.characters import cut_out, figure_mask, read_picture
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.world.dataset import WorldDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sprite_film import Shot, shot_of_clip  # noqa: E402

HIST_BINS = (24, 16)


def mean_se(hits: list[bool]) -> dict[str, float]:
    a = np.asarray(hits, float)
    return {"right": float(a.mean()), "se": float(a.std(ddof=1) / np.sqrt(len(a))), "clips": len(a)}


def pasted_gallery(sprite: np.ndarray, frames: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    out = []
    for b in rng.choice(len(frames), 24, replace=False):
        f = frames[b][rng.integers(len(frames[b]))].copy()
        h, w = f.shape[:2]
        th = int(h * rng.uniform(0.3, 0.45))
        tw = max(1, round(sprite.shape[1] * th / sprite.shape[0]))
        small = cv2.resize(sprite, (tw, th), interpolation=cv2.INTER_AREA)
        if rng.random() < 0.5:
            small = small[:, ::-1]
        x0, y0 = int(rng.integers(0, w - tw)), int(rng.integers(int(h * 0.35), h - th + 1))
        a = small[..., 3:4] / 255.0
        f[y0:y0 + th, x0:x0 + tw] = (a * small[..., :3] + (1 - a) * f[y0:y0 + th, x0:x0 + tw]).astype(np.uint8)
        out.append(f)
    return np.stack(out)


def colour_scores(frames: np.ndarray, hists: list[np.ndarray]) -> np.ndarray:
    scores = np.zeros(len(hists))
    for f in frames[::4]:
        hsv = cv2.cvtColor(f, cv2.COLOR_RGB2HSV)
        fh = cv2.calcHist([hsv], [0, 1], None, list(HIST_BINS), [0, 180, 0, 256])
        fh = fh / fh.sum()
        hb, sb = (hsv[..., 0].astype(int) * HIST_BINS[0]) // 180, (hsv[..., 1].astype(int) * HIST_BINS[1]) // 256
        for j, h in enumerate(hists):
            ratio = np.minimum(h / np.maximum(fh, 1e-6), 50.0)
            scores[j] += cv2.boxFilter(ratio[hb, sb].astype(np.float32), -1, (9, 17)).max()
    return scores


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("film", type=Path)
    ap.add_argument("data", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    truth = json.loads((a.film / "truth.json").read_text())
    shots = [Shot(**s) for s in truth["shots"]]
    data = WorldDataset(a.data)
    clips, truths = [], []
    for r in data.rows:
        sh = shot_of_clip(r, shots, truth["fps"], data.meta["fps"])
        if sh is not None:
            clips.append(data.frames(r))
            truths.append(sh.characters)
    names = sorted(p.stem for p in (a.film / "references").glob("*.png"))
    pictures = {n: read_picture(a.film / "references" / f"{n}.png") for n in names}
    reid = CharacterReID.from_pretrained(DEFAULT_EVALUATOR / REID_DIR).eval()
    emb = torch.stack([reid.embed(c[::4]) for c in clips])
    result: dict[str, object] = {"chance": 1 / len(names)}
    rng = np.random.default_rng(0)
    gallery = torch.stack([reid.embed(pasted_gallery(cut_out(pictures[n]), clips, rng)) for n in names])
    result["reid_pasted"] = mean_se([names[int(torch.argmax(gallery @ e))] in t for e, t in zip(emb, truths)])
    for k in (1, 3, 5):
        draws = []
        for rep in range(5):
            r2 = np.random.default_rng(rep)
            pool = {n: [i for i, t in enumerate(truths) if t == [n]] for n in names}
            chosen = {n: list(r2.choice(v, min(k, len(v)), replace=False)) for n, v in pool.items() if v}
            used = {i for v in chosen.values() for i in v}
            proto = torch.stack([F.normalize(emb[v].mean(0), dim=0) for v in chosen.values()])
            who = list(chosen)
            rest = [i for i in range(len(emb)) if i not in used]
            draws.append(np.mean([who[int(torch.argmax(proto @ emb[i]))] in truths[i] for i in rest]))
        result[f"reid_labelled_{k}"] = {"right": float(np.mean(draws)), "sd_over_draws": float(np.std(draws))}
    hists = []
    for n in names:
        pic = pictures[n]
        h = cv2.calcHist([cv2.cvtColor(pic, cv2.COLOR_RGB2HSV)], [0, 1], figure_mask(pic), list(HIST_BINS),
                         [0, 180, 0, 256])
        hists.append(h / h.sum())
    result["colour"] = mean_se([names[int(np.argmax(colour_scores(c, hists)))] in t for c, t in zip(clips, truths)])
    print(json.dumps(result, indent=1))
    if a.out:
        write_json(a.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
