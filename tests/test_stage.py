"""The stage (decoder/stage.py): places with no one in them and the characters' cut-outs, from which the game
composes a first frame no stored shot shows; and play never calls the world renderer."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_game import CAST, forbid_world_renderer, world_stage_96

from animegamer.decoder.anchors import Anchor
from animegamer.decoder.stage import Stage, positions
from animegamer.game.session import Game, GameInputError
from animegamer.world.character_gen import random_character, reference_sheet
from animegamer.world.place_art import TIMES, load_places

torch.set_num_threads(1)
NEKO = "a girl with short green hair in a red hoodie, with a scarf"


def test_the_world_stage_holds_every_place_and_the_cast_and_round_trips(tmp_path):
    stage = world_stage_96()
    assert set(stage.places) == {(p, t) for p in load_places() for t in TIMES} and stage.size == (96, 144)
    assert {"Qiqi", "Ren", "Mika"} <= set(stage.sprites)
    again = Stage.from_pretrained(stage.save_pretrained(tmp_path / "stage"))
    for key, view in stage.places.items():
        assert np.array_equal(again.places[key].background, view.background)
        assert np.array_equal(again.places[key].foreground, view.foreground)
        assert np.array_equal(again.places[key].wide, view.wide)  # the place three views wide, for a camera
        assert np.array_equal(again.places[key].wide_foreground, view.wide_foreground)
    town = stage.places[("town", "day")]
    assert town.wide.shape == (96, 3 * 144, 3) and town.wide_foreground.shape == (96, 3 * 144, 4)
    middle = town.wide[:, 144:288].astype(int)  # its middle view is the one-view picture, but for the far layers
    assert np.abs(middle - town.background.astype(int)).mean() < 40
    for view in stage.places.values():  # a stage saved before wide pictures reads as one view wide
        view.wide = view.wide_foreground = None
    old = Stage.from_pretrained(stage.save_pretrained(tmp_path / "one_view"))
    assert all(v.wide is None for v in old.places.values())
    assert all(np.array_equal(again.sprites[n].rgba, s.rgba) and again.sprites[n].height == s.height
               for n, s in stage.sprites.items())
    (tmp_path / "stage" / "stage.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="expected animegamer-stage"):
        Stage.from_pretrained(tmp_path / "stage")


def test_compose_stands_each_character_on_the_ground_in_order():
    stage = world_stage_96()
    view = stage.places[("beach", "day")]
    one = stage.compose("beach", "day", [stage.sprites["Qiqi"]]).astype(int)
    changed = np.abs(one - view.background).sum(-1) > 30
    ys, xs = np.nonzero(changed)
    h, w = stage.size
    assert abs(xs.mean() / w - 0.5) < 0.05  # one character: in the middle
    assert abs(ys.max() / h - view.ground) < 0.05  # feet on the ground line
    assert 0.3 < (ys.max() - ys.min()) / h < 0.6  # as tall as the world draws a standing character
    two = stage.compose("beach", "day", [stage.sprites["Qiqi"], stage.sprites["Ren"]]).astype(int)
    cols = np.nonzero((np.abs(two - view.background).sum(-1) > 30).any(0))[0] / w
    assert cols.min() < positions(2)[0] < 0.5 < positions(2)[1] < cols.max()  # one each side of the middle
    fore = view.foreground[..., 3] == 255  # the place's foreground stays in front
    assert np.array_equal(two[fore], view.foreground[..., :3][fore])
    night = stage.compose("beach", "night", [stage.sprites["Qiqi"]])
    assert night.mean() < one.mean()  # characters take the place's light
    with pytest.raises(KeyError, match="no picture of the moon"):
        stage.compose("moon", "day", [stage.sprites["Qiqi"]])


class _Bank:
    """The part of a visual-anchor bank composition reads: which characters each entry shows, where."""

    def __init__(self, entries):
        self.entries = entries


def test_the_game_composes_only_what_no_stored_shot_shows(models, tmp_path):
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    s_a = torch.zeros(game.decoder.config.n_tokens, game.decoder.config.d_cond)
    tokens = s_a[game.decoder.config.n_text:]
    game.decoder.anchors = _Bank([{"characters": ["Qiqi", "Ren"], "place": "forest", "time": "night"}])
    try:
        shown = Anchor(tokens, "retrieved", 0.5, 0, None, "hug", ("forest", "night"))
        assert game.composed_anchor(s_a, ["Ren", "Qiqi"], shown) is None  # a stored shot shows them, there
        elsewhere = Anchor(tokens, "retrieved", 0.5, 0, None, "hug", ("beach", "day"))
        drawn, a = game.composed_anchor(s_a, ["Qiqi", "Ren"], elsewhere)  # ... but not on the beach
        assert a.source == "composed" and a.scene == ("beach", "day") and a.entry is None
        drawn, a = game.composed_anchor(s_a, ["Qiqi", "Ren", "Mika"], shown)  # three: never filmed together
        assert a.source == "composed" and a.scene == ("forest", "night")
        film = Anchor(tokens, "retrieved", 0.5, 0, None, "hug", ("castle", "dawn"))  # a place the stage has not
        assert game.composed_anchor(s_a, ["Qiqi", "Ren", "Mika"], film) is None
        continued = Anchor(tokens, "continued", 0.05)
        assert game.composed_anchor(s_a, ["Qiqi", "Ren", "Mika"], continued) is None  # the scene goes on
        game.decoder.stage = None  # a model packed without a stage draws what the bank has
        assert game.composed_anchor(s_a, ["Qiqi", "Ren", "Mika"], shown) is None
        game.add_character("Neko", NEKO)
        with pytest.raises(GameInputError, match="no stage to stand Neko in: run `animegamer model stage"):
            game.composed_anchor(s_a, ["Neko"], shown)
    finally:
        game.decoder.anchors, game.decoder.stage = None, world_stage_96()


def test_play_never_calls_the_world_renderer(models, tmp_path, monkeypatch):
    """Characters are drawn (reference sheets, fits) when they are added; from then on, with every function of
    the renderer raising, games with them play, save and reopen."""
    game = Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
    game.add_character("Neko", NEKO)
    sheet = tmp_path / "momo.png"
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(sheet)
    game.add_character("Momo", image=sheet)
    forbid_world_renderer(monkeypatch)
    with pytest.raises(AssertionError, match="renderer was called"):
        reference_sheet(random_character(1, "X"), 64)  # the guard holds
    session = game.new_session(["Neko", "Momo", "Qiqi"], seed=5)
    for text in ("Neko waves at Qiqi", "Momo, Neko and Qiqi dance", "Qiqi runs", "Momo sits down"):
        turn = session.step(text)
        assert turn.frames.shape == (5, 8, 8, 3)
    assert [t.anchor for t in session.turns] == ["composed", "composed", "engine", "composed"]
    again = Game.from_models(*models, store=tmp_path / "saves", cast=CAST).open_session(session.id)
    assert again.step("Neko sleeps").anchor == "composed"
