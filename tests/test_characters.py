"""The player's own characters (game/characters.py): from a description, kept with the saves, played."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from tiny_game import CAST

from animegamer.cli import main
from animegamer.decoder.anchors import Anchor
from animegamer.decoder.stage import Sprite
from animegamer.game.characters import (
    BOOK_NAME,
    UNFITTED_HEIGHT,
    CharacterBook,
    CharacterError,
    cut_out,
    from_description,
    read_picture,
)
from animegamer.game.session import Game, GameInputError
from animegamer.game.web import build_app
from animegamer.world.character_gen import random_character, reference_sheet

torch.set_num_threads(1)
NEKO = "a girl with short green hair in a red hoodie, with a scarf"


def test_a_description_becomes_a_character():
    spec, understood = from_description("Neko", NEKO)
    assert understood == ["girl", "green hair", "short messy hair", "red hoodie", "scarf"]
    assert spec.pronoun == "she" and spec.hair_style == "short_messy" and spec.outfit_type == "hoodie"
    assert spec.hair_color[1] > spec.hair_color[0] and spec.top[0] > spec.top[2]  # green hair, red hoodie
    assert [a.type for a in spec.accessories] == ["scarf"]
    assert from_description("Neko", NEKO)[0] == spec  # the same name and words, the same character
    assert spec.outfit_variants == ()  # dressed as described in every session
    glasses = from_description("Ren2", "a boy in a black coat, glasses")[0]
    assert glasses.top == (38, 38, 46) and glasses.accessories[0].color != (38, 38, 46)  # the coat is black
    with pytest.raises(CharacterError, match="nothing in 'just vibes'"):
        from_description("Neko", "just vibes")


def test_add_play_reopen_remove(models, tmp_path):
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    made = game.add_character("Neko", NEKO)
    assert game.cast == CAST + ["Neko"] and made.understood
    assert game.characters.reference_path("Neko").is_file()
    session = game.new_session(["Neko", "Qiqi"], seed=2)
    t1 = session.step("Neko waves at Qiqi")
    assert t1.anchor == "composed" and t1.frames.shape == (5, 8, 8, 3)
    again = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)  # a restart: Neko is still there
    assert "Neko" in again.cast and again.custom["Neko"].spec == made.spec
    reopened = again.open_session(session.id)
    assert torch.equal(reopened.turns[0].s_a, t1.s_a)  # the drawn s_a is the history
    assert reopened.step("Neko sits down").index == 1
    again.remove_character("neko")
    assert again.cast == CAST and not again.characters.reference_path("Neko").exists()


def test_two_characters_of_your_own_in_one_shot(models, tmp_path):
    """Characters named in a turn (the player's own and the world's) stand together, left to right as named, in
    a stored picture of the place: the stage's composition of their cut-outs (the player's cut out of the
    reference sheet drawn when they were added), resized to the decoder's frames."""
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    game.add_character("Neko", NEKO)
    game.add_character("Taro", "a boy with spiky blue hair in a yellow jacket")
    stage = game.decoder.stage
    s_a = torch.zeros(game.decoder.config.n_tokens, game.decoder.config.d_cond)
    h, w = game.decoder.frame_size
    sheet = np.asarray(Image.open(game.characters.reference_path("Neko")).convert("RGB"))
    neko, height = game.characters.cutout("Neko")
    assert np.array_equal(neko, cut_out(sheet)) and 1.0 < height < 1.4  # head to toe, and the hair
    for named in (["Neko", "Taro"], ["Neko", "Qiqi"]):
        drawn, anchor = game.composed_anchor(s_a, named, None)
        sprites = [Sprite(*game.characters.cutout(c)) if c in game.custom else stage.sprites[c] for c in named]
        frame = cv2.resize(stage.compose("meadow", "day", sprites), (w, h), interpolation=cv2.INTER_AREA)
        assert anchor.source == "composed" and anchor.scene == ("meadow", "day")
        assert np.array_equal(anchor.frame, frame) and torch.allclose(drawn, game.decoder.draw_from_frame(s_a, frame))
    big = stage.compose("meadow", "day", [Sprite(*game.characters.cutout("Neko")), stage.sprites["Qiqi"]])
    swapped = stage.compose("meadow", "day", [stage.sprites["Qiqi"], Sprite(*game.characters.cutout("Neko"))])
    assert not np.array_equal(big, swapped)  # left to right as named
    # in the place the chosen anchor names (the engine's prediction, read by the bank), not a default
    read = Anchor(s_a[game.decoder.config.n_text:], "retrieved", None, None, None, "sit", ("beach", "night"))
    assert game.composed_anchor(s_a, ["Neko"], read)[1].scene == ("beach", "night")
    turn = game.new_session(["Neko", "Taro"], seed=3).step("Neko talks with Taro")
    assert turn.anchor == "composed"


@pytest.mark.parametrize("name,description,match", [
    ("", NEKO, "needs a name"), ("x" * 41, NEKO, "keep it to 40"), ("Qiqi", NEKO, "already taken"),
    ("neko", NEKO, "already taken"), ("7up", NEKO, "starts with a letter"), ("Ne<ko>", NEKO, "starts with a letter"),
    ("Momo", "", "describe Momo or give a picture"), ("Momo", "z" * 501, "keep it to 500"), ("Momo", "loves cake", "nothing in"),
])
def test_bad_input_changes_nothing(models, tmp_path, name, description, match):
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    game.add_character("Neko", NEKO)
    book = (tmp_path / "saves" / "characters" / BOOK_NAME).read_bytes()
    with pytest.raises(GameInputError, match=match):
        game.add_character(name, description)
    assert (tmp_path / "saves" / "characters" / BOOK_NAME).read_bytes() == book and game.cast == CAST + ["Neko"]
    with pytest.raises(GameInputError, match="no custom character"):
        game.remove_character("Nobody")


