"""The stage (decoder/stage.py): places with no one in them and the characters' cut-outs, from which the game
composes a first frame no stored shot shows; and play never calls the world renderer."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from tiny_game import CAST, forbid_world_renderer, world_stage_96

from animegamer.decoder.anchors import Anchor
from animegamer.decoder.stage import PlaceView, Stage, positions
from animegamer.game.session import Game, GameInputError
from animegamer.world.character_gen import random_character, reference_sheet
from animegamer.world.place_art import TIMES, PlaceScene, load_places, sample_props
from animegamer.world.shot import SUPERSAMPLE
from animegamer.world.stage_art import place_layers

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
        assert len(again.places[key].wide_layers) == len(view.wide_layers) == 4  # sky, far, mid, near
        for a, b, la, lb in zip(again.places[key].wide_layers, view.wide_layers, again.places[key].wide_lights,
                                view.wide_lights):
            assert np.array_equal(a, b) and (la is None) == (lb is None) and (la is None or np.array_equal(la, lb))
        assert np.array_equal(again.places[key].wide_foreground, view.wide_foreground)
    town = stage.places[("town", "day")]
    widths = [x.shape[1] for x in town.wide_layers]  # the near layer three views wide, farther ones narrower
    assert widths == sorted(widths) and widths[-1] == town.width == 3 * 144 and widths[0] < 160
    assert town.wide_foreground.shape == (96, 3 * 144, 4) and (town.wide_layers[0][..., 3] == 255).all()
    middle = town.behind(144.0).astype(int)  # its middle view is the one-view picture, but for the far layers
    assert np.abs(middle - town.background.astype(int)).mean() < 40
    for view in stage.places.values():  # a stage saved before wide pictures reads as one view wide
        view.wide_layers = view.wide_lights = view.wide_foreground = None
    old = Stage.from_pretrained(stage.save_pretrained(tmp_path / "one_view"))
    assert all(v.wide_layers is None and v.width == 144 for v in old.places.values())
    assert all(np.array_equal(again.sprites[n].rgba, s.rgba) and again.sprites[n].height == s.height
               for n, s in stage.sprites.items())
    (tmp_path / "stage" / "stage.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="expected animegamer-stage"):
        Stage.from_pretrained(tmp_path / "stage")


def test_a_panning_camera_sees_each_layer_at_its_own_speed_as_the_world_does():
    """The wide place's layers composited at a camera position are the world's render of that camera (the same
    parallax), and panning moves the near layer with the camera and the sky barely."""
    h, w, views = 96, 144, 3
    layers = place_layers("town", "day", h, w, views=views)
    places = load_places()
    scene = PlaceScene(places["town"], "day", sample_props(places["town"], np.random.default_rng(0)),
                       h * SUPERSAMPLE, w * SUPERSAMPLE, world_width_factor=views, seed=0)
    view = PlaceView(np.zeros((h, w, 3), np.uint8), np.zeros((h, w, 4), np.uint8), 0.8, None, layers.layers,
                     layers.lights, layers.foreground)
    span = view.width - w
    for left in (0.0, 96.0, float(span)):
        world = cv2.resize(scene.render(left / span), (w, h), interpolation=cv2.INTER_AREA).astype(float)
        assert np.abs(view.behind(left) - world).mean() < 4  # the world's frame, within the downsampling
    sky_band = slice(0, int(0.1 * h))  # the town's sky: clouds, parallax 0.03
    a, b = view.behind(100.0), view.behind(130.0)
    road = slice(int(0.67 * h), int(0.83 * h))  # the near layer (the curb, the lane marks) moves 30 px with it
    assert np.abs(a[road, 30:] - b[road, :-30]).mean() < np.abs(a[road] - b[road]).mean() / 3
    sky_moved = np.abs(a[sky_band, 30:] - b[sky_band, :-30]).mean()  # were it moved as the near layer
    assert np.abs(a[sky_band] - b[sky_band]).mean() < sky_moved / 5  # the sky holds nearly still


def test_an_old_stage_pans_its_one_wide_picture_as_before(tmp_path):
    """A stage packed before the layers (one flat wide picture) reads as one layer that pans with the camera."""
    stage = world_stage_96()
    key = ("town", "day")
    view = stage.places[key]
    flat = view.behind(144.0)  # any picture three views wide
    wide = np.concatenate([flat, flat, flat], axis=1).round().astype(np.uint8)
    stage.places = {key: view}
    stage.save_pretrained(tmp_path / "stage")
    meta = json.loads((tmp_path / "stage" / "stage.json").read_text())
    tensors = load_file(tmp_path / "stage" / "stage.safetensors")
    data, offsets = tensors["pictures"].numpy(), tensors["offsets"].tolist()
    chunks = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    n_sprites = len(meta["sprites"])
    png = cv2.imencode(".png", cv2.cvtColor(wide, cv2.COLOR_RGB2BGR))[1].ravel()
    old = chunks[:2 + n_sprites] + [png, chunks[-1]]  # the wide picture and the wide foreground, as v1 wrote
    meta["places"][0].pop("layers")
    meta["places"][0]["wide"] = True
    offsets = np.cumsum([0] + [len(c) for c in old])
    save_file({"pictures": torch.from_numpy(np.concatenate(old)), "offsets": torch.from_numpy(offsets)},
              tmp_path / "stage" / "stage.safetensors")
    (tmp_path / "stage" / "stage.json").write_text(json.dumps(meta))
    again = Stage.from_pretrained(tmp_path / "stage").places[key]
    assert len(again.wide_layers) == 1 and again.width == 3 * 144
    assert np.array_equal(again.behind(37.4), wide[:, 37:37 + 144].astype(np.float32))


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
