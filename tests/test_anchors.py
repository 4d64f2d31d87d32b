"""Visual anchors (decoder/anchors.py): the bank, the choice rule, save/load, and the game with them."""
from __future__ import annotations

import collections
import copy

import numpy as np
import pytest
import torch
from tiny_game import tiny_models

from animegamer.decoder.anchors import AnchorConfig, VisualAnchors, named_characters, relative_distance
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.engine.model import save_engine
from animegamer.game.session import Game
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset

torch.set_num_threads(1)
CAST = ["Qiqi", "Mika", "Ren"]
KEYS = [["Qiqi"], ["Qiqi"], ["Mika"], ["Mika", "Qiqi"], ["Ren"]]


def bank(config: AnchorConfig | None = None) -> VisualAnchors:
    g = torch.Generator().manual_seed(3)
    f_v = torch.randn(len(KEYS), 4, 8, generator=g)  # the tiny decoder: 4 visual tokens of 8
    entries = [{"characters": k, "place": "town", "time": "day", "shot": f"s{i}"} for i, k in enumerate(KEYS)]
    return VisualAnchors(f_v, entries, (2, 2), config)


@pytest.fixture
def decoder():
    _, dec = tiny_models()
    dec.anchors = bank()
    return dec


def test_named_characters_and_candidates():
    assert named_characters("Mika waves at qiqi", ["Qiqi", "Mika"]) == ["Qiqi", "Mika"]
    assert named_characters("Mikael sleeps", ["Qiqi", "Mika"]) == ["Qiqi"]  # a word, not a prefix; none: the first
    b = bank()
    assert b.candidates(["Qiqi"]) == [0, 1]
    assert b.candidates(["Qiqi", "Mika"]) == [3]
    assert b.candidates(["Ren", "Qiqi"]) == [4]  # no entry has both: those with the first
    assert b.candidates(["Nobody"]) == list(range(len(KEYS)))


def test_relative_distance():
    a = torch.ones(4)
    assert float(relative_distance(a, a)) == 0.0
    assert float(relative_distance(a, torch.zeros(4))) == pytest.approx(1.0)
    rows = torch.stack([torch.ones(4), 2 * torch.ones(4)])  # (2, 4): one distance per row
    assert relative_distance(rows, torch.zeros(2, 4)).tolist() == [1.0, 1.0]


def test_choose_first_turn_retrieves_the_named_characters(decoder):
    s_a = torch.randn(decoder.config.n_tokens, decoder.config.d_cond)
    drawn, a = decoder.anchor(s_a, None, None, ["Mika"], torch.Generator().manual_seed(0))
    assert a.source == "retrieved" and a.entry == 2 and a.distance is None
    assert torch.equal(drawn[: decoder.config.n_text], s_a[: decoder.config.n_text])  # the motion tokens stay
    with torch.no_grad():
        want = decoder.net.action_encoder.visual(decoder.anchors.f_v[2:3])[0]
    assert torch.allclose(drawn[decoder.config.n_text:], want)
    _, b = decoder.anchor(s_a, None, None, ["Qiqi"], torch.Generator().manual_seed(5))
    assert b.entry in (0, 1)  # top_k draws among the right characters only


def test_choose_continues_the_last_frame_within_the_gate(decoder):
    n_text = decoder.config.n_text
    decoder.anchors.config = AnchorConfig(continue_from="frame")
    frame = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    ref = decoder.latent_reference()
    x = torch.from_numpy(frame).permute(2, 0, 1).float().div(127.5).sub(1)[None]
    with torch.no_grad():
        seen = decoder.net.action_encoder.visual(ref.patch_tokens(x))[0]
    s_a = torch.zeros(decoder.config.n_tokens, decoder.config.d_cond)
    s_a[n_text:] = seen  # the engine predicts what was seen: distance 0
    drawn, a = decoder.anchor(s_a, frame, None, ["Qiqi"])
    assert a.source == "continued" and a.distance == pytest.approx(0.0, abs=1e-6)
    assert torch.allclose(drawn[n_text:], seen, atol=1e-6)
    s_a[n_text:] = -3 * seen  # far from what was seen: a new scene, retrieved
    _, a = decoder.anchor(s_a, frame, None, ["Qiqi"])
    assert a.source == "retrieved" and a.distance > decoder.anchors.config.gate
    decoder.anchors.config = AnchorConfig(continue_from="frame", retrieval=False)
    drawn, a = decoder.anchor(s_a, frame, None, ["Qiqi"])
    assert a.source == "engine" and torch.equal(drawn, s_a)


