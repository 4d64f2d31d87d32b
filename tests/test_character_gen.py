"""The world's character generator (world/character_gen.py): parameters drawn from a seed, their
cast-file form, reference sheets, the held-out characters, `world characters`."""
from __future__ import annotations

import numpy as np

from animegamer.cli import main
from animegamer.world.cast import load_cast, parse_cast
from animegamer.world.dataset import WorldDataset
from animegamer.world.character_gen import (
    HELD_OUT_SEED,
    REFERENCE_BACKGROUND,
    character_entry,
    colour_name,
    held_out_characters,
    random_character,
    reference_sheet,
)
from animegamer.world.instructions import Action
from animegamer.world.shot import render_action


def _round_trip(spec):
    return parse_cast({"characters": {spec.name: character_entry(spec)}})[spec.name]


def test_drawn_characters_are_deterministic_and_different():
    a, b = random_character(5, "Neko"), random_character(5, "Neko")
    assert a == b and np.array_equal(reference_sheet(a), reference_sheet(b))
    drawn = [random_character(s, f"C{s}") for s in range(12)]
    looks = {(c.hair_style, c.hair_color, c.outfit_type, c.top) for c in drawn}
    assert len(looks) == 12  # twelve seeds, twelve looks
    assert all(c.description.startswith(("a girl", "a boy", "a kid")) and " hair in " in c.description for c in drawn)


def test_parameters_round_trip_for_drawn_and_named_characters():
    for spec in [random_character(s, f"C{s}") for s in range(20)] + list(load_cast().values()):
        assert _round_trip(spec) == spec  # the ten named characters are parameter sets of the same form


def test_reference_sheet_and_held_out():
    spec = random_character(3, "Neko")
    sheet = reference_sheet(spec)
    assert sheet.shape == (128, 128, 3) and sheet.dtype == np.uint8
    assert tuple(sheet[2, 2]) == REFERENCE_BACKGROUND and tuple(sheet[2, -3]) == REFERENCE_BACKGROUND
    assert (np.abs(sheet.astype(int) - REFERENCE_BACKGROUND).sum(-1) > 30).mean() > 0.1  # someone is on it
    held = held_out_characters(3)
    assert [c.name for c in held] == ["Held01", "Held02", "Held03"]
    assert held[0] == random_character(HELD_OUT_SEED, "Held01")
    assert colour_name((255, 0, 0)) == "red" and colour_name((10, 10, 10)) == "black"
    assert colour_name((250, 250, 250)) == "white" and colour_name((40, 90, 230)) == "blue"


def test_world_characters_cli(tmp_path, capsys):
    assert main(["world", "characters", "--random", "3", "--seed", "7", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    cast = load_cast(tmp_path / "characters.yaml")  # a cast file the world reads
    assert list(cast) == ["New7", "New8", "New9"] and cast["New8"] == random_character(8, "New8")
    assert "New7: a " in out and (tmp_path / "reference_sheets.png").is_file()


def test_a_drawn_character_is_rendered_in_the_world():
    neko = random_character(11, "Neko")
    frames = render_action(Action(("Neko",), "wave", "", "meadow", "day"), seed=3, extra_cast={"Neko": neko})
    other = render_action(Action(("Qiqi",), "wave", "", "meadow", "day"), seed=3)
    assert frames.shape == (17, 96, 144, 3) and not np.array_equal(frames, other)
    same_background = (frames[0] == other[0]).all(-1).mean()
    assert 0.8 < same_background < 1.0  # the same place, a different character in it


def test_world_sessions_can_be_played_by_a_drawn_cast(tmp_path, capsys):
    """`world render --cast FILE`: sessions of drawn characters, for training a decoder on many characters."""
    assert main(["world", "characters", "--random", "4", "--seed", "20", "--out", str(tmp_path / "cast")]) == 0
    cast_file = tmp_path / "cast" / "characters.yaml"
    assert main(["world", "render", "--sessions", "3", "--turns", "2", "--seed", "5", "--height", "48", "--width", "72",
                 "--workers", "1", "--cast", str(cast_file), "--out", str(tmp_path / "data")]) == 0
    capsys.readouterr()
    data = WorldDataset(tmp_path / "data")
    assert {c for r in data.rows for c in r["characters"]} <= {"New20", "New21", "New22", "New23"}
    assert data.meta["cast"]["characters"] == ["New20", "New21", "New22", "New23"]
    assert all(r["instruction"] and "New2" in r["instruction"] for r in data.rows if r["template_id"] == "structured")
    assert main(["world", "render", "--sessions", "1", "--cast", str(tmp_path / "nope.yaml"),
                 "--out", str(tmp_path / "x")]) == 2
    assert "no cast file at" in capsys.readouterr().err
