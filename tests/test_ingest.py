"""`animegamer ingest` on films written in the test: cuts, clips, levels, annotations, resume, bad input."""
from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest

from animegamer.cli import main
from animegamer.core.atomic_io import write_text
from animegamer.core.video_io import save_mp4
from animegamer.ingest.bench import grade, world_annotations, world_film
from animegamer.game.session import Game, GameInputError
from animegamer.ingest import build
from animegamer.ingest.annotations import COLUMNS, read_annotations
from animegamer.ingest.build import TEMPLATE_NAME, IngestConfig, ingest
from animegamer.ingest.mix import mix_datasets, parse_part
from animegamer.ingest.shots import ClipCutter, CutConfig
from animegamer.ingest.video import IngestError
from animegamer.models.frame_classifier import FRAME_DIR, FrameClassifier
from animegamer.world.cast import load_cast
from animegamer.world.place_art import load_places
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset

SHOT_S = 17 / 8


@pytest.fixture(scope="module")
def film(tmp_path_factory):
    """A world of 4 sessions x 3 turns as one 24 fps film (each drawing held 3 frames), with its rows."""
    root = tmp_path_factory.mktemp("film")
    render_dataset(RenderConfig(sessions=4, turns=3, seed=77, workers=1), root / "world", progress=False)
    rows = world_film(WorldDataset(root / "world"), root / "film.mp4")
    return root / "film.mp4", rows


def test_cutter_never_puts_a_cut_inside_a_clip():
    """Solid colours with cuts at known frames; clips of 5 with stride 3 inside each shot only."""
    rng = np.random.default_rng(0)
    lengths = [12, 3, 9, 20]  # the 3-frame shot is too short for a clip
    frames = np.concatenate([np.repeat(rng.integers(0, 255, (1, 32, 48, 3), dtype=np.uint8), n, axis=0)
                             for n in lengths])
    frames = frames + rng.integers(0, 3, frames.shape, dtype=np.uint8)  # a little noise inside each shot
    cutter = ClipCutter(CutConfig(min_shot_frames=2), fps=8.0, clip_frames=5, stride=3)
    clips = [c for f in frames for c in cutter.push(f)] + cutter.finish()
    assert cutter.cuts == [12, 15, 24]
    bounds = [0, 12, 15, 24, 44]
    for c in clips:
        shot = next(k for k in range(4) if bounds[k] <= c.start < bounds[k + 1])
        assert c.start + 5 <= bounds[shot + 1] and np.array_equal(c.frames, frames[c.start:c.start + 5])
    assert [c.start for c in clips] == [0, 3, 6, 15, 18, 24, 27, 30, 33, 36, 39]
    assert len(cutter.buffer) == 0


def test_ingest_a_world_film(film, tmp_path):
    path, truth = film
    meta = ingest([path], tmp_path / "data", IngestConfig(session_turns=3), progress=False)
    data = WorldDataset(tmp_path / "data")  # what every training phase reads
    assert meta["ingest"]["sources"][0]["clips"] == len(data.rows) and meta["turns_total"] == len(data.rows)
    g = grade(truth, data, 17)
    assert g["cuts"]["precision"] >= 0.9
    for kind in ("new session", "new place"):  # a new scene is always found
        v = g["cuts"]["recall_by_kind"].get(kind)
        assert v is None or v["recall"] == 1.0
    assert g["clips"]["on_a_world_shot"] >= 0.8 * len(truth) and g["clips"]["level_agreement"] >= 0.8
    r = data.rows[0]
    assert r["characters"] == [] and r["instruction"] is None and not r["annotated"]  # unknown, not invented
    assert data.frames(r).shape == (17, 96, 144, 3) and r["source"]["file"] == "film.mp4"
    header = (tmp_path / "data" / TEMPLATE_NAME).read_text().splitlines()[0].split(",")
    assert header == list(COLUMNS)
    # the world's labels as an annotation file reproduce the world's fields (a rerun: the video is skipped)
    notes = write_text(tmp_path / "labels.csv", world_annotations(truth, path.name, SHOT_S))
    meta2 = ingest([path], tmp_path / "data", IngestConfig(session_turns=3), annotations=notes, progress=False)
    assert meta2["ingest"]["videos_skipped_as_done"] == 1
    g = grade(truth, WorldDataset(tmp_path / "data"), 17)
    assert g["annotations"]["clips_annotated"] == g["clips"]["on_a_world_shot"]
    assert all(v == 1.0 for k, v in g["annotations"].items() if k.endswith("_equal")), g["annotations"]
    first = WorldDataset(tmp_path / "data").rows[0]
    assert first["annotated"] and first["states_after"] is not None and first["instruction"] == truth[0]["instruction"]