def test_choose_continues_the_previous_anchor(decoder):
    n_text = decoder.config.n_text
    decoder.anchors.config = AnchorConfig(continue_from="anchor")
    previous = torch.randn(decoder.config.n_tokens, decoder.config.d_cond)
    s_a = previous.clone() * 1.01  # the engine predicts nearly what was drawn before
    drawn, a = decoder.anchor(s_a, None, previous, ["Qiqi"])
    assert a.source == "continued" and torch.equal(drawn[n_text:], previous[n_text:])
    _, a = decoder.anchor(-s_a, None, previous, ["Qiqi"])  # another scene
    assert a.source == "retrieved"


SCENES = [("town", "day"), ("town", "day"), ("beach", "night"), ("beach", "night"), ("beach", "night")]
SCENE_KEYS = [["Qiqi"], ["Mika", "Qiqi"], ["Qiqi"], ["Mika"], ["Qiqi"]]


def scene_bank(config: AnchorConfig | None = None) -> VisualAnchors:
    """Two scenes far apart in f_v (town by day near +2, the beach at night near -2)."""
    g = torch.Generator().manual_seed(5)
    sign = torch.tensor([1.0 if s == ("town", "day") else -1.0 for s in SCENES])[:, None, None]
    f_v = 2 * sign + 0.3 * torch.randn(len(SCENES), 4, 8, generator=g)
    entries = [{"characters": k, "place": p, "time": t, "shot": f"s{i}"}
               for i, (k, (p, t)) in enumerate(zip(SCENE_KEYS, SCENES))]
    return VisualAnchors(f_v, entries, (2, 2), config)


def test_scene_classes_name_the_scene_and_keep_its_candidates(decoder):
    b = scene_bank()
    visual = decoder.net.action_encoder.visual
    tokens, _ = b._bank(visual)
    assert [b.scene(tokens[i], visual) for i in range(len(SCENES))] == SCENES
    assert b.scene(tokens[2:].mean(0), visual) == ("beach", "night")  # a mean over the scene's futures
    assert b.candidates(["Qiqi"], ("beach", "night")) == [2, 4]
    assert b.candidates(["Qiqi"], ("town", "day")) == [0]
    assert b.candidates(["Qiqi"]) == [0, 2, 4]
    assert b.candidates(["Mika", "Qiqi"], ("beach", "night")) == [1]  # the pair is only in town: still the pair
    assert b.candidates(["Mika"], ("town", "day")) == [3]  # Mika alone is only on the beach
    unlabelled = VisualAnchors(b.f_v, [{"characters": k, "shot": "s"} for k in SCENE_KEYS], (2, 2))
    assert unlabelled.scene(tokens[0], visual) is None  # a film's clips before annotation: no scene names


def test_a_persisting_scene_with_other_characters_is_retrieved_in_that_scene(decoder):
    n_text = decoder.config.n_text
    decoder.anchors = scene_bank(AnchorConfig(gate=1e6))
    tokens, _ = decoder.anchors._bank(decoder.net.action_encoder.visual)
    previous = torch.zeros(decoder.config.n_tokens, decoder.config.d_cond)
    previous[n_text:] = tokens[3]  # Mika on the beach at night was shown
    s_a = previous.clone()
    s_a[n_text:] = tokens[0]  # the engine's prediction looks like town by day, within the (huge) gate
    _, a = decoder.anchor(s_a, None, previous, ["Mika"], previous_characters=["Mika"])
    assert a.source == "continued"
    _, a = decoder.anchor(s_a, None, previous, ["Mika"])  # who was shown not known: continue as before
    assert a.source == "continued"
    for seed in range(4):  # Qiqi now: retrieved where the scene persists (the beach), not where the prediction points
        _, a = decoder.anchor(s_a, None, previous, ["Qiqi"], torch.Generator().manual_seed(seed), ["Mika"])
        assert a.source == "retrieved" and a.entry in (2, 4)
    decoder.anchors.config = AnchorConfig(gate=1e6, same_characters=False)
    _, a = decoder.anchor(s_a, None, previous, ["Qiqi"], previous_characters=["Mika"])
    assert a.source == "continued"
    s_a[n_text:] = tokens[2:].mean(0)  # a first turn whose prediction is the mean of the beach's entries
    for seed in range(4):
        _, a = decoder.anchor(s_a, None, None, ["Qiqi"], torch.Generator().manual_seed(seed))
        assert a.source == "retrieved" and a.entry in (2, 4)


