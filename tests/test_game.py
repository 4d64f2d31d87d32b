"""The game session with tiny random models: turns, saved games, crash safety, bad input, export."""
from __future__ import annotations

import contextlib
import dataclasses
import sqlite3

import numpy as np
import pytest
import torch

from animegamer.core import devices
from animegamer.core.devices import DeviceError, resolve_device
from animegamer.engine.model import load_engine, save_engine
from animegamer.game.session import Game, GameInputError, check_instruction, kept_scene
from animegamer.game.store import _SCHEMA, DB_NAME, SCHEMA_VERSION, SessionStore, StoreError, frames_of, s_a_to_blob
from animegamer.world.instructions import known_places

torch.set_num_threads(1)
CAST = ["Qiqi", "Mika", "Ren"]
RUN = "Character: Qiqi; Motion: quickly run; Background: day town."


def context(session):
    return [(r.instruction, r.motion_level, r.deltas, r.states, r.s_a) for r in session.history()], session.states


def same_context(a, b):
    (ha, sa), (hb, sb) = a, b
    assert sa == sb and len(ha) == len(hb)
    for x, y in zip(ha, hb):
        assert x[:4] == y[:4]
        assert torch.equal(x[4], y[4])  # bit-exact s_a


def test_two_turns_save_reopen_continue(game, models, tmp_path):
    s = game.new_session(characters=["qiqi"], seed=7)
    assert s.characters == ["Qiqi"]
    t1 = s.step(RUN)
    t2 = s.step("Qiqi sits down under a tree and reads")
    assert t1.frames.dtype == np.uint8 and t1.frames.shape == (5, 8, 8, 3)
    assert 1 <= t2.motion_level <= 5 and set(t2.deltas) == {"stamina", "social", "entertainment"}
    assert t2.index == 1 and t2.states_before == t1.states and t2.video_path.is_file()
    assert all(0 <= v <= 100 and v % 5 == 0 for v in t2.states.values())

    # reopen from a fresh Game on the same store (a new process): identical context
    game2 = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    r = game2.open_session(s.id)
    same_context(context(r), context(s))
    assert r.turns[0].frames.shape == (5, 8, 8, 3)  # read back from the saved clip
    assert [x.id for x in game2.list_sessions()] == [s.id]

    # continuing the reopened game == continuing the original (same seed, same context)
    t3a = r.step("Character: Qiqi; Motion: happily dance; Background: night town.")
    game.engine.reset_cache()
    s_copy = game.open_session(s.id)
    assert len(s_copy.turns) == 3  # the turn r just played is saved
    # replay: a new game with the same seed and instructions plays the same turns
    replay = game.new_session(["Qiqi"], seed=7)
    for t in (t1, t2, t3a):
        u = replay.step(t.instruction)
        assert torch.equal(u.s_a, t.s_a) and u.motion_level == t.motion_level and u.deltas == t.deltas
        assert np.array_equal(frames_of(u.video_path), frames_of(t.video_path))  # the same shot saved
        assert u.seed == t.seed


def test_crash_while_saving_leaves_store_consistent(game, monkeypatch):
    s = game.new_session(["Qiqi"])
    s.step(RUN)
    before = context(s)
    store = game.store

    def crash(row):  # the clip is on disk, the transaction never commits
        assert row.clip.is_file()
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(store, "save_turn", crash)
    with pytest.raises(KeyboardInterrupt):
        s.step("Qiqi jumps")
    monkeypatch.undo()
    same_context(context(s), before)
    # a crash INSIDE the transaction (after the INSERT, before COMMIT) rolls it back
    class DyingClock:
        @staticmethod
        def time():
            raise RuntimeError("power cut")

    monkeypatch.setattr("animegamer.game.store.time", DyingClock)  # store's time.time() runs after the INSERT
    with pytest.raises(RuntimeError, match="power cut"):
        s.step("Qiqi jumps")
    monkeypatch.undo()
    reopened = game.open_session(s.id)
    same_context(context(reopened), before)
    assert len(store.load_turns(s.id)) == 1
    # a kill leaves an orphan clip at most: readers ignore it, clean_orphans removes it
    orphan = store.new_clip_path(s.id, 1)
    orphan.write_bytes(b"half")
    assert store.clean_orphans(grace_s=0) == [orphan]
    assert [p.name for p in store.clip_dir(s.id).iterdir()] == [reopened.turns[0].video_path.name]
    t = reopened.step("Qiqi jumps")  # the game goes on
    assert t.index == 1
    # two writers continuing the same game: the second cannot save turn 1 again
    with pytest.raises(StoreError, match="continued elsewhere"):
        s.step("Qiqi waves")
    assert len(store.load_turns(s.id)) == 2


