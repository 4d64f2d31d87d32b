"""Character re-identification (models/character_reid.py, `train reid`) and naming clips by reference
pictures (evaluation/character_match.py, `annotate --references`)."""
from __future__ import annotations

import csv
import json

import torch
import yaml
from PIL import Image

from animegamer.cli import main
from animegamer.ingest.bench import world_film
from animegamer.evaluation.character_match import ReferenceGallery
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.ingest.build import IngestConfig, ingest
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.world.cast import load_cast
from animegamer.world.character_gen import character_entry, random_character, reference_sheet
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset
from animegamer.world.instructions import Action
from animegamer.world.shot import render_action

torch.set_num_threads(1)


def test_train_reid_on_drawn_characters_then_embed(tmp_path):
    cast = {f"Drawn{i}": character_entry(random_character(i, f"Drawn{i}")) for i in range(4)}
    (tmp_path / "cast.yaml").write_text(yaml.safe_dump({"characters": cast}))
    render_dataset(RenderConfig(sessions=4, turns=2, seed=3, workers=1, cast=str(tmp_path / "cast.yaml")),
                   tmp_path / "world", progress=False)
    assert main(["train", "reid", "--preset", "tiny", "--data", str(tmp_path / "world"), "--out",
                 str(tmp_path / "reid"), "--no-progress"]) == 0
    reid = CharacterReID.from_pretrained(tmp_path / "reid")  # a run dir finds final/character_reid
    frames = WorldDataset(tmp_path / "world").frames(WorldDataset(tmp_path / "world").rows[0])
    e = reid.embed(frames[::4])
    assert e.shape == (16,) and abs(float(e.norm()) - 1) < 1e-4


def test_one_character_is_not_enough_to_learn_identities(tmp_path, capsys):
    render_dataset(RenderConfig(sessions=2, turns=2, seed=3, workers=1), tmp_path / "world", progress=False)
    rows = WorldDataset(tmp_path / "world").rows
    one = rows[0]["characters"][0]
    for r in rows:  # every shot the same single character
        r["characters"] = [one]
    (tmp_path / "world" / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["train", "reid", "--preset", "tiny", "--data", str(tmp_path / "world"), "--out",
                 str(tmp_path / "reid"), "--no-progress"]) == 2
    assert "one character only" in capsys.readouterr().err and not (tmp_path / "reid" / "final").exists()


def test_the_shipped_network_names_world_clips_by_reference_sheets():
    """With the shipped network, three of the world's characters' reference sheets name their own clips."""
    reid = CharacterReID.from_pretrained(DEFAULT_EVALUATOR / REID_DIR)
    cast = load_cast()
    names = ["Qiqi", "Ren", "Hana"]
    gallery = ReferenceGallery.from_pictures({n: reference_sheet(cast[n], 256) for n in names}, reid)
    right = 0
    for n in names:
        clip = render_action(Action((n,), "walk", "", "countryside", "day"), seed=7)
        who, scores = gallery.name(clip)
        right += who[0] == n
        assert len(scores) == len(who) and all(-1 <= s <= 1 for s in scores)
    assert right >= 2


def test_annotate_by_references_writes_the_characters_column(tmp_path, capsys):
    render_dataset(RenderConfig(sessions=2, turns=2, seed=81, workers=1), tmp_path / "world", progress=False)
    world_film(WorldDataset(tmp_path / "world"), tmp_path / "film.mp4")
    ingest([tmp_path / "film.mp4"], tmp_path / "data", IngestConfig(session_turns=2), progress=False)
    refs = tmp_path / "refs"
    refs.mkdir()
    cast = load_cast()
    for n in ("Qiqi", "Ren"):
        Image.fromarray(reference_sheet(cast[n], 256)).save(refs / f"{n}.png")
    out = tmp_path / "who.csv"
    assert main(["annotate", str(tmp_path / "data"), "--references", str(refs), "--out", str(out),
                 "--no-progress"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["characters"] in ("Qiqi", "Ren", "Qiqi;Ren", "Ren;Qiqi") for r in rows)
    assert main(["ingest", str(tmp_path / "film.mp4"), "--out", str(tmp_path / "data"), "--annotations", str(out),
                 "--no-progress"]) == 0  # the file applies as a person's would
    capsys.readouterr()
    assert main(["annotate", str(tmp_path / "data"), "--out", str(out)]) == 2
    assert "--vlm DIR" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["annotate", str(tmp_path / "data"), "--references", str(empty), "--out", str(out)]) == 2
    assert "no pictures" in capsys.readouterr().err