def test_build_from_several_worlds_keeps_a_few_shots_per_scene(tmp_path):
    for name, seed in (("a", 11), ("b", 12)):
        render_dataset(RenderConfig(sessions=4, turns=3, seed=seed, height=32, width=32, frames=5, workers=1),
                       tmp_path / name, progress=False)
    _, dec = tiny_models()
    reference = dec.latent_reference()
    rows = [r for n in ("a", "b") for r in WorldDataset(tmp_path / n).split_rows("train")]
    scenes = collections.Counter((tuple(sorted(r["characters"])), r["place"], r["time"]) for r in rows)
    full = VisualAnchors.build([tmp_path / "a", tmp_path / "b"], reference, progress=False)
    assert len(full) == len(rows) and {e["data"] for e in full.entries} == {"a", "b"}
    one = VisualAnchors.build([tmp_path / "a", tmp_path / "b"], reference, progress=False, per_scene=1)
    keys = [(tuple(sorted(e["characters"])), e["place"], e["time"]) for e in one.entries]
    assert sorted(keys) == sorted(scenes) and len(set(keys)) == len(keys)  # every scene the worlds show, once
    first = next(i for i, e in enumerate(full.entries) if (tuple(sorted(e["characters"])), e["place"], e["time"]) == keys[0])
    assert torch.equal(one.f_v[0], full.f_v[first])  # a scene keeps its first shot
    with pytest.raises(ValueError, match="per_scene"):
        VisualAnchors.build(tmp_path / "a", reference, progress=False, per_scene=0)


def test_config_checks():
    with pytest.raises(ValueError, match="gate"):
        AnchorConfig(gate=0)
    with pytest.raises(ValueError, match="needs history 'drawn'"):
        AnchorConfig(continue_from="anchor", history="engine")
    with pytest.raises(ValueError, match="unknown fields"):
        AnchorConfig.from_dict({"gates": 1})
    with pytest.raises(ValueError, match="one entry each"):
        VisualAnchors(torch.zeros(2, 4, 8), [{"characters": ["Qiqi"]}], (2, 2))
    with pytest.raises(ValueError, match="grid"):
        VisualAnchors(torch.zeros(1, 4, 8), [{"characters": ["Qiqi"]}], (1, 3))


def test_save_load_round_trip(decoder, tmp_path):
    decoder.save_pretrained(tmp_path / "dec")
    back = ShotDecoder.from_pretrained(tmp_path / "dec")
    assert back.anchors is not None and back.anchors.entries == decoder.anchors.entries
    assert torch.equal(back.anchors.f_v, decoder.anchors.f_v.half().float())
    assert back.anchors.config == decoder.anchors.config and back.anchors.grid == (2, 2)
    plain = copy.deepcopy(decoder)
    plain.anchors = None
    plain.save_pretrained(tmp_path / "plain")
    assert ShotDecoder.from_pretrained(tmp_path / "plain").anchors is None


@pytest.mark.parametrize("continue_from", ["anchor", "frame"])
def test_game_with_anchors_reopens_and_continues_alike(tmp_path, continue_from):
    engine, decoder = tiny_models()
    decoder.anchors = bank(AnchorConfig(gate=1e6, continue_from=continue_from))  # every later turn continues
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST)
    s = game.new_session(["Qiqi", "Mika"], seed=4)
    t1 = s.step("Mika runs to the beach")
    t2 = s.step("Mika waves")
    t3 = s.step("Qiqi waves")  # the scene persists, but the last shot shows Mika: Qiqi is retrieved
    assert (t1.anchor, t2.anchor, t3.anchor) == ("retrieved", "continued", "retrieved")
    assert t2.anchor_distance is not None
    n_text = decoder.config.n_text
    # the history carries what was drawn: the bank's only Mika-alone frame, through E_a's visual stream
    assert torch.allclose(t1.s_a[n_text:], game.decoder.anchors._tokens[2])
    assert any(torch.allclose(t3.s_a[n_text:], game.decoder.anchors._tokens[i]) for i in (0, 1))  # Qiqi alone
    game.engine.reset_cache()
    reopened = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST).open_session(s.id)
    u4 = reopened.step("Qiqi sits down")  # continues from what the saved game holds (its s_a, or its clip)
    game.engine.reset_cache()
    replay = game.new_session(["Qiqi", "Mika"], seed=4)  # the same game played through in one go
    for t in (t1, t2, t3):
        replay.step(t.instruction)
    t4 = replay.step("Qiqi sits down")
    assert u4.anchor == t4.anchor == "continued" and np.array_equal(u4.frames, t4.frames)
