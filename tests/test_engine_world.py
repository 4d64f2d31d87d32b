"""Engine on world data: s_a of the true shots with phase a's representation, resumable build,
standardised s_a, and `train engine` on a world dataset end to end with the held-out report.

Tiny everything: a 20-session x 2-turn world at 48 x 72, the tiny vision tower (6 tokens x 32), a
tiny decoder whose E_a reads MiniLM (3 tokens) + the tower, the tiny random LLM backbone.
"""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from animegamer.engine.data import load_sessions
from animegamer.training.engine_sessions import (
    STATS_FILE, build_engine_sessions, load_representation, load_rep_stats, representation_inputs,
)

torch.set_num_threads(1)
N_TEXT, N_VISUAL, WIDTH = 3, 6, 16


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset

    root = tmp_path_factory.mktemp("world") / "w"
    render_dataset(RenderConfig(sessions=20, turns=2, height=48, width=72, workers=1), root, progress=False)
    return WorldDataset(root)


@pytest.fixture(scope="module")
def phase_a(tmp_path_factory):
    """A clip run dir and a decoder run dir laid out as the phases write them."""
    from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
    from animegamer.decoder.network import DecoderNet, decoder_preset
    from animegamer.decoder.diffusion import DiffusionConfig
    from animegamer.decoder.sampler import SamplerConfig
    from animegamer.decoder.pipeline import ShotDecoder
    from animegamer.models.vision_tower import VisionTower, vision_tower_config
    from animegamer.training.shot_cache import CACHE_FORMAT

    root = tmp_path_factory.mktemp("phase_a")
    torch.manual_seed(0)
    tower = VisionTower(vision_tower_config("tiny"))  # 48 x 72 frames are resized to 16 x 24: 2 x 3 tokens
    clip = root / "clip"
    tower.save_pretrained(clip / "final" / "vision_tower")
    net = DecoderNet(decoder_preset("tiny", n_text=N_TEXT, n_visual=tower.n_visual, d_visual_in=tower.d_visual,
                                    d_text_in=384))
    dec = root / "decoder"
    ShotDecoder(net, ShotAutoencoder(autoencoder_config("tiny")), DiffusionConfig(), SamplerConfig(steps=2)).save_pretrained(
        dec / "joint" / "final" / "shot_decoder")
    (dec / "cache" / "train").mkdir(parents=True)  # what the decoder run records about its encoders
    (dec / "cache" / "train" / "meta.json").write_text(json.dumps(
        {"format": CACHE_FORMAT, "split": "train", "clip": {"path": str((clip / "final" / "vision_tower").resolve())},
         "text_encoder": None, "n_text": N_TEXT, "random_frame": False}))
    return {"clip": clip, "decoder": dec}


@pytest.fixture(scope="module")
def representation(phase_a):
    return load_representation(representation_inputs(phase_a["decoder"], phase_a["clip"]))


def first_frame(world, row) -> torch.Tensor:
    return torch.from_numpy(world.frames(row)[0]).permute(2, 0, 1).float().div(127.5).sub(1.0)  # (3, H, W)


