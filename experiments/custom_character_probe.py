"""Can the shipped decoder draw a character it never saw, given one picture of it as its visual anchor?

    .venv/bin/python experiments/custom_character_probe.py --out runs/custom_character_probe.json

For two galleries of 8 characters, 8 of the named cast (seen in training) and 8 drawn by
world/character_gen.py from held-out seeds (never seen), and for several actions (verb, adverb,
place, time): every character of a gallery is rendered doing the action (the truth). Each one's
TRUE first frame becomes the visual anchor: its autoencoder-latent f_v through E_a's visual stream
replaces the visual tokens of the engine's s_a, as a retrieved anchor does in the game. The text
tokens and the motion level come from one engine prediction per action, the same for everyone, so
only the anchor tells the characters apart. The decoder draws the shot from there.

``picture``: the same, but the anchor frame is the character's reference picture cut out and stood in
the scene (what `characters add --image` did with an uploaded picture before pictures were fitted)
instead of a true frame.
``composed``: what the game does in play since the stage (decoder/stage.py): the character cut out of its
reference sheet (as drawn when it is added), standing in the stage's stored picture of the place; the world
renders nothing.
``fitted``: what `characters add --image` did with a picture before the stage: the reference picture as a player would upload it
again (saved from the page: enlarged to 300 x 300 and stored as JPEG at quality 80) is read into the
generator's parameters (`world/character_fit.py`), and the world renders that character doing the action
(the first frame, as for ``anchor``). How well the parameters were read is reported beside it.

Re-identification: the evaluator's embedding of the decoded shot's last 4 frames against those of
each gallery character's true shot of the same action. It counts as right when the nearest is the
character's own (chance 1/8). Two controls:
- ``engine``: the engine's own visual tokens, the same for everyone, so chance;
- ``truth``: each true shot's own first frame against the true last frames, the instrument's
  ceiling when nothing is decoded.
The same question is asked of the character re-identification network beside the evaluator
(`models/character_reid.py`, trained on hundreds of drawn characters, none of these), when it is there:
the ``(reid)`` columns, a second instrument whose ceiling on unseen characters is not bound to the 10
characters the evaluator was trained on.
The colour test (the issue's): each held-out character and a copy with the hue of its hair and
outfit turned half a circle, played with the same instructions and seed under the same name: the
difference of the two games' mean frame colours should point the way the references' does.
Page: docs/results.md#your-own-characters.
"""
from __future__ import annotations

import argparse
import colorsys
import dataclasses
import io
import json
import tempfile
from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from animegamer.core.atomic_io import write_json
from animegamer.decoder.stage import Sprite
from animegamer.evaluation.evaluator import Evaluator
from animegamer.game.characters import cut_out, figure_mask
from animegamer.game.session import Game
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.world.cast import load_cast
from animegamer.world.character_fit import fit_character
from animegamer.world.character_gen import character_entry, held_out_characters, random_character, reference_sheet
from animegamer.world.preview import save_png
from animegamer.world.instructions import Action
from animegamer.world.shot import render_action, render_cutout
from animegamer.world.stage_art import portrait_standing_px

ACTIONS = (("run", "quickly", "town", "day"), ("wave", "", "meadow", "day"), ("dance", "happily", "beach", "sunset"),
           ("walk", "slowly", "station", "night"), ("jump", "energetically", "forest", "day"),
           ("read", "calmly", "bedroom", "night"))
TAIL = 4  # frames embedded at the end of a shot
SHEET_ACTION = 1  # the contact sheet shows "wave": a calm shot (fast ones blur)


def _embed(ev: Evaluator, frames: np.ndarray) -> torch.Tensor:
    e = ev.embed_frames(frames[-TAIL:]).mean(0)
    return e / e.norm()