@pytest.mark.parametrize("bad,match", [
    ("", "empty"), ("   \n ", "empty"), ("a" * 501, "501 characters"), ("run\x00fast", "control"),
    (b"\xff\xfe", "UTF-8"), ("\ud800 run", "broken"), ("!!! 123", "no words"),
    ("Character: Bob; Motion: run; Background: day town.", "unknown character 'Bob'"),
    ("Character: Qiqi, Mika; Motion: hug; Background: day town.", "Mika is not in this game"),
    ("Ren dances on the beach", "Ren is not in this game"),
])
def test_bad_input_changes_nothing(game, bad, match):
    s = game.new_session(["Qiqi"])
    s.step(RUN)
    before = context(s)
    files = sorted(game.store.clip_dir(s.id).iterdir())
    with pytest.raises(GameInputError, match=match):
        s.step(bad)
    same_context(context(s), before)
    assert len(game.store.load_turns(s.id)) == 1 and sorted(game.store.clip_dir(s.id).iterdir()) == files


def test_input_rules():
    assert check_instruction("  Qiqi   runs\nfast ", ["Qiqi"], CAST) == "Qiqi runs fast"
    assert check_instruction("a" * 500, ["Qiqi"], CAST) == "a" * 500
    assert check_instruction("the ren of the forest", ["Qiqi"], CAST)  # lowercase word, not the name
    assert check_instruction("Characters: qiqi and Mika; Motion: hug; Background: day town", ["Qiqi", "Mika"], CAST)
    with pytest.raises(GameInputError, match="unknown character"):
        Game.canonical_characters(type("G", (), {"cast": CAST})(), ["Nobody"])


def test_export_and_delete(game, tmp_path):
    s = game.new_session(["Qiqi", "Mika"])
    s.step(RUN)
    s.step("Character: Qiqi, Mika; Motion: happily hug; Background: sunset beach.")
    mp4, png = s.export(tmp_path / "out" / "game")
    from PIL import Image

    from animegamer.core.video_io import read_video

    video = read_video(mp4)
    assert video.shape[0] == 10 and video.shape[1] >= 256
    assert Image.open(png).size[0] > 2 * 256
    assert game.store.schema_version() == SCHEMA_VERSION == 2
    game.delete_session(s.id)
    assert s.id not in [x.id for x in game.list_sessions()]
    assert not game.store.clip_dir(s.id).exists()
    with pytest.raises(StoreError, match="no saved game"):
        game.open_session(s.id)


def test_load_from_directory(models, tmp_path):
    with pytest.raises(FileNotFoundError, match="engine/engine.json.*animegamer train"):
        Game.load(tmp_path / "nothing", store=tmp_path / "saves")
    engine, decoder = models
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST)
    t = game.new_session(["Qiqi"], seed=1).step(RUN)
    assert t.frames.shape == (5, 8, 8, 3)
    assert load_engine  # the loader the game uses
    assert game.places == known_places()  # no anchor bank: the world's places for the structured helper


def test_terminal_and_cli(game, tmp_path, capsys):
    from rich.console import Console

    from animegamer.cli import main
    from animegamer.game.terminal import TerminalGame

    lines = iter(["Nobody", "Qiqi", RUN, "", "/history", "/export", "/quit"])
    con = Console(width=100, record=True)
    TerminalGame(game, console=con, ask=lambda prompt: next(lines)).run()
    out = con.export_text()
    assert "unknown character 'Nobody'" in out and "motion level" in out and "the instruction is empty" in out
    (row,) = game.list_sessions()
    assert row.n_turns == 1 and str(game.store.export_dir()) in out.replace("\n", "")
    store = str(game.store.root)
    assert main(["sessions", "--store", store, "list"]) == 0 and row.id in capsys.readouterr().out
    assert main(["sessions", "--store", store, "export", row.id, "--out", str(tmp_path / "x")]) == 0
    assert (tmp_path / "x.mp4").is_file() and (tmp_path / "x.png").is_file()
    assert main(["sessions", "--store", store, "delete", row.id]) == 0 and game.list_sessions() == []
    assert main(["play", "--model", str(tmp_path / "none"), "--store", store]) == 2
    assert "no playable model" in capsys.readouterr().err


