"""The shipped default model (animegamer/weights/default) loads and plays: what `animegamer play`
runs on a fresh machine. Real SmolLM2 + the sprite animator drawing in layers on the stage, one short session."""
from __future__ import annotations

import json

import numpy as np
import torch

from animegamer.game.session import DEFAULT_WEIGHTS, Game

torch.set_num_threads(1)


def test_shipped_model_draws_its_turns_goes_on_from_the_last_frame_and_reopens(tmp_path, monkeypatch):
    """Every character after frame 0 is the sprite animator's drawing (decoder/layered.py): the first turn starts
    from the stage; a turn that goes on with the same verb goes on from the last frame shown, after a reopen too; one
    that starts another verb is a new shot of the same scene, the character drawn from its cut-out where it stood;
    the renderer is never called."""
    from tiny_game import forbid_world_renderer

    from animegamer.decoder.anchors import VisualAnchors
    from animegamer.decoder.layered import LayeredScene

    info = json.loads((DEFAULT_WEIGHTS / "model.json").read_text())
    assert info["dtype"] == "float16"
    size = sum(p.stat().st_size for p in DEFAULT_WEIGHTS.parent.rglob("*") if p.is_file())
    assert size < 100e6  # the repo keeps all shipped weights (the model and the evaluator) under 100 MB
    forbid_world_renderer(monkeypatch)
    read = {"verb": "read"}  # the verb the engine's motion tokens are read as, held fixed here (it is the engine's)
    monkeypatch.setattr(VisualAnchors, "verb", lambda self, tokens, encoder: read["verb"])
    game = Game.load(store=tmp_path / "saves")
    assert game.decoder.draws_layers
    session = game.new_session(["Qiqi"])
    t1 = session.step("Character: Qiqi; Motion: calmly read; Background: day town.")
    shown = t1.frames[-1].copy()  # as the player saw it (only the newest turn stays decoded; older ones read back)
    t2 = session.step("Character: Qiqi; Motion: slowly read; Background: day town.")
    assert (t1.anchor, t2.anchor) == ("staged", "went on")
    for t in (t1, t2):
        assert t.frames.dtype == np.uint8 and t.frames.shape == (17, 96, 144, 3)
        assert 1 <= t.motion_level <= 5 and t.frames.std() > 1.0  # a picture, not a flat frame
        assert set(t.deltas) == {"stamina", "social", "entertainment"}
        assert not np.array_equal(t.frames[8], t.frames[0])  # drawn, not held
    assert t2.states == {k: max(0, min(100, t1.states[k] + 5 * t2.deltas[k])) for k in t1.states}
    np.testing.assert_allclose(t2.frames[0].astype(int), shown.astype(int), atol=2)  # goes on from it
    shown = t2.frames[-1].copy()
    scene = LayeredScene.from_bytes(session.layers)
    assert scene.names() == ["Qiqi"] and scene.actors[0].verb == "read"
    again = Game.load(store=tmp_path / "saves").open_session(session.id)
    assert [h.instruction for h in again.history()] == [h.instruction for h in session.history()]
    assert all(torch.equal(a.s_a, b.s_a) for a, b in zip(again.history(), session.history()))
    assert again.layers == session.layers
    t3 = again.step("Character: Qiqi; Motion: read; Background: day town.")
    assert t3.anchor == "went on"
    np.testing.assert_allclose(t3.frames[0].astype(int), shown.astype(int), atol=2)
    read["verb"] = "wave"
    t4 = again.step("Character: Qiqi; Motion: happily wave; Background: day town.")
    after = LayeredScene.from_bytes(again.layers)
    assert t4.anchor == "went on" and after.actors[0].verb == "wave"  # the same scene, another verb: afresh
    assert (after.place, after.time) == (scene.place, scene.time)
    # the engine's tokens read as another scene: a turn that names no place or time stays where it was (the world's
    # rule); one that names a place moves there and keeps the time it does not name
    monkeypatch.setattr(Game, "_scene_named", lambda self, anchor: ("station", "night"))
    again.step("Qiqi waves happily.")
    assert (LayeredScene.from_bytes(again.layers).place, LayeredScene.from_bytes(again.layers).time) == (
        scene.place, scene.time)
    again.step("Qiqi waves at the train station.")
    assert (LayeredScene.from_bytes(again.layers).place, LayeredScene.from_bytes(again.layers).time) == (
        "station", scene.time)


def test_shipped_evaluator_names_who_where_and_when_in_true_shots():
    """The evaluator's frame classifier (the picture columns' instrument) reads freshly rendered true
    shots of a world it never saw: it must name the characters, place and time of nearly all."""
    from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
    from animegamer.models.frame_classifier import FrameClassifier
    from animegamer.world.instructions import Action
    from animegamer.world.shot import render_action

    clf = FrameClassifier.from_pretrained(FrameClassifier.find(DEFAULT_EVALUATOR))
    cases = [(("Qiqi",), "run", "quickly", "town", "day"), (("Ren",), "sit", "calmly", "beach", "night"),
             (("Sora",), "walk", "slowly", "forest", "sunset"), (("Hana",), "wave", "happily", "meadow", "day"),
             (("Kaito",), "jump", "energetically", "station", "day"), (("Yuki",), "read", "calmly", "bedroom", "night"),
             (("Aiko",), "dance", "happily", "countryside", "sunset"), (("Jun",), "eat", "gently", "town", "night")]
    right = {"characters": 0, "place": 0, "time": 0}
    for i, (chars, verb, adverb, place, time) in enumerate(cases):
        seen = clf.read_shot(render_action(Action(chars, verb, adverb, place, time), seed=100 + i), len(chars))
        right["characters"] += seen["characters"] == sorted(chars)
        right["place"] += seen["place"] == place
        right["time"] += seen["time"] == time
    assert all(n >= len(cases) - 1 for n in right.values()), right


def test_shipped_model_stands_any_cast_in_any_place_without_the_renderer(tmp_path, monkeypatch):
    """Three characters (never filmed together) and a player's own character beside one of the cast: the first
    frame is composed from the stage's picture of the place and their cut-outs, with the world renderer
    raising throughout play; the evaluator's frame classifier finds all three there."""
    from tiny_game import forbid_world_renderer

    from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
    from animegamer.models.frame_classifier import FrameClassifier

    game = Game.load(store=tmp_path / "saves")
    game.add_character("Neko", "a girl with short green hair in a red hoodie, with a scarf")
    forbid_world_renderer(monkeypatch)
    three = game.new_session(["Mika", "Sora", "Kaito"], seed=1).step(
        "Character: Mika, Sora, Kaito; Motion: talk; Background: day bedroom.")
    assert three.anchor == "staged"
    clf = FrameClassifier.from_pretrained(FrameClassifier.find(DEFAULT_EVALUATOR))
    seen = clf.read_shot(three.frames, 3)
    assert seen["characters"] == ["Kaito", "Mika", "Sora"] and seen["place"] == "bedroom" and seen["time"] == "day"
    own = game.new_session(["Neko", "Qiqi"], seed=1).step("Neko waves at Qiqi in the meadow")
    assert own.anchor == "staged" and own.frames.shape == (17, 96, 144, 3)
    assert clf.read_shot(own.frames, 1)["place"] == "meadow"