def sheet_row(truth: np.ndarray, drawn: np.ndarray, scale: int = 2) -> np.ndarray:
    """The anchor (the true first frame), the drawn shot's frames 0 / middle / last, the truth's last frame."""
    gap = np.full((truth.shape[1], 4, 3), 255, np.uint8)
    tiles = [truth[0], gap, drawn[0], drawn[len(drawn) // 2], drawn[-1], gap, truth[-1]]
    row = np.concatenate(tiles, axis=1)
    return np.repeat(np.repeat(row, scale, axis=0), scale, axis=1)


def fitted_row(upload: np.ndarray, fitted: np.ndarray, drawn: np.ndarray, truth: np.ndarray,
               scale: int = 2) -> np.ndarray:
    """The picture as uploaded, the reference sheet of what was read from it, the drawn shot's frames
    0 / middle / last, the truth's last frame."""
    h = truth.shape[1]
    gap = np.full((h, 4, 3), 255, np.uint8)
    sq = lambda im: cv2.resize(im, (h, h), interpolation=cv2.INTER_AREA)  # noqa: E731
    row = np.concatenate([sq(upload), gap, sq(fitted), gap, drawn[0], drawn[len(drawn) // 2], drawn[-1], gap,
                          truth[-1]], axis=1)
    return np.repeat(np.repeat(row, scale, axis=0), scale, axis=1)


def probe(game: Game, ev: Evaluator, gallery: list[str], extra: dict, seed: int,
          rows: list[np.ndarray] | None = None, fit_rows: list[np.ndarray] | None = None,
          reid: CharacterReID | None = None) -> dict:
    specs = {**load_cast(), **extra}
    sprites = {c: cut_out(reference_sheet(specs[c], 256)) for c in gallery}  # "uploaded" reference pictures
    uploads = {c: reuploaded(reference_sheet(specs[c], 256)) for c in gallery}
    fits = {c: fit_character(uploads[c], figure_mask(uploads[c]), random_character(7 + i, c))
            for i, c in enumerate(tqdm(gallery, desc="fitting pictures", leave=False))}
    dec, eng = game.decoder, game.engine
    right = {"anchor": 0, "picture": 0, "fitted": 0, "composed": 0, "engine": 0, "truth": 0}
    stage = game.decoder.stage
    if stage is None:
        raise SystemExit("the model has no stage (animegamer model stage MODEL)")
    sheets = {c: reference_sheet(specs[c], 256) for c in gallery}
    cutouts = {c: Sprite(cut_out(sheets[c]), cut_out(sheets[c]).shape[0] / portrait_standing_px(256)) for c in gallery}
    per_shot: list[dict] = []
    total = 0
    for a, (verb, adverb, place, time) in enumerate(tqdm(ACTIONS, desc="actions", leave=False)):
        truths = {c: render_action(Action((c,), verb, adverb, place, time), seed=seed + a, extra_cast=extra) for c in gallery}
        truth_emb = torch.stack([_embed(ev, truths[c]) for c in gallery])  # (G, E)
        reid_truth = torch.stack([reid.embed(truths[c][-TAIL:]) for c in gallery]) if reid is not None else None
        motion = f"{adverb} {verb}".strip().replace("_", " ")
        pred = eng.predict([], f"Character: Qiqi; Motion: {motion}; Background: {time} {place}.")
        eng.reset_cache()
        for i, c in enumerate(gallery):
            g = torch.Generator().manual_seed(seed * 1000 + a)  # the same noise for every character
            drawn = dec.draw_from_frame(pred.s_a, truths[c][0])
            stood = render_cutout(sprites[c], place, time, seed=seed + a)  # the picture stood in the scene
            posed = render_action(Action((c,), verb, adverb, place, time), seed=seed + a, extra_cast={c: fits[c].spec})[0]
            composed = stage.compose(place, time, [cutouts[c]])
            # each shot is drawn from the tokens of the picture it starts from, as in the game
            shots = {"anchor": dec(drawn, motion_level=pred.motion_level, generator=g),
                     "picture": dec(dec.draw_from_frame(pred.s_a, stood), motion_level=pred.motion_level,
                                    generator=torch.Generator().manual_seed(seed * 1000 + a)),
                     "fitted": dec(dec.draw_from_frame(pred.s_a, posed), motion_level=pred.motion_level,
                                   generator=torch.Generator().manual_seed(seed * 1000 + a)),
                     "composed": dec(dec.draw_from_frame(pred.s_a, composed), motion_level=pred.motion_level,
                                     generator=torch.Generator().manual_seed(seed * 1000 + a)),
                     "engine": dec(pred.s_a, motion_level=pred.motion_level,
                                   generator=torch.Generator().manual_seed(seed * 1000 + a)),
                     "truth": np.repeat(truths[c][:1], TAIL, axis=0)}
            outcome = {k: int(torch.argmax(truth_emb @ _embed(ev, frames)) == i) for k, frames in shots.items()}
            if reid is not None:  # the same question asked of the re-identification network
                outcome |= {f"{k} (reid)": int(torch.argmax(reid_truth @ reid.embed(frames[-TAIL:])) == i)
                            for k, frames in shots.items()}
            for k in right:
                right[k] += outcome[k]
            plain = render_action(Action((c,), verb, adverb, place, time), seed=seed + a,
                                  extra_cast={c: dataclasses.replace(specs[c], outfit_variants=())})[0]
            # whether the truth wears the outfit its reference picture shows, or one of its other outfits
            per_shot.append({"character": c, "action": verb, "default outfit": bool(np.array_equal(plain, truths[c][0])),
                             **outcome})
            total += 1
            if rows is not None and a == SHEET_ACTION:
                rows.append(sheet_row(truths[c], shots["anchor"]))
            if fit_rows is not None and a == SHEET_ACTION:
                fit_rows.append(fitted_row(uploads[c], reference_sheet(fits[c].spec, 128), shots["fitted"], truths[c]))
    if reid is not None:
        right |= {k: sum(s[k] for s in per_shot) for k in per_shot[0] if k.endswith("(reid)")}
    return {k: {"right": v, "of": total, "accuracy": v / total} for k, v in right.items()} | {
        "chance": 1 / len(gallery), "fit": fit_report(specs, fits),
        "fitted - anchor (paired)": paired(per_shot, "fitted", "anchor"),
        "fitted - picture (paired)": paired(per_shot, "fitted", "picture"),
        "composed - fitted (paired)": paired(per_shot, "composed", "fitted"),
        "fitted - anchor, truth in the pictured outfit (paired)":
            paired([s for s in per_shot if s["default outfit"]], "fitted", "anchor"),
        "fitted - anchor, truth in another outfit (paired)":
            paired([s for s in per_shot if not s["default outfit"]], "fitted", "anchor"), "shots": per_shot}


def paired(shots: list[dict], a: str, b: str) -> dict:
    """The mean paired difference of two systems' outcomes over the same shots, with its standard error."""
    d = np.array([s[a] - s[b] for s in shots], float)
    if len(d) < 2:
        return {"shots": len(d)}
    return {"shots": len(d), "difference": float(d.mean()), "standard_error": float(d.std(ddof=1) / np.sqrt(len(d)))}


def reuploaded(sheet: np.ndarray) -> np.ndarray:
    """A reference sheet as a player would upload it again: enlarged to 300 x 300, stored as JPEG (80)."""
    buf = io.BytesIO()
    Image.fromarray(sheet).resize((300, 300), Image.BILINEAR).save(buf, format="JPEG", quality=80)
    return np.asarray(Image.open(buf).convert("RGB"))


def fit_report(truth: dict, fits: dict) -> dict:
    """How well the parameters were read: exact hair style, outfit, accessory set; colour error (mean
    absolute per channel, 0-255) of hair, top and skin; height error; seconds per fit."""
    rows = [(truth[c], f) for c, f in fits.items()]
    err = lambda a, b: float(np.abs(np.subtract(a, b)).mean())  # noqa: E731
    return {"hair style": float(np.mean([t.hair_style == f.spec.hair_style for t, f in rows])),
            "outfit": float(np.mean([t.outfit_type == f.spec.outfit_type for t, f in rows])),
            "accessories": float(np.mean([sorted(a.type for a in t.accessories) ==
                                          sorted(a.type for a in f.spec.accessories) for t, f in rows])),
            "colour error": {k: float(np.mean([err(getattr(t, k), getattr(f.spec, k)) for t, f in rows]))
                             for k in ("hair_color", "top", "skin")},
            "height error": float(np.mean([abs(t.height - f.spec.height) for t, f in rows])),
            "fit error": float(np.mean([f.error for _, f in rows])),
            "seconds": float(np.mean([f.seconds for _, f in rows]))}


def recoloured(spec, shift: float = 0.5):
    """The same character with the hue of its hair and outfit turned by ``shift`` of the colour circle."""
    def turn(c):
        h, sat, v = colorsys.rgb_to_hsv(*(x / 255 for x in c))
        return tuple(round(x * 255) for x in colorsys.hsv_to_rgb((h + shift) % 1.0, sat, v))
    return dataclasses.replace(spec, hair_color=turn(spec.hair_color), top=turn(spec.top), bottom=turn(spec.bottom))


def colour_test(model: str | None, characters: list, instructions: tuple[str, ...], store: Path) -> dict:
    """The issue's colour test: the same instructions and seed with a character and its recoloured copy
    (under the same name, in two games). Does the mean colour difference of the two games' frames point
    the same way as that of the two reference pictures?"""
    cosines = []
    for k, spec in enumerate(characters):
        means = []
        for j, version in enumerate((spec, recoloured(spec))):
            game = Game.load(model, store=store / f"{k}_{j}")
            neko = dataclasses.replace(version, name="Neko")
            sheet = io.BytesIO()
            Image.fromarray(reference_sheet(neko, 256)).save(sheet, format="PNG")
            # kept in the book as `characters add` keeps one: the game stands it in play from its reference sheet
            game.characters.adopt("Neko", {"description": neko.description, "entry": character_entry(neko),
                                           "understood": [], "picture": False, "created_at": 0.0},
                                  sheet.getvalue(), None)
            game.custom = game.characters.characters()
            game.cast.append("Neko")
            session = game.new_session(["Neko"], seed=100 + k)
            frames = np.concatenate([session.step(t).frames for t in instructions])
            ref = reference_sheet(neko).astype(np.float64)
            means.append((frames.reshape(-1, 3).mean(0), ref.reshape(-1, 3).mean(0)))
        d_game, d_ref = means[0][0] - means[1][0], means[0][1] - means[1][1]
        cosines.append(float(d_game @ d_ref / (np.linalg.norm(d_game) * np.linalg.norm(d_ref) + 1e-9)))
    return {"cosines": cosines, "same_direction": sum(c > 0 for c in cosines), "of": len(cosines),
            "mean_cosine": float(np.mean(cosines)), "instructions": list(instructions)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    ap.add_argument("--evaluator", default=str(Path(__file__).resolve().parents[1] / "animegamer" / "weights" /
                                               "evaluator"))
    ap.add_argument("--seed", type=int, default=4200)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    game = Game.load(a.model, store=Path("/tmp") / "animegamer-probe-store")
    ev = Evaluator.load(a.evaluator)
    reid_dir = Path(a.evaluator) / REID_DIR
    reid = CharacterReID.from_pretrained(reid_dir) if reid_dir.is_dir() else None
    known = list(load_cast())[:8]
    held = held_out_characters(8)
    rows: list[np.ndarray] = []
    fit_rows: list[np.ndarray] = []
    result = {"known (seen in training)": probe(game, ev, known, {}, a.seed, reid=reid),
              "held out (never seen)": probe(game, ev, [h.name for h in held], {h.name: h for h in held}, a.seed,
                                             rows, fit_rows, reid),
              "actions": [list(x) for x in ACTIONS], "seed": a.seed, "gallery": 8}
    result["colour test (held out, hue turned half a circle)"] = colour_test(
        a.model, held, ("Character: Neko; Motion: wave; Background: day meadow.", "Neko walks slowly in the town",
                        "Character: Neko; Motion: happily dance; Background: sunset beach."),
        Path(tempfile.mkdtemp(prefix="animegamer-colour-")))
    print(json.dumps({k: v for k, v in result.items() if k != "actions"}, indent=1))
    if a.out:
        write_json(a.out, result)
        sheet = np.concatenate([np.concatenate([r, np.full((6, r.shape[1], 3), 255, np.uint8)]) for r in rows])
        save_png(sheet, a.out.with_suffix(".png"))  # held-out characters, one calm action: anchor | drawn 0, mid, last | truth
        sheet = np.concatenate([np.concatenate([r, np.full((6, r.shape[1], 3), 255, np.uint8)]) for r in fit_rows])
        save_png(sheet, a.out.with_name(a.out.stem + "_fitted.png"))  # upload | sheet read | drawn 0, mid, last | truth


if __name__ == "__main__":
    main()
