"""Visual anchors (decoder/anchors.py): the bank, the choice rule, save/load, and the game with them."""
from __future__ import annotations

import collections
import copy

import numpy as np
import pytest
import torch
from tiny_game import tiny_models

from animegamer.decoder.anchors import (
    AnchorConfig,
    Shown,
    VisualAnchors,
    decode_frame,
    dequantize_tokens,
    encode_frame,
    named_characters,
    quantize_tokens,
    relative_distance,
)
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
    drawn, a = decoder.anchor(s_a, ["Mika"], None, torch.Generator().manual_seed(0))
    assert a.source == "retrieved" and a.entry == 2 and a.distance is None
    assert torch.equal(drawn[: decoder.config.n_text], s_a[: decoder.config.n_text])  # the motion tokens stay
    with torch.no_grad():
        want = decoder.net.action_encoder.visual(decoder.anchors.f_v[2:3])[0]
    assert torch.allclose(drawn[decoder.config.n_text:], want)
    _, b = decoder.anchor(s_a, ["Qiqi"], None, torch.Generator().manual_seed(5))
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
    drawn, a = decoder.anchor(s_a, ["Qiqi"], Shown(frame))
    assert a.source == "continued" and a.distance == pytest.approx(0.0, abs=1e-6)
    assert torch.allclose(drawn[n_text:], seen, atol=1e-6)
    s_a[n_text:] = -3 * seen  # far from what was seen: a new scene, retrieved
    _, a = decoder.anchor(s_a, ["Qiqi"], Shown(frame))
    assert a.source == "retrieved" and a.distance > decoder.anchors.config.gate
    decoder.anchors.config = AnchorConfig(continue_from="frame", retrieval=False)
    drawn, a = decoder.anchor(s_a, ["Qiqi"], Shown(frame))
    assert a.source == "engine" and torch.equal(drawn, s_a)


def test_choose_continues_the_previous_anchor(decoder):
    n_text = decoder.config.n_text
    decoder.anchors.config = AnchorConfig(continue_from="anchor")
    previous = torch.randn(decoder.config.n_tokens, decoder.config.d_cond)
    s_a = previous.clone() * 1.01  # the engine predicts nearly what was drawn before
    drawn, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous))
    assert a.source == "continued" and torch.equal(drawn[n_text:], previous[n_text:])
    _, a = decoder.anchor(-s_a, ["Qiqi"], Shown(s_a=previous))  # another scene
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
    tokens = b.tokens(list(range(len(b))), visual)
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
    tokens = decoder.anchors.tokens(list(range(len(SCENES))), decoder.net.action_encoder.visual)
    previous = torch.zeros(decoder.config.n_tokens, decoder.config.d_cond)
    previous[n_text:] = tokens[3]  # Mika on the beach at night was shown
    s_a = previous.clone()
    s_a[n_text:] = tokens[0]  # the engine's prediction looks like town by day, within the (huge) gate
    _, a = decoder.anchor(s_a, ["Mika"], Shown(s_a=previous, characters=["Mika"]))
    assert a.source == "continued"
    _, a = decoder.anchor(s_a, ["Mika"], Shown(s_a=previous))  # who was shown not known: continue as before
    assert a.source == "continued"
    for seed in range(4):  # Qiqi now: retrieved where the scene persists (the beach), not where the prediction points
        _, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous, characters=["Mika"]),
                              torch.Generator().manual_seed(seed))
        assert a.source == "retrieved" and a.entry in (2, 4)
    decoder.anchors.config = AnchorConfig(gate=1e6, same_characters=False)
    _, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous, characters=["Mika"]))
    assert a.source == "continued"
    s_a[n_text:] = tokens[2:].mean(0)  # a first turn whose prediction is the mean of the beach's entries
    for seed in range(4):
        _, a = decoder.anchor(s_a, ["Qiqi"], None, torch.Generator().manual_seed(seed))
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
    # stored in int8 with a scale per token: within half a step of each token's largest value
    assert torch.equal(back.anchors.f_v, dequantize_tokens(*quantize_tokens(decoder.anchors.f_v)))
    step = decoder.anchors.f_v.abs().amax(-1, keepdim=True) / 127
    assert bool(((back.anchors.f_v - decoder.anchors.f_v).abs() <= step / 2 + 1e-6).all())
    assert back.anchors.config == decoder.anchors.config and back.anchors.grid == (2, 2)
    plain = copy.deepcopy(decoder)
    plain.anchors = None
    plain.save_pretrained(tmp_path / "plain")
    assert ShotDecoder.from_pretrained(tmp_path / "plain").anchors is None


ACTED = [(["Qiqi"], "town", "run"), (["Qiqi"], "town", "sit"), (["Qiqi"], "beach", "sit"), (["Mika"], "town", "run")]
MOTIONS = [{"text": "quickly run", "verb": "run"}, {"text": "run", "verb": "run"}, {"text": "sit", "verb": "sit"}]