def test_device_and_precision(models, tmp_path, monkeypatch):
    """Game.load on a device and at a precision; a CUDA GPU is not here, so asking for one is a clear error."""
    engine, decoder = models
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST, device="auto", precision="bf16")
    assert game.engine.cfg.autocast_bf16 and game.decoder.sampler.autocast
    assert game.model_info["device"] == str(resolve_device("auto")) and game.model_info["precision"] == "bf16"
    t = game.new_session(["Qiqi"], seed=1).step(RUN)  # a bf16-autocast turn plays
    assert t.frames.shape == (5, 8, 8, 3)
    fp32 = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST, precision="fp32")
    assert not fp32.engine.cfg.autocast_bf16 and not fp32.decoder.sampler.autocast
    with pytest.raises(DeviceError, match="unknown precision"):
        Game.load(tmp_path / "model", store=tmp_path / "saves", precision="int4")
    # not asked: as saved where the CPU has bf16 arithmetic, fp32 where torch would emulate it (slower)
    saved = decoder.sampler
    decoder.sampler = dataclasses.replace(saved, autocast=True)
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    decoder.sampler = saved  # the module's models stay as they were
    for native, autocast in ((True, True), (False, False)):
        monkeypatch.setattr(devices, "native_bf16", lambda: native)
        chosen = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST)
        assert chosen.decoder.sampler.autocast == autocast
        assert chosen.model_info["precision"].startswith("as saved" if native else "fp32 (this CPU")
    with pytest.raises(DeviceError, match="unknown device|only cpu and cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA GPU"):
            Game.load(tmp_path / "model", store=tmp_path / "saves", device="cuda")


def test_a_store_of_version_1_is_upgraded_and_its_games_read(tmp_path):
    """Saves written before turns had layers: the store adds the column once, and every old turn reads back
    with none (it was drawn whole)."""
    root = tmp_path / "saves"
    root.mkdir()
    v1 = "\n".join(line for line in _SCHEMA.splitlines() if "layers" not in line and "newest turn only" not in line)
    assert "layers" not in v1
    with contextlib.closing(sqlite3.connect(root / DB_NAME)) as db:
        db.executescript(v1)
        db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        db.execute("INSERT INTO sessions VALUES ('g1', '[\"Qiqi\"]', 3, '{}', 0, 0)")
        (root / "clips" / "g1").mkdir(parents=True)
        (root / "clips" / "g1" / "0000-abcd.mp4").write_bytes(b"....ftyp")
        db.execute("INSERT INTO turns VALUES ('g1', 0, 'Qiqi waves', 2, '{}', '{}', '{}', ?, 5, '[]', "
                   "'clips/g1/0000-abcd.mp4', '{}', 0)", (s_a_to_blob(torch.zeros(2, 3)),))
        db.commit()
    store = SessionStore(root, clean=False)
    assert store.schema_version() == SCHEMA_VERSION == 2
    (turn,) = store.load_turns("g1")
    assert turn.instruction == "Qiqi waves" and turn.layers is None
    assert SessionStore(root, clean=False).schema_version() == 2  # opened again: nothing more to do


def test_the_place_and_time_a_turn_names_are_drawn_and_what_it_leaves_out_stays():
    """kept_scene: what the instruction names in the world's words wins over the engine's reading (which, after a
    broom flight, kept the sky for a turn that named the beach); what it does not name stays as shown; the engine's
    reading fills a first turn's gaps."""
    sky = ("sky", "day")
    assert kept_scene(sky, sky, ("beach", None)) == ("beach", "day")  # the engine kept the sky: the beach is drawn
    assert kept_scene(("forest", "night"), sky, (None, None)) == sky  # nothing named: the scene stays
    assert kept_scene(("forest", "night"), sky, (None, "night")) == ("sky", "night")
    assert kept_scene(("forest", "night"), None, ("town", None)) == ("town", "night")  # a first turn
    assert kept_scene(None, None, ("town", None)) is None  # nothing to fill the time from: the stage's default
    assert kept_scene(None, None, ("town", "dusk")) == ("town", "dusk")
    assert kept_scene(None, sky, ("beach", None)) == ("beach", "day")