def test_sessions_shapes_states_and_s_a(world, phase_a, representation, tmp_path):
    out = build_engine_sessions(world.root, phase_a["decoder"], phase_a["clip"], tmp_path / "train", "train",
                                batch_size=5, progress=False, representation=representation)
    sessions, meta = load_sessions(out)
    rows = world.sessions("train")
    assert len(sessions) == len(rows) == 18 and all(len(s) == 2 for s in sessions)
    assert (meta["rep_tokens"], meta["rep_dim"], meta["n_text"], meta["n_visual"]) == (N_TEXT + N_VISUAL, WIDTH,
                                                                                       N_TEXT, N_VISUAL)
    for s, rs in zip(sessions, rows):
        assert [t["instruction"] for t in s] == [r["instruction"] for r in rs]
        assert s[0]["states"] == rs[0]["states_before"]
        for a, b in zip(s, s[1:]):  # the states chain: before(t+1) = clamp(before(t) + 5 x delta(t))
            assert b["states"] == {k: min(100, max(0, a["states"][k] + 5 * a["deltas"][k])) for k in a["states"]}
    # s_a is exactly the phase-a representation of the FIRST frame + the motion text, one turn at a time
    for si, t in ((0, 0), (7, 1), (17, 1)):
        row = rows[si][t]
        want = representation.encode(first_frame(world, row)[None], [row["motion_text"]])[0]
        torch.testing.assert_close(sessions[si][t]["s_a"], want, atol=1e-5, rtol=1e-5)
    mean, std = load_rep_stats(out)
    assert mean.shape == std.shape == (N_TEXT + N_VISUAL, WIDTH) and bool((std > 0).all())
    all_s = torch.stack([t["s_a"] for s in sessions for t in s])
    torch.testing.assert_close(mean, all_s.mean(0), atol=1e-5, rtol=1e-5)
    assert meta["rep_stats"]["file"] == STATS_FILE and meta["build"]["split"] == "train"

    def never():
        raise AssertionError("a finished build must be reused, not recomputed")

    assert build_engine_sessions(world.root, phase_a["decoder"], None, out, "train", progress=False,
                                 representation=never) == out  # clip from the decoder run's record: same inputs
    with pytest.raises(ValueError, match="other inputs"):
        build_engine_sessions(world.root, phase_a["decoder"], phase_a["clip"], out, "train", progress=False,
                              representation=never, limit=3)


def test_interrupted_build_resumes(world, phase_a, representation, tmp_path):
    class Flaky:
        def __init__(self, fail_at: int | None) -> None:
            self.calls, self.turns, self.fail_at = 0, 0, fail_at

        def encode(self, frames, texts):
            self.calls += 1
            if self.calls == self.fail_at:
                raise KeyboardInterrupt
            self.turns += len(texts)
            return representation.encode(frames, texts)

    first = Flaky(fail_at=3)
    with pytest.raises(KeyboardInterrupt):
        build_engine_sessions(world.root, phase_a["decoder"], phase_a["clip"], tmp_path / "train", "train",
                              batch_size=4, progress=False, representation=first)
    assert first.turns == 8 and not (tmp_path / "train").exists()
    assert len(list((tmp_path / ".train.partial" / "reps").glob("*.safetensors"))) == 4
    second = Flaky(fail_at=None)
    out = build_engine_sessions(world.root, phase_a["decoder"], phase_a["clip"], tmp_path / "train", "train",
                                batch_size=4, progress=False, representation=second)
    assert second.turns == 36 - 8 and not (tmp_path / ".train.partial").exists()
    ref = build_engine_sessions(world.root, phase_a["decoder"], phase_a["clip"], tmp_path / "ref", "train",
                                batch_size=4, progress=False, representation=representation)
    got, want = load_sessions(out)[0], load_sessions(ref)[0]
    assert all(torch.equal(a["s_a"], b["s_a"]) for s, r in zip(got, want) for a, b in zip(s, r))