def acted_bank(config: AnchorConfig | None = None) -> VisualAnchors:
    """Entries that show a verb (their shot's motion) and the three motion texts' f_md (tiny: 3 tokens of 8)."""
    g = torch.Generator().manual_seed(9)
    f_v = torch.randn(len(ACTED), 4, 8, generator=g)
    entries = [{"characters": k, "place": p, "time": "day", "shot": f"s{i}", "motion": v, "motion_text": v}
               for i, (k, p, v) in enumerate(ACTED)]
    return VisualAnchors(f_v, entries, (2, 2), config, motions=MOTIONS, motion_f_md=torch.randn(3, 3, 8, generator=g))


def motion_tokens(decoder: ShotDecoder, k: int) -> torch.Tensor:
    """E_a's text tokens (n_text, D) of the bank's motion k: what an engine predicts for it."""
    with torch.no_grad():
        return decoder.net.action_encoder.text(decoder.anchors.motion_f_md[k:k + 1])[0]


def test_the_engines_motion_is_read_as_the_nearest_motions_verb(decoder):
    decoder.anchors = acted_bank()
    enc = decoder.net.action_encoder
    # a motion text's own tokens (what an engine that says its motion text hands on) are read exactly
    assert [decoder.anchors.verb(motion_tokens(decoder, k), enc) for k in range(3)] == ["run", "run", "sit"]
    run = (motion_tokens(decoder, 0) + motion_tokens(decoder, 1)) / 2  # between the verb's two motions
    assert decoder.anchors.verb(run, enc) == "run"
    assert bank().verb(run, enc) is None  # a bank without motions does not read verbs
    wrong = VisualAnchors(torch.zeros(1, 4, 8), [{"characters": ["Qiqi"]}], (2, 2), motions=MOTIONS[:1],
                          motion_f_md=torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match="rebuild the bank"):
        wrong.verb(run, enc)
    with pytest.raises(ValueError, match="one f_md"):
        VisualAnchors(torch.zeros(1, 4, 8), [{"characters": ["Qiqi"]}], (2, 2), motions=MOTIONS)


def test_retrieval_prefers_a_shot_of_the_verb(decoder):
    n_text = decoder.config.n_text
    decoder.anchors = acted_bank(AnchorConfig(scene_classes=False))
    s_a = torch.randn(decoder.config.n_tokens, decoder.config.d_cond, generator=torch.Generator().manual_seed(1))
    s_a[:n_text] = motion_tokens(decoder, 2)  # "sit"
    for seed in range(6):
        drawn, a = decoder.anchor(s_a, ["Qiqi"], None, torch.Generator().manual_seed(seed))
        assert a.source == "retrieved" and a.verb == "sit" and a.entry in (1, 2)
        assert torch.equal(drawn[:n_text], s_a[:n_text])  # the motion tokens themselves stay the engine's
    _, a = decoder.anchor(s_a, ["Mika"], None, torch.Generator().manual_seed(0))
    assert a.entry == 3  # no shot of Mika sitting: the characters come first
    decoder.anchors.config = AnchorConfig(scene_classes=False, by_action=False)
    picks = {decoder.anchor(s_a, ["Qiqi"], None, torch.Generator().manual_seed(seed))[1].entry for seed in range(6)}
    assert picks == set(decoder.anchors._draw(s_a[n_text:], [0, 1, 2], decoder.net.action_encoder,
                                              torch.Generator().manual_seed(seed)) for seed in range(6))


def test_a_persisting_scene_of_another_verb_is_reposed_in_that_scene(decoder):
    n_text = decoder.config.n_text
    decoder.anchors = acted_bank(AnchorConfig(gate=1e6, scene_classes=False, repose=True))
    tokens = decoder.anchors.tokens(list(range(len(ACTED))), decoder.net.action_encoder.visual)
    previous = torch.zeros(decoder.config.n_tokens, decoder.config.d_cond)
    previous[n_text:] = tokens[0]  # Qiqi running in town was shown
    s_a = previous.clone()
    s_a[:n_text] = motion_tokens(decoder, 2)  # now she sits
    drawn, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous, characters=["Qiqi"]))
    assert a.source == "reposed" and a.entry == 1 and a.verb == "sit"  # town, not the beach's sitting shot
    assert torch.allclose(drawn[n_text:], tokens[1])
    decoder.anchors.config = AnchorConfig(gate=1e6, scene_classes=False, repose=False)
    _, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous, characters=["Qiqi"]))
    assert a.source == "continued" and a.verb == "sit"  # without reposing: only retrieval chooses by action
    decoder.anchors.config = AnchorConfig(gate=1e6, scene_classes=False, repose=True)
    s_a[:n_text] = motion_tokens(decoder, 1)  # she runs on: the scene continues
    _, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous, characters=["Qiqi"]))
    assert a.source == "continued" and a.verb == "run"
    previous[n_text:] = tokens[3]  # Mika running in town; the bank has no shot of her sitting there
    s_a[:n_text] = motion_tokens(decoder, 2)
    _, a = decoder.anchor(s_a, ["Mika"], Shown(s_a=previous, characters=["Mika"]))
    assert a.source == "continued"
    previous[n_text:] = -tokens[0]  # not a bank entry (a player's character): continued, never reposed
    s_a[n_text:] = -tokens[0]
    _, a = decoder.anchor(s_a, ["Qiqi"], Shown(s_a=previous, characters=["Qiqi"]))
    assert a.source == "continued"