def test_interrupted_ingest_continues(film, tmp_path, monkeypatch):
    path, _ = film
    calls = {"n": 0}
    real = build.flow_magnitude

    def dies(frames):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(frames)

    monkeypatch.setattr(build, "flow_magnitude", dies)
    with pytest.raises(KeyboardInterrupt):
        ingest([path], tmp_path / "data", progress=False)
    assert not (tmp_path / "data" / "meta.json").exists() and not list((tmp_path / "data" / "sources").glob("*"))
    monkeypatch.setattr(build, "flow_magnitude", real)
    meta = ingest([path], tmp_path / "data", progress=False)
    shots = sorted((tmp_path / "data" / "shots").glob("*.npz"))
    assert len(shots) == meta["turns_total"]  # the interrupted run's clips were replaced, none left over
    again = ingest([path], tmp_path / "data", progress=False)
    assert again["ingest"]["videos_skipped_as_done"] == 1 and again["turns_total"] == meta["turns_total"]


def test_bad_files_and_annotations(film, tmp_path):
    path, _ = film
    (tmp_path / "text.mp4").write_text("not a video")
    with pytest.raises(IngestError, match="cannot decode"):
        ingest([tmp_path / "text.mp4"], tmp_path / "x", progress=False)
    with pytest.raises(IngestError, match="no such file"):
        ingest([tmp_path / "missing.mp4"], tmp_path / "x", progress=False)
    save_mp4(np.zeros((10, 96, 144, 3), np.uint8), tmp_path / "short.mp4", fps=8)
    with pytest.raises(IngestError, match="shorter than one clip"):
        ingest([path, tmp_path / "short.mp4"], tmp_path / "x", progress=False)
    with pytest.raises(IngestError, match="given twice"):
        ingest([path, path], tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()  # nothing written for a bad call

    ingest([path], tmp_path / "data", progress=False)
    before = (tmp_path / "data" / "turns.jsonl").read_bytes()
    bad = {
        "clip,characters\nnope_00001,Qiqi\n": "match no clip",
        "source,start_s,end_s,characters\nother.mp4,0,2,Qiqi\n": "match no clip",
        "source,start_s,end_s,characters\nfilm.mp4,9999,10000,Qiqi\n": "match no clip",
        "source,start_s,end_s,characters\nfilm.mp4,2,1,Qiqi\n": "not after start_s",
        "clip,stamina,social,entertainment\nx,2,0,0\n": "stamina must be one of",
        "clip,stamina\nx,1\n": "all three state changes",
        "clip,colour\nx,red\n": "unknown column",
        "characters\nQiqi\n": "name the clips",
    }
    for k, (text, match) in enumerate(bad.items()):
        notes = write_text(tmp_path / f"bad{k}.csv", text)
        with pytest.raises(IngestError, match=match):
            ingest([path], tmp_path / "data", annotations=notes, progress=False)
        assert (tmp_path / "data" / "turns.jsonl").read_bytes() == before  # unchanged
    (tmp_path / "bad.json").write_text('{"clip": 1}')
    with pytest.raises(IngestError, match="list of objects"):
        read_annotations(tmp_path / "bad.json")
    render_dataset(RenderConfig(sessions=1, turns=1, seed=1, workers=1), tmp_path / "world", progress=False)
    with pytest.raises(IngestError, match="rendered world"):
        ingest([path], tmp_path / "world", progress=False)


def test_cli(film, tmp_path, capsys):
    path, _ = film
    assert main(["ingest", str(path), "--out", str(tmp_path / "d"), "--session-turns", "4", "--refit-levels",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "film.mp4" in out and "shots" in out and TEMPLATE_NAME in out
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["max_turns"] == 4 and max(meta["level_counts"].values()) < meta["turns_total"]
    assert main(["ingest", str(tmp_path / "none.mp4"), "--out", str(tmp_path / "e")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_film_recipe_ingest_finetune_play(film, tmp_path):
    """The documented path: ingest with annotations -> mix with the world -> fine-tune the shipped model (a
    step each) -> play."""
    path, truth = film
    # the film's characters get names of their own, not the world's
    labels = world_annotations(truth, path.name, SHOT_S)
    for name in load_cast():
        labels = re.sub(rf"\b{name}\b", f"{name}ko", labels)
    rows = list(csv.DictReader(io.StringIO(labels)))
    for row in rows[1::2]:  # as a person who cannot tell a character's stamina from the picture writes them
        row.update(stamina="", social="", entertainment="")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    notes = write_text(tmp_path / "labels.csv", buf.getvalue())
    runs = tmp_path / "runs"
    assert main(["recipe", "film", "--out", str(runs), "--no-progress", "--set", f"videos={path}",
                 "--set", f"annotations={notes}", "--set", "decoder_steps=1", "--set", "engine_steps=1",
                 "--set", "batch_size=2", "--set", "engine_eval=--eval-windows 1 --eval-sessions 1",
                 "--set", "world_sessions=2", "--set", "threads=1"]) == 0
    assert WorldDataset(runs / "data" / "mix").meta["mix"][1]["sessions"] == 2  # the world mixed in
    assert any(r["deltas"] is None for r in WorldDataset(runs / "data" / "film").rows)  # trained all the same
    game = Game.load(runs / "model", store=tmp_path / "saves")
    assert game.cast and all(c.endswith("ko") for c in game.cast)  # the model's cast is the film's
    film_places = {r["place"] for r in WorldDataset(runs / "data" / "film").rows if r.get("place")}
    assert game.places and set(game.places) <= film_places  # the places the helper offers: the film's
    hero = game.cast[0]
    with pytest.raises(GameInputError, match="unknown character"):
        game.new_session(["Qiqi"])
    turn = game.new_session([hero], seed=1).step(f"Character: {hero}; Motion: quickly run; Background: day town.")
    assert turn.frames.shape == (17, 96, 144, 3) and 1 <= turn.motion_level <= 5
    assert turn.anchor == "retrieved"  # drawn from a clip of the film


def test_mix_weights_sessions_without_copying(film, tmp_path, capsys):
    world = film[0].parent / "world"  # 4 sessions of 3 turns
    render_dataset(RenderConfig(sessions=6, turns=2, seed=78, workers=1), tmp_path / "other", progress=False)
    assert main(["mix", f"{world}:2", f"{tmp_path / 'other'}:0.5", "--out", str(tmp_path / "mix")]) == 0
    assert "8 of 4 sessions" in capsys.readouterr().out
    mixed = WorldDataset(tmp_path / "mix")
    assert mixed.meta["sessions"] == 4 * 2 + 3 and len(mixed.rows) == 4 * 2 * 3 + 3 * 2
    assert not (tmp_path / "mix" / "shots").exists()  # no clip copied
    a, b = WorldDataset(world), WorldDataset(tmp_path / "other")
    first = a.sessions()[0]
    assert [r["split"] for r in mixed.sessions()[0]] == [r["split"] for r in first]  # splits kept
    assert np.array_equal(mixed.frames(mixed.rows[0]), a.frames(first[0]))
    assert {r["mixed_from"] for r in mixed.rows} == {str(a.root.resolve()), str(b.root.resolve())}
    render_dataset(RenderConfig(sessions=1, turns=1, seed=1, height=48, width=72, workers=1), tmp_path / "small",
                   progress=False)
    with pytest.raises(IngestError, match="other shots"):
        mix_datasets([(world, 1.0), (tmp_path / "small", 1.0)], tmp_path / "bad")
    with pytest.raises(IngestError, match="positive number"):
        parse_part(f"{world}:-1")
    assert parse_part(f"{world}") == (str(world), 1.0) and parse_part(f"{world}:0.25") == (str(world), 0.25)


def test_frame_classifier_learns_a_films_own_names(film, tmp_path, capsys):
    """`train frames --data FILM`: the grader of who / where / when for a film is trained on its annotated
    clips, with the film's names as its classes; a film nobody annotated gets a clear error."""
    path, truth = film
    ingest([path], tmp_path / "bare", IngestConfig(session_turns=3), progress=False)
    assert main(["train", "frames", "--preset", "tiny", "--data", str(tmp_path / "bare"), "--out",
                 str(tmp_path / "f0"), "--no-progress"]) != 0
    assert "complete the annotations" in capsys.readouterr().err
    labels = world_annotations(truth, path.name, SHOT_S)
    for name in [*load_cast(), *load_places()]:  # a film's own characters and places
        labels = re.sub(rf"\b{name}\b", f"{name}ko", labels)
    notes = write_text(tmp_path / "labels.csv", labels)
    ingest([path], tmp_path / "data", IngestConfig(session_turns=3), annotations=notes, progress=False)
    assert main(["train", "frames", "--preset", "tiny", "--data", str(tmp_path / "data"), "--out",
                 str(tmp_path / "frames"), "--no-progress"]) == 0
    clf = FrameClassifier.from_pretrained(tmp_path / "frames" / "final" / FRAME_DIR)
    rows = [r for r in WorldDataset(tmp_path / "data").rows if r["annotated"]]
    assert clf.characters == sorted({c for r in rows for c in r["characters"]})
    assert clf.places == sorted({r["place"] for r in rows}) and all(p.endswith("ko") for p in clf.places)
    assert all(c.endswith("ko") for c in clf.characters) and set(clf.times) <= {"day", "sunset", "night"}
    metrics = json.loads((tmp_path / "frames" / "final" / "metrics.json").read_text())
    assert metrics["eval"]["heldout_shots"] > 0 and 0 <= metrics["eval"]["place"] <= 1