def test_cli(tmp_path, capsys):
    store = str(tmp_path / "saves")
    assert main(["characters", "--store", store, "add", "Neko", "--description", NEKO]) == 0
    assert "understood: girl, green hair" in capsys.readouterr().out
    assert main(["characters", "--store", store, "list"]) == 0
    assert "Neko" in capsys.readouterr().out
    assert main(["characters", "--store", store, "add", "Qiqi", "--description", NEKO]) == 2  # the cast's name
    assert "already taken" in capsys.readouterr().err
    assert main(["characters", "--store", store, "remove", "Neko"]) == 0
    assert CharacterBook(tmp_path / "saves").names() == []


def test_web_page_adds_a_character(models, tmp_path):
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    app = build_app(game)
    add = next(d.fn for d in app.fns.values() if getattr(d.fn, "__name__", "") == "do_add")
    chars, picture, note = add("Neko", NEKO)
    assert chars["choices"] == CAST + ["Neko"] and chars["value"] == ["Neko"] and picture["visible"]
    assert "understood: girl, green hair" in note
    assert "already taken" in add("Neko", NEKO)[2] and game.cast == CAST + ["Neko"]
    sheet = tmp_path / "momo.png"
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(sheet)
    chars, picture, note = add("Momo", "", str(sheet))  # the upload box
    assert chars["value"] == ["Momo"] and picture["visible"] and picture["value"].endswith(".png")
    assert "from the picture: " in note and "as the sheet shows" in note and "⚠️" not in note


def test_a_character_from_a_picture(models, tmp_path):
    """A picture in the world's style (here a drawn character's reference sheet) is cut out and read into
    the generator's parameters, so the world draws the character posed; words given too change what they name."""
    true = random_character(1_000_005, "Momo")
    sheet = tmp_path / "momo.png"
    Image.fromarray(reference_sheet(true, 256)).save(sheet)
    sprite = cut_out(read_picture(sheet))
    assert sprite.shape[2] == 4 and sprite[..., 3].any() and sprite.shape[0] > sprite.shape[1]  # a standing figure
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    made = game.add_character("Momo", image=sheet)
    assert made.posed and made.sprite.is_file() and made.fit["error"] < 0.1
    assert made.spec.outfit_variants == ()  # dressed as pictured in every session
    assert (made.spec.hair_style, made.spec.outfit_type) == (true.hair_style, true.outfit_type)
    assert made.understood[0].startswith("from the picture: ") and true.hair_style.replace("_", " ") in made.understood[0]
    reference = np.asarray(Image.open(game.characters.reference_path("Momo")).convert("RGB"))
    assert np.array_equal(reference, reference_sheet(made.spec, 256))  # the sheet shown is what the world draws
    turn = game.new_session(["Momo"], seed=4).step("Momo waves")
    assert turn.anchor == "composed"
    both = game.add_character("Lulu", "a boy with a red scarf", image=sheet)  # the words change what they name
    assert both.posed and both.spec.pronoun == "he" and both.spec.hair_style == made.spec.hair_style
    assert {a.type for a in both.spec.accessories} == {a.type for a in made.spec.accessories} | {"scarf"}
    again = Game.from_models(*models, store=tmp_path / "saves", cast=CAST).custom["Momo"]
    assert again.sprite == made.sprite and again.spec == made.spec and again.posed


def test_a_picture_character_from_before_fitting_still_stands_as_its_cut_out(models, tmp_path):
    """A book written before pictures were fitted (picture, no fit) keeps drawing the cut-out."""
    sheet = tmp_path / "momo.png"
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(sheet)
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    game.add_character("Momo", image=sheet)
    path = tmp_path / "saves" / "characters" / BOOK_NAME
    book = json.loads(path.read_text())
    book["characters"]["Momo"].pop("fit")
    book["characters"]["Momo"]["entry"] = None
    path.write_text(json.dumps(book))
    old = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    assert not old.custom["Momo"].posed
    assert old.new_session(["Momo"], seed=4).step("Momo waves").anchor == "composed"
    sprite, height = old.characters.cutout("Momo")  # the player's own cut-out, stood as a character of usual height
    assert np.array_equal(sprite, cut_out(read_picture(sheet))) and height == UNFITTED_HEIGHT


@pytest.mark.parametrize("make,match", [
    (lambda p: p.write_text("not a picture"), "not a picture this game can read"),
    (lambda p: p.write_bytes(b""), "0 bytes"),
    (lambda p: Image.new("RGB", (20, 20), "white").save(p, format="PNG"), "20 x 20 pixels"),
    (lambda p: Image.new("RGB", (200, 200), "white").save(p, format="PNG"), "no character stands out"),
])
def test_bad_pictures(models, tmp_path, make, match):
    picture = tmp_path / "bad.png"
    make(picture)
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    with pytest.raises(GameInputError, match=match):
        game.add_character("Momo", image=picture)
    assert game.cast == CAST and not (tmp_path / "saves" / "characters" / BOOK_NAME).exists()
    with pytest.raises(GameInputError, match="no such picture"):
        game.add_character("Momo", image=tmp_path / "missing.png")