def test_build_keeps_the_motions_the_shots_show(tmp_path, decoder):
    render_dataset(RenderConfig(sessions=4, turns=3, seed=11, height=32, width=32, frames=5, workers=1),
                   tmp_path / "w", progress=False)
    rows = WorldDataset(tmp_path / "w").split_rows("train")
    asked: list[list[str]] = []

    def features(texts: list[str]) -> torch.Tensor:
        asked.append(texts)
        return torch.ones(len(texts), 3, 8)

    built = VisualAnchors.build(tmp_path / "w", decoder.latent_reference(), progress=False, motion_features=features)
    assert [(e["motion"], e["motion_text"]) for e in built.entries] == [(r["motion"], r["motion_text"]) for r in rows]
    texts = sorted({r["motion_text"] for r in rows})
    assert asked == [texts] and [m["text"] for m in built.motions] == texts
    assert {m["verb"] for m in built.motions} == {r["motion"] for r in rows}
    plain = VisualAnchors.build(tmp_path / "w", decoder.latent_reference(), progress=False)
    assert plain.motions is None and plain.motion_f_md is None
    # at most one shot of each (characters, place, time, verb), its picture stored lossy: the tokens are made
    # from the picture as stored, and the bank reloads to the same tokens and pictures
    acts = VisualAnchors.build(tmp_path / "w", decoder.latent_reference(), progress=False, per_action=1, frame_quality=90)
    keys = [(tuple(sorted(r["characters"])), r["place"], r["time"], r["motion"]) for r in rows]
    assert len(acts) == len(set(keys))
    assert all(np.abs(acts.frame(i).astype(int) - plain.frame(j).astype(int)).mean() < 8
               for i, j in ((0, 0), (len(acts) - 1, keys.index(keys[-1]))))
    want = decoder.latent_reference().patch_tokens(
        torch.from_numpy(acts.frame(0)).permute(2, 0, 1).float().div(127.5).sub(1)[None])[0]
    assert torch.allclose(acts.f_v[0], want, atol=float(want.abs().max()) / 127)
    acts.save_pretrained(tmp_path / "bank")
    back = VisualAnchors.from_pretrained(tmp_path / "bank")
    assert torch.equal(back.f_v, acts.f_v) and np.array_equal(back.frame(3), acts.frame(3))
    with pytest.raises(ValueError, match="per_action"):
        VisualAnchors.build(tmp_path / "w", decoder.latent_reference(), progress=False, per_action=0)
    with pytest.raises(ValueError, match="frame quality"):
        encode_frame(acts.frame(0), 0)
    assert decode_frame(encode_frame(acts.frame(0), 50)).shape == acts.frame(0).shape


def test_a_bank_saved_before_int8_tokens_still_loads(tmp_path):
    import json

    from safetensors.torch import save_file

    old = bank()
    (tmp_path / "v1").mkdir()
    save_file({"f_v": old.f_v.half()}, tmp_path / "v1" / "anchors.safetensors")
    meta = {"format": "animegamer-visual-anchors", "format_version": 1, "config": {"top_k": 2}, "grid": [2, 2],
            "entries": old.entries}
    (tmp_path / "v1" / "anchors.json").write_text(json.dumps(meta))
    back = VisualAnchors.from_pretrained(tmp_path / "v1")
    assert torch.equal(back.f_v, old.f_v.half().float()) and back.motions is None and back.frames is None
    (tmp_path / "v1" / "anchors.json").write_text(json.dumps({**meta, "format_version": 9}))
    with pytest.raises(ValueError, match="v1 to v2, found animegamer-visual-anchors v9"):
        VisualAnchors.from_pretrained(tmp_path / "v1")


def test_motions_survive_save_and_load(decoder, tmp_path):
    decoder.anchors = acted_bank()
    decoder.save_pretrained(tmp_path / "dec")
    back = ShotDecoder.from_pretrained(tmp_path / "dec").anchors
    assert back.motions == MOTIONS and back.entries == decoder.anchors.entries
    assert torch.equal(back.motion_f_md, decoder.anchors.motion_f_md.half().float())


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
    bank_tokens = game.decoder.anchors.tokens(list(range(len(KEYS))), game.decoder.net.action_encoder.visual)
    assert torch.allclose(t1.s_a[n_text:], bank_tokens[2])
    assert any(torch.allclose(t3.s_a[n_text:], bank_tokens[i]) for i in (0, 1))  # Qiqi alone
    game.engine.reset_cache()
    reopened = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST).open_session(s.id)
    u4 = reopened.step("Qiqi sits down")  # continues from what the saved game holds (its s_a, or its clip)
    game.engine.reset_cache()
    replay = game.new_session(["Qiqi", "Mika"], seed=4)  # the same game played through in one go
    for t in (t1, t2, t3):
        replay.step(t.instruction)
    t4 = replay.step("Qiqi sits down")
    assert u4.anchor == t4.anchor == "continued" and np.array_equal(u4.frames, t4.frames)
