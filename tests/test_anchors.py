"""Visual anchors (decoder/anchors.py): the bank, the choice rule, save/load, and the game with them."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tiny_game import tiny_models

from animegamer.decoder.anchors import AnchorConfig, VisualAnchors, named_characters, relative_distance
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.engine.model import save_engine
from animegamer.game.session import Game

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
    t2 = s.step("Qiqi waves")
    assert (t1.anchor, t2.anchor) == ("retrieved", "continued")
    assert t2.anchor_distance is not None
    n_text = decoder.config.n_text
    # the history carries what was drawn: the bank's only Mika-alone frame, through E_a's visual stream
    assert torch.allclose(t1.s_a[n_text:], game.decoder.anchors._tokens[2])
    game.engine.reset_cache()
    reopened = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST).open_session(s.id)
    u3 = reopened.step("Qiqi sits down")  # continues from what the saved game holds (its s_a, or its clip)
    game.engine.reset_cache()
    replay = game.new_session(["Qiqi", "Mika"], seed=4)  # the same game played through in one go
    for t in (t1, t2):
        replay.step(t.instruction)
    t3 = replay.step("Qiqi sits down")
    assert u3.anchor == t3.anchor == "continued" and np.array_equal(u3.frames, t3.frames)
