"""What fine-tuning on a film buys: the film's held-out sessions played by the fine-tuned model and by
the shipped model that meets the film's characters only as pictures.

    # a "film" of 10 characters no model has seen (the reference-matching cast), its truth as annotations
    bin/animegamer world render --sessions 120 --turns 5 --seed 9500 --cast runs/match/held_cast10.yaml \
        --out runs/film/world
    .venv/bin/python experiments/film_finetune.py film runs/film/world --out runs/film
    bin/animegamer recipe film --out runs/film/run --set videos=runs/film/film.mp4 \
        --set annotations=runs/film/annotations.csv
    .venv/bin/python experiments/film_finetune.py eval runs/film/run --cast runs/match/held_cast10.yaml \
        --out runs/film/film_finetune.json
    # a film in another style (experiments/sprite_film.py): pictures from a folder, graded by a frame
    # classifier trained on another seed of that film (train frames --data), which also grades the place
    .venv/bin/python experiments/film_finetune.py eval RUN --references runs/sprite/film/references \
        --frames-grader runs/sprite/frames/final/frame_classifier [--film runs/sprite/ingested2]

``film``: the world's sessions one after another as one MP4 with hard cuts, and its labels as the
annotation file a person would complete (`bench-ingest`'s own film and annotations).

``eval``: every held-out (val and test) session of the ingested film is played turn by turn from its true
states with its instructions, through
- ``fine-tuned``: the recipe's model, whose cast is the film's characters;
- ``pictures``: the shipped model with each film character added from one picture (its reference
  sheet, re-uploaded as a player would), the way a player without a fine-tune would play them.
Both play each session with the same seed. Graded on each turn:
- who is on screen: the re-identification gallery of the 10 characters' pictures
  (`evaluation/character_match.py`) names the drawn shot; right when the nearest is one of the turn's
  true characters (chance 1/10); the film's own clip graded the same way is the instrument's ceiling;
- the motion level: the engine's level against the clip's measured one;
- the states: the engine's deltas against the annotated ones.
Paired differences (fine-tuned - pictures) over the same turns, with standard errors.
``--film DIR`` plays every session of another ingested film of the same characters instead (more turns
than a film's held-out split); ``--device cuda`` plays both games on a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from animegamer.core.atomic_io import write_json, write_text
from animegamer.ingest.bench import world_annotations, world_film
from animegamer.evaluation.character_match import PICTURE_SUFFIXES, ReferenceGallery
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.game.characters import read_picture
from animegamer.game.session import Game
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.models.frame_classifier import FrameClassifier
from animegamer.world.cast import parse_cast
from animegamer.world.character_gen import reference_sheet
from animegamer.world.dataset import WorldDataset
from animegamer.world.preview import save_png

sys.path.insert(0, str(Path(__file__).resolve().parent))
from custom_character_probe import reuploaded  # noqa: E402


def make_film(world_dir: str, out: Path) -> None:
    world = WorldDataset(world_dir)
    out.mkdir(parents=True, exist_ok=True)
    film = out / "film.mp4"
    rows = world_film(world, film)
    frames_per_shot = world.frames(rows[0]).shape[0]
    shot_seconds = frames_per_shot / world.meta["fps"]
    write_text(out / "annotations.csv", world_annotations(rows, film.name, shot_seconds))
    print(f"wrote {film} ({len(rows)} shots) and {out / 'annotations.csv'}")


def _mean_se(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=float)
    return {"mean": float(a.mean()), "se": float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0, "n": len(a)}


class Grader:
    """Who is on screen (and, with a frame classifier, where): the re-identification gallery of the
    characters' pictures (a film drawn like the world), or a frame classifier trained on another part of
    the film (`train frames --data`: a film in another style, where the gallery is near chance)."""

    def __init__(self, gallery: ReferenceGallery | None = None, classifier: FrameClassifier | None = None) -> None:
        self.gallery, self.classifier = gallery, classifier

    def read(self, frames: np.ndarray, row: dict) -> dict:
        if self.classifier is not None:
            seen = self.classifier.read_shot(frames, 1)
            return {"named": seen["characters"], "right": seen["characters"][0] in row["characters"],
                    "place_right": seen["place"] == row.get("place")}
        who, _ = self.gallery.name(frames)
        return {"named": who, "right": who[0] in row["characters"]}


def play(game: Game, sessions: list[list[dict]], grader: Grader, label: str) -> list[dict]:
    rows = []
    for k, session in enumerate(tqdm(sessions, desc=label)):
        cast = list(dict.fromkeys(c for r in session for c in r["characters"]))  # everyone the session names
        gs = game.new_session(cast, seed=1000 + k, states=session[0]["states_before"])
        for r in session:
            turn = gs.step(r["instruction"])
            rows.append({"session": r["session"], "turn": r["turn"], "characters": r["characters"],
                         **grader.read(turn.frames, r), "level": turn.motion_level, "true_level": r["motion_level"],
                         "deltas": turn.deltas, "true_deltas": r["deltas"], "frames": turn.frames})
    return rows


def character_pictures(cast_file: str | None, references: Path | None) -> dict[str, np.ndarray]:
    """One picture per character: the cast's reference sheets re-uploaded, or a folder of pictures."""
    if references is not None:
        return {p.stem: read_picture(p) for p in sorted(references.iterdir()) if p.suffix.lower() in PICTURE_SUFFIXES}
    specs = parse_cast(yaml.safe_load(Path(cast_file).read_text()), cast_file)
    return {n: reuploaded(reference_sheet(s, 256)) for n, s in specs.items()}


