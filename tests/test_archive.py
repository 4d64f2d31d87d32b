"""A saved game as one file (game/archive.py): archived with its custom characters, restored elsewhere with
the same context, and refused whole when the file or the characters do not fit."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
from safetensors.numpy import save as save_np
from tiny_game import CAST

from animegamer.cli import main
from animegamer.game.api import ServeConfig, create_app
from animegamer.game.archive import ArchiveError, read_archive
from animegamer.game.session import Game
from animegamer.game.web import build_app
from animegamer.game.store import SessionStore, frames_of
from animegamer.world.character_gen import random_character, reference_sheet

torch.set_num_threads(1)
NEKO = "a girl with short green hair in a red hoodie, with a scarf"


def _played(models, root, picture=None) -> tuple[Game, str]:
    game = Game.from_models(*models, store=root, cast=CAST)
    game.add_character("Neko", NEKO)
    if picture is not None:
        game.add_character("Momo", image=picture)
    names = ["Neko", "Qiqi"] + (["Momo"] if picture is not None else [])
    session = game.new_session(names, seed=3)
    session.step("Neko waves at Qiqi")
    session.step("Qiqi runs in the town")
    return game, session.id


def test_archive_and_restore_on_another_machine_keeps_the_game_and_its_characters(models, tmp_path):
    sheet = tmp_path / "momo.png"
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(sheet)
    game, gid = _played(models, tmp_path / "here", picture=sheet)
    path = game.archive_session(gid, tmp_path / "neko.zip")
    elsewhere = Game.from_models(*models, store=tmp_path / "there", cast=CAST)
    assert "Neko" not in elsewhere.cast
    restored = elsewhere.restore_session(path)
    assert restored == gid  # the id is free there, so it is kept
    assert elsewhere.cast == CAST + ["Neko", "Momo"] and elsewhere.custom["Momo"].sprite.is_file()
    assert elsewhere.custom["Neko"].spec == game.custom["Neko"].spec
    a, b = game.open_session(gid), elsewhere.open_session(restored)
    assert [t.instruction for t in b.turns] == [t.instruction for t in a.turns]
    assert all(torch.equal(x.s_a, y.s_a) for x, y in zip(a.turns, b.turns)) and b.states == a.states
    assert all(np.array_equal(frames_of(x.clip), frames_of(y.clip)) for x, y in
               zip(game.store.load_turns(gid), elsewhere.store.load_turns(restored)))
    # the game goes on there exactly as here: same seed, same context, same next turn
    assert torch.equal(a.step("Neko sits down").s_a, b.step("Neko sits down").s_a)
    # restored again into the same saves: the characters are the same ones, the game gets a new id
    again = elsewhere.restore_session(path.read_bytes())
    assert again != gid and len(elsewhere.list_sessions()) == 2


def test_the_command_line_archives_and_restores(models, tmp_path, capsys):
    game, gid = _played(models, tmp_path / "here")
    out = tmp_path / "g.zip"
    assert main(["sessions", "--store", str(tmp_path / "here"), "archive", gid, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert main(["sessions", "--store", str(tmp_path / "there"), "restore", str(out)]) == 0
    assert f"restored {gid}: Neko, Qiqi, 2 turns" in capsys.readouterr().out
    assert main(["sessions", "--store", str(tmp_path / "there"), "restore", str(tmp_path / "nope.zip")]) == 2
    assert "no such file" in capsys.readouterr().err


def _rewrite(src, dst, change) -> None:
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    change(members)
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


@pytest.mark.parametrize("change,match", [
    (lambda m: m.pop("clips/0001.mp4"), "has no clips/0001.mp4"),
    (lambda m: m.update({"game.json": b"{"}), "is not JSON"),
    (lambda m: m.update({"game.json": json.dumps({**json.loads(m["game.json"]), "version": 99}).encode()}),
     "version 99"),
    (lambda m: m.update({"characters/0.png": b"not a png"}), "reference sheet is not a picture"),
    (lambda m: m.update({"layers/0001.safetensors": b"\x10" + b"\x00" * 7 + b"{not a header}  "}),
     "layers/0001.safetensors is not a scene in layers"),
    (lambda m: m.update({"layers/0001.safetensors": save_np(
        {"sprite0": np.zeros((4000, 2, 4), np.uint8)},
        {"place": "town", "time": "day", "actors": json.dumps([{"name": "Qiqi", "x": 1.0, "facing": 1}])})}),
     "sprite is uint8 \\(4000, 2, 4\\)"),
    (lambda m: m.update({"layers/0007.safetensors": b"x"}), "holds layers/0007.safetensors, which this saved game"),
])
def test_a_broken_file_is_refused_and_changes_nothing(models, tmp_path, change, match):
    game, gid = _played(models, tmp_path / "here")
    good = game.archive_session(gid, tmp_path / "good.zip")
    bad = tmp_path / "bad.zip"
    _rewrite(good, bad, change)
    elsewhere = Game.from_models(*models, store=tmp_path / "there", cast=CAST)
    with pytest.raises(ArchiveError, match=match):
        elsewhere.restore_session(bad)
    assert elsewhere.list_sessions() == [] and elsewhere.characters.names() == []
    assert not any((tmp_path / "there" / "clips").rglob("*.mp4"))
    with pytest.raises(ArchiveError, match="not a zip file"):
        read_archive(b"hello")


def test_a_different_character_of_the_same_name_is_not_overwritten(models, tmp_path):
    game, gid = _played(models, tmp_path / "here")
    path = game.archive_session(gid)
    assert path == SessionStore(tmp_path / "here").export_dir() / f"{gid}.zip"
    elsewhere = Game.from_models(*models, store=tmp_path / "there", cast=CAST)
    elsewhere.add_character("Neko", "a boy with spiky blue hair in a yellow hoodie")
    with pytest.raises(ArchiveError, match="already yours here and looks different"):
        elsewhere.restore_session(path)
    assert elsewhere.list_sessions() == [] and "spiky" in elsewhere.custom["Neko"].description


def test_the_http_api_downloads_and_restores_a_game(models, tmp_path):
    game, gid = _played(models, tmp_path / "here")
    with TestClient(create_app(game, ServeConfig())) as c:
        r = c.get(f"/games/{gid}/archive.zip")
        assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
        data = r.content
        assert c.get("/games/nope/archive.zip").status_code == 404
    elsewhere = Game.from_models(*models, store=tmp_path / "there", cast=CAST)
    with TestClient(create_app(elsewhere, ServeConfig(max_body_bytes=4096))) as c:  # a file may pass the JSON limit
        r = c.post("/games/restore", content=data, headers={"content-type": "application/zip"})
        assert r.status_code == 201, r.text
        assert r.json()["id"] == gid and r.json()["n_turns"] == 2 and r.json()["characters"] == ["Neko", "Qiqi"]
        bad = c.post("/games/restore", content=b"nope", headers={"content-type": "application/zip"})
        assert bad.status_code == 422 and "not a zip file" in bad.json()["error"]
    assert len(zipfile.ZipFile(io.BytesIO(data)).namelist()) == 6  # game, s_a, 2 clips, the book, Neko's sheet


def test_the_web_page_exports_the_saved_game_and_restores_it(models, tmp_path):
    game, gid = _played(models, tmp_path / "here")
    fn = lambda app, name: next(d.fn for d in app.fns.values() if getattr(d.fn, "__name__", "") == name)
    files, note = fn(build_app(game), "do_export")(game.open_session(gid))
    archive = files["value"][2]
    assert archive.endswith(f"{gid}.zip") and "with your characters" in note
    elsewhere = Game.from_models(*models, store=tmp_path / "there", cast=CAST)
    out = fn(build_app(elsewhere), "do_restore")(archive, None)
    session, message, chars, saved = out[0], out[5], out[-2], out[-1]
    assert session.id == gid and len(session.turns) == 2 and f"restored game {gid}" in message
    assert chars["value"] == ["Neko", "Qiqi"] and "Neko" in chars["choices"] and saved["value"] == gid
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"nope")
    assert "not a zip file" in fn(build_app(elsewhere), "do_restore")(str(broken), None)[5]
