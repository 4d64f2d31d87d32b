"""Scripted play (game/script.py, `play --script`) with tiny models: turns, refused lines, outputs."""
from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch
from tiny_game import tiny_models

from animegamer.engine.model import save_engine
from animegamer.game.cli import register
from animegamer.game.script import mentioned_characters, play_script, read_script
from animegamer.game.session import Game, GameInputError
from animegamer.game.store import frames_of

torch.set_num_threads(1)
CAST = ["Qiqi", "Mika", "Ren"]
SCRIPT = """# a short day
Character: Qiqi; Motion: quickly run; Background: day town.

Mika waves at Qiqi
Character: Nobody; Motion: sleep; Background: night bedroom.
Qiqi sits down and reads
"""


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "story.txt"
    p.write_text(SCRIPT)
    return p


def test_read_script_and_characters(script, tmp_path):
    lines = read_script(script)
    assert [n for n, _ in lines] == [2, 4, 5, 6]  # comments and blank lines skipped, numbers kept
    assert mentioned_characters(lines, CAST) == ["Qiqi", "Mika"]
    for text, match in (("", "no instructions"), ("# only a comment\n", "no instructions")):
        (tmp_path / "e.txt").write_text(text)
        with pytest.raises(GameInputError, match=match):
            read_script(tmp_path / "e.txt")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(GameInputError, match="not UTF-8"):
        read_script(tmp_path / "bin.txt")
    with pytest.raises(GameInputError, match="no such file"):
        read_script(tmp_path / "missing.txt")


def test_play_script_reports_the_bad_line_and_goes_on(script, tmp_path):
    game = Game.from_models(*tiny_models(), store=tmp_path / "saves", cast=CAST)
    said: list[str] = []
    r = play_script(game, script, out=tmp_path / "out", seed=3, report=said.append)
    assert [n for n, _ in r.turns] == [2, 4, 6] and [n for n, _ in r.errors] == [5]
    assert "unknown character 'Nobody'" in r.errors[0][1] and any(s.startswith("line 5: not played") for s in said)
    assert r.session.characters == ["Qiqi", "Mika"] and len(game.open_session(r.session.id).turns) == 3
    for i, (_, turn) in enumerate(r.turns, start=1):
        assert np.array_equal(frames_of(tmp_path / "out" / f"turn_{i:02d}.mp4"), frames_of(turn.video_path))
    assert r.video.is_file() and r.storyboard.is_file()
    stopped = play_script(game, script, seed=3, stop_on_error=True, report=said.append)
    assert [n for n, _ in stopped.turns] == [2, 4] and len(stopped.errors) == 1
    # the same seed and lines play the same game
    assert all(torch.equal(a.s_a, b.s_a) for (_, a), (_, b) in zip(r.turns, stopped.turns))


def test_play_script_from_the_command_line(script, tmp_path, capsys):
    engine, decoder = tiny_models()
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    base = ["play", "--model", str(tmp_path / "model"), "--store", str(tmp_path / "saves")]
    args = parser.parse_args(base + ["--script", str(script), "--characters", "Qiqi,Mika,Ren", "--out",
                                     str(tmp_path / "out")])
    assert args.func(args) == 1  # one line was refused
    out = capsys.readouterr().out
    assert "line 5: not played" in out and "played 3 of 4 lines; 1 refused" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "session.mp4", "session.png", "turn_01.mp4", "turn_02.mp4", "turn_03.mp4"]
    args = parser.parse_args(base + ["--script", str(tmp_path / "missing.txt")])
    with pytest.raises(SystemExit, match="no such file"):
        args.func(args)
    args = parser.parse_args(base + ["--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="go with --script"):
        args.func(args)