def evaluate(run: Path, cast_file: str | None, out: Path | None, reid_path: str, sheet: Path | None,
             model: Path | None = None, references: Path | None = None, frames_grader: Path | None = None,
             device: str = "cpu", held_out_film: Path | None = None) -> dict:
    # the run's own film: its val and test sessions (neither is trained on); another film: all of it
    film = WorldDataset(held_out_film or run / "data" / "film")
    test = film.sessions() if held_out_film else film.sessions("val") + film.sessions("test")
    pictures = character_pictures(cast_file, references)
    grader = (Grader(classifier=FrameClassifier.from_pretrained(frames_grader)) if frames_grader is not None else
              Grader(ReferenceGallery.from_pictures(pictures, CharacterReID.from_pretrained(reid_path), progress=True)))
    truth = [grader.read(film.frames(r), r) for s in test for r in s]
    with tempfile.TemporaryDirectory() as tmp:
        tuned = Game.load(model or run / "model", store=Path(tmp) / "tuned", device=device)
        shipped = Game.load(store=Path(tmp) / "shipped", device=device)
        for name, picture in pictures.items():
            path = Path(tmp) / f"{name}.png"
            save_png(picture, path)
            shipped.add_character(name, image=path)
        systems = {"fine-tuned": play(tuned, test, grader, "fine-tuned"),
                   "pictures": play(shipped, test, grader, "pictures")}
    result = {"run": str(run), "model": str(model or run / "model"), "cast": cast_file or str(references),
              "film": str(held_out_film or run / "data" / "film"),
              "grader": str(frames_grader) if frames_grader else "reid gallery", "test sessions": len(test),
              "turns": len(truth), "chance": 1 / len(pictures),
              "film clip (ceiling)": _mean_se([t["right"] for t in truth])}
    if frames_grader:
        result["film clip (ceiling)"]["place"] = _mean_se([t["place_right"] for t in truth])
    for name, rows in systems.items():
        known = [r for r in rows if r["true_deltas"] is not None]  # state changes a film's annotations gave
        result[name] = {
            "who is on screen": _mean_se([r["right"] for r in rows]),
            "level = clip's": _mean_se([r["level"] == r["true_level"] for r in rows]),
            "deltas exact": _mean_se([all(r["deltas"][k] == v for k, v in r["true_deltas"].items()) for r in known])
            if known else None,
            **({"place": _mean_se([r["place_right"] for r in rows])} if frames_grader else {}),
        }
    a, b = systems["fine-tuned"], systems["pictures"]
    result["paired (fine-tuned - pictures)"] = {
        "who is on screen": _mean_se([float(x["right"]) - float(y["right"]) for x, y in zip(a, b)]),
        "level = clip's": _mean_se([float(x["level"] == x["true_level"]) - float(y["level"] == y["true_level"])
                                    for x, y in zip(a, b)]),
        **({"place": _mean_se([float(x["place_right"]) - float(y["place_right"]) for x, y in zip(a, b)])}
           if frames_grader else {}),
    }
    print(json.dumps(result, indent=1))
    if out:
        write_json(out, result)
    if sheet:
        _contact_sheet(film, test, systems, sheet)
    return result


def _contact_sheet(film: WorldDataset, test: list[list[dict]], systems: dict, path: Path, n: int = 12) -> None:
    """Rows: the film's clip | fine-tuned | pictures (first, middle and last frame of each)."""
    rows_out = []
    flat = [r for s in test for r in s]
    for i in np.linspace(0, len(flat) - 1, n).astype(int):
        clip = film.frames(flat[i])
        cells = [clip] + [systems[k][i]["frames"] for k in ("fine-tuned", "pictures")]
        rows_out.append(np.concatenate([np.concatenate([c[0], c[len(c) // 2], c[-1]], axis=1) for c in cells], axis=1))
    save_png(np.concatenate(rows_out, axis=0), path)
    print(f"wrote {path} (film clip | fine-tuned | pictures; first, middle, last frame)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("film")
    f.add_argument("world")
    f.add_argument("--out", type=Path, required=True)
    e = sub.add_parser("eval")
    e.add_argument("run", type=Path)
    who = e.add_mutually_exclusive_group(required=True)
    who.add_argument("--cast", help="the film's world cast file (its characters' reference sheets)")
    who.add_argument("--references", type=Path, help="a folder of one picture per character (NAME.png)")
    e.add_argument("--frames-grader", type=Path, default=None,
                   help="a frame classifier trained on another part of the film (train frames --data): grades "
                        "who and where; default: the reid gallery of the pictures")
    e.add_argument("--reid", default=str(DEFAULT_EVALUATOR / REID_DIR))
    e.add_argument("--out", type=Path, default=None)
    e.add_argument("--sheet", type=Path, default=None, help="contact sheet PNG/JPG")
    e.add_argument("--model", type=Path, default=None, help="the fine-tuned model (default: RUN/model)")
    e.add_argument("--device", default="cpu", help="where both games play: cpu, cuda, auto (default: %(default)s)")
    e.add_argument("--film", type=Path, default=None,
                   help="play every session of another ingested film of the same characters (a held-out film) "
                        "instead of the run's own held-out sessions")
    a = ap.parse_args()
    if a.what == "film":
        make_film(a.world, a.out)
    else:
        evaluate(a.run, a.cast, a.out, a.reid, a.sheet, a.model, a.references, a.frames_grader, a.device, a.film)


if __name__ == "__main__":
    main()