def test_rep_norm_engine_round_trip(tmp_path):
    from animegamer.engine.data import EngineCollate, EngineDataset, synthetic_sessions
    from animegamer.engine.model import GameEngine, engine_config, load_engine, save_engine
    from animegamer.training.engine_sessions import rep_stats

    sessions = synthetic_sessions(2, 3, 4, 8, seed=0)
    e = GameEngine(engine_config("tiny", rep_tokens=4, rep_dim=8, rep_norm=True)).eval()
    mean, std = rep_stats(sessions)
    e.set_rep_stats(mean, std)
    ds = EngineDataset(sessions, e.builder)
    b = EngineCollate(e.vocab["<PAD>"], 4)([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        z, _ = e._outputs(b)
        raw, _ = e.outputs(b)
        _, logs = e(b)
    torch.testing.assert_close(raw, z * std + mean)  # decoder space out, standardised inside
    torch.testing.assert_close(torch.tensor(logs["mse"]), ((z - (b.target_rep - mean) / std) ** 2).mean())
    save_engine(e, tmp_path / "eng")
    e2 = load_engine(tmp_path / "eng")
    assert torch.equal(e2.rep_mean, mean) and torch.equal(e2.rep_std, std)
    p1 = e.predict([], sessions[0][0]["instruction"])
    assert torch.equal(p1.s_a, e2.predict([], sessions[0][0]["instruction"]).s_a)


def test_train_engine_on_world_end_to_end(world, phase_a, tmp_path):
    from animegamer.engine.model import load_engine
    from animegamer.training import phase_b as phase
    from animegamer.training.loop import read_log

    parser = argparse.ArgumentParser()
    phase.add_arguments(parser)
    out = tmp_path / "run"
    args = parser.parse_args(["--preset", "tiny", "--data", str(world.root), "--decoder", str(phase_a["decoder"]),
                              "--out", str(out), "--steps", "3", "--batch-size", "2", "--no-progress",
                              "--encode-batch", "8"])
    assert phase.run(args) == 0
    for split, n in (("train", 18), ("val", 1), ("test", 1)):
        assert len(load_sessions(out / "sessions" / split)[0]) == n
    report = json.loads((out / "eval.json").read_text())
    assert (out / "eval_history.png").stat().st_size > 0
    assert json.loads((out / "final" / "metrics.json").read_text())["turns"] == 4
    tf = report["teacher_forced"]
    assert 0 <= tf["acc_motion_level"] <= 1 and 0 <= tf["mae_deltas"] <= 1
    assert set(tf["per_turn"]) == {"0", "1"} and {"cos", "mse", "cos_visual_z"} <= set(tf["per_turn"]["1"])
    confusion = tf["level_confusion"]  # true x predicted, every turn once; its diagonal is the accuracy
    assert sum(map(sum, confusion)) == tf["turns"] == 4
    assert sum(confusion[i][i] for i in range(5)) / 4 == pytest.approx(tf["acc_motion_level"])
    assert tf["acc_motion_level"] + tf["level_off_by_one"] <= 1
    assert [sorted({t[1] for t in tf["levels_per_turn"]}), len(tf["levels_per_turn"])] == [[0, 1], 4]
    assert sum(t[2] == t[3] for t in tf["levels_per_turn"]) / 4 == pytest.approx(tf["acc_motion_level"])
    assert "closed_loop" in report and report["n_text"] == N_TEXT
    h = report["history"]
    assert set(h["per_window"]) == {"0", "1", "5"} and set(h["gain"]) == {"window_5_vs_0", "window_5_vs_1"}
    assert h["gain"]["window_5_vs_0"]["cos_visual_z"]["n"] == 2  # the two held-out turns with history
    assert "cos_visual_z" in h["copy_previous"] and set(report["targets"]) == {"acc_motion_level", "mae_deltas"}
    # the level beside the world's lookup table, on the same held-out turns
    from animegamer.world.level_ceiling import AdditiveLevelModel, LevelTable
    ref = report["level_reference"]
    table = LevelTable(world.split_rows("train"))
    held_rows = world.split_rows("val") + world.split_rows("test")
    assert ref["turns"] == 4 and ref["engine"]["mean"] == pytest.approx(tf["acc_motion_level"])
    assert ref["table"]["mean"] == pytest.approx(sum(table.predict(r) == r["motion_level"] for r in held_rows) / 4)
    assert ref["engine_minus_table"]["mean"] == pytest.approx(ref["engine"]["mean"] - ref["table"]["mean"])
    scene = AdditiveLevelModel(world.split_rows("train"))  # the reference that knows who acts and where
    assert ref["scene"]["mean"] == pytest.approx(float((scene.predict(held_rows) == [r["motion_level"] for r in held_rows]).mean()))
    assert ref["engine_minus_scene"]["mean"] == pytest.approx(ref["engine"]["mean"] - ref["scene"]["mean"])
    assert list(ref["per_world"].values())[0]["turns"] == 4 and "scene" in list(ref["per_world"].values())[0]
    e = load_engine(out / "final")
    assert e.cfg.rep_norm and e.cfg.rep_tokens == N_TEXT + N_VISUAL and e.cfg.rep_dim == WIDTH
    torch.testing.assert_close(e.rep_mean, load_rep_stats(out / "sessions" / "train")[0])
    # the motion head chooses among the world's motion texts; its table is the text part of the true s_a
    from animegamer.world.instructions import all_motion_texts
    assert e.cfg.motion_texts == tuple(all_motion_texts()) and e.cfg.n_text == N_TEXT
    train_turns = load_sessions(out / "sessions" / "train")[0][0]
    for turn in train_turns:
        k = e.cfg.motion_texts.index(turn["motion_text"])
        torch.testing.assert_close(e.motion_table[k], turn["s_a"][:N_TEXT], atol=1e-4, rtol=1e-4)
    assert 0 <= tf["acc_motion_text"] <= 1
    # resume: the sessions are reused (not rebuilt) and training continues
    stamp = (out / "sessions" / "train" / "engine_meta.json").stat().st_mtime_ns
    args.train_steps, args.resume = 4, True
    assert phase.run(args) == 0
    assert read_log(out)[-1]["step"] == 4
    assert (out / "sessions" / "train" / "engine_meta.json").stat().st_mtime_ns == stamp
    # --init: a new run starts from the trained engine's weights and s_a statistics (a 1e-12 lr keeps them)
    from animegamer.core.checkpoint import load_safetensors
    out2 = tmp_path / "run2"
    args2 = parser.parse_args(["--preset", "tiny", "--data", str(world.root), "--decoder", str(phase_a["decoder"]),
                               "--out", str(out2), "--steps", "1", "--batch-size", "2", "--no-progress",
                               "--encode-batch", "8", "--init", str(out), "--lr", "1e-12", "--ema-decay", "0",
                               "--no-closed-loop", "--eval-windows", "1", "--alpha-mse", "0.25"])
    assert phase.run(args2) == 0
    before, after = load_safetensors(out / "final" / "engine.safetensors"), load_safetensors(
        out2 / "final" / "engine.safetensors")
    assert set(before) == set(after) and all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)
    assert torch.equal(before["rep_mean"], after["rep_mean"]) and torch.equal(before["rep_std"], after["rep_std"])
    run2 = json.loads((out2 / "engine_config.json").read_text())
    assert run2["init"] == str(out)
    # the architecture comes from the init engine; the loss weighting from the command line
    assert run2["engine"]["alpha_mse"] == 0.25 and run2["engine"]["rep_tokens"] == e.cfg.rep_tokens


def test_level_reference_skips_what_it_cannot_grade(world, tmp_path):
    from animegamer.engine.evaluate import level_reference

    test = [r for r in world.split_rows("test")][:1]
    train = world.split_rows("train")[:1]
    as_session = lambda rows: [{"session": r["session"], "turn": r["turn"]} for r in rows]  # noqa: E731
    ok = level_reference([as_session(test)], [str(world.root)], [[0, 0, test[0]["motion_level"], 3]])
    assert ok["turns"] == 1 and ok["engine"]["mean"] == float(test[0]["motion_level"] == 3)
    assert "skipped" in level_reference([as_session(test)], [None], [[0, 0, 1, 1]])
    # a training turn, a wrong level, a world not on disk: skipped with the reason, never a number
    assert "held-out" in level_reference([as_session(train)], [str(world.root)],
                                         [[0, 0, train[0]["motion_level"], 1]])["skipped"]
    wrong = test[0]["motion_level"] % 5 + 1
    assert "held-out" in level_reference([as_session(test)], [str(world.root)], [[0, 0, wrong, 1]])["skipped"]
    assert "not readable" in level_reference([as_session(test)], [str(tmp_path / "gone")], [[0, 0, 1, 1]])["skipped"]


def test_level_ceiling_command_pools_worlds(world, capsys):
    """`world level-ceiling --data A B`: the references are fit on the training turns of every world
    given and scored on all their held-out turns; --train-subsets adds the scene model on subsets."""
    from animegamer.cli import main

    assert main(["world", "level-ceiling", "--data", str(world.root), str(world.root), "--train-subsets", "4,10000"]) == 0
    report = json.loads(capsys.readouterr().out)
    n_train, n_held = len(world.split_rows("train")), len(world.split_rows("val") + world.split_rows("test"))
    assert report["lookup_table"]["train_turns"] == report["train_turns"] == 2 * n_train
    assert report["heldout_turns"] == 2 * n_held
    for name in ("additive_verb_adverb_stamina_cast", "additive_with_characters_and_place"):
        assert 0 <= report[name]["accuracy"] <= 1
    assert list(report["additive_with_characters_and_place_by_training_turns"]) == ["4"]  # 10000 > what there is
