"""`animegamer eval` / `animegamer bench` with tiny random models: metrics on known inputs,
evaluator determinism, the zero-shot probes, the start-states hook, a tiny end-to-end eval
(3 held-out sessions x 2 turns at 48 x 72) and a tiny bench run.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from animegamer.evaluation.evaluator import Evaluator, probes
from animegamer.evaluation.metrics import (
    align_clips, mean_abs_error, motion_level_from_pixels, ms_ssim, psnr, ssim,
)

torch.set_num_threads(1)
H, W, T = 48, 72, 5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A model dir (tiny engine + tiny decoder, as `Game.load` reads it) and an evaluator run dir
    (a tiny vision tower with another seed, laid out as `train clip` writes it)."""
    from animegamer.engine.model import GameEngine, engine_config, save_engine
    from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
    from animegamer.decoder.network import DecoderNet, decoder_preset
    from animegamer.decoder.diffusion import DiffusionConfig
    from animegamer.decoder.sampler import SamplerConfig
    from animegamer.decoder.pipeline import ShotDecoder
    from animegamer.models.vision_tower import VisionTower, vision_tower_config

    root = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    dcfg = decoder_preset("tiny")
    ShotDecoder(DecoderNet(dcfg), ShotAutoencoder(autoencoder_config("tiny")).eval(),
                DiffusionConfig(), SamplerConfig(steps=2, guidance=2.0)).save_pretrained(root / "model" / "shot_decoder")
    save_engine(GameEngine(engine_config("tiny", rep_tokens=dcfg.n_tokens, rep_dim=dcfg.d_cond)).eval(),
                root / "model" / "engine")
    torch.manual_seed(1)
    VisionTower(vision_tower_config("tiny")).save_pretrained(root / "clip" / "final" / "vision_tower")
    # an action classifier beside the tower, as the shipped weights/evaluator holds one (48 x 64 input:
    # shots of other sizes are resized to it)
    from animegamer.models.action_classifier import ACTION_DIR, build_classifier
    from animegamer.training.fit_action_classifier import world_verbs

    build_classifier("tiny", world_verbs(), 48, 64).save_pretrained(root / "clip" / "final" / ACTION_DIR)
    # and a frame classifier (who, where, when; the picture columns)
    from animegamer.models.frame_classifier import FRAME_DIR, FrameClassifier
    from animegamer.models.frame_classifier import PRESETS as BACKBONES
    from animegamer.training.fit_frame_classifier import world_labels

    FrameClassifier(BACKBONES["tiny"], *world_labels(), (48, 64)).save_pretrained(root / "clip" / "final" / FRAME_DIR)
    return {"model": root / "model", "clip": root / "clip", "root": root}


@pytest.fixture(scope="module")
def evaluator(tiny):
    return Evaluator.load(tiny["clip"])


@pytest.fixture(scope="module")
def clips():
    from animegamer.world.instructions import Action
    from animegamer.world.shot import render_action

    run = render_action(Action(("Qiqi",), "run", "quickly", "town", "day"), seed=0, height=H, width=W, n_frames=T)
    sit = render_action(Action(("Mika",), "sit", "calmly", "beach", "night"), seed=1, height=H, width=W, n_frames=T)
    return run, sit


def test_pixel_metrics_on_known_inputs(clips):
    run, sit = clips
    a, b = align_clips(run, run)
    assert ssim(a, b) == pytest.approx(1.0) and psnr(a, b) > 100
    noisy = np.clip(run.astype(int) + np.random.default_rng(0).integers(-40, 41, run.shape), 0, 255).astype(np.uint8)
    shuffled = run[::-1].copy()  # frames in the wrong order
    for worse in (noisy, shuffled, sit):
        g, t = align_clips(worse, run)
        assert ssim(g, t) < ssim(a, b) and psnr(g, t) < psnr(a, b)
    assert ssim(*align_clips(noisy, run)) > ssim(*align_clips(sit, run))  # a little noise beats another shot
    # MS-SSIM needs frames of at least 65 px: the clips at twice the size
    up = lambda x: np.repeat(np.repeat(x, 2, axis=1), 2, axis=2)  # noqa: E731
    assert ms_ssim(up(run), up(run)) == pytest.approx(1.0)
    assert ms_ssim(up(run), up(noisy)) > ms_ssim(up(run), up(sit)) and ms_ssim(up(run), up(shuffled)) < 1.0
    with pytest.raises(ValueError, match="at least 65 px"):
        ms_ssim(run, run)
    # other sizes and lengths are brought onto the true clip's grid
    small = run[::2, ::4, ::4]  # (3, 12, 18, 3)
    g, t = align_clips(small, run)
    assert g.shape == t.shape == (3, H, W, 3) and np.array_equal(t[-1], run[-1])
    assert ssim(g, t) > ssim(*align_clips(sit, run))
    # ACC-F from pixels: a still clip is level 1, the quantiser is the world's
    from animegamer.world.flow import MotionQuantizer

    q = MotionQuantizer.load()
    assert motion_level_from_pixels(np.repeat(run[:1], T, 0), q)[0] == 1
    assert motion_level_from_pixels(run, q)[0] >= motion_level_from_pixels(np.repeat(run[:1], T, 0), q)[0]
    assert mean_abs_error({"stamina": 1, "social": 0, "entertainment": 1},
                          {"stamina": -1, "social": 0, "entertainment": 0}) == pytest.approx(1.0)


def test_evaluator_is_deterministic_and_probes_ask_one_thing(tiny, evaluator, clips):
    run, sit = clips
    e1, e2 = evaluator.embed_frames(run), Evaluator.load(tiny["clip"]).embed_frames(run)
    assert e1.shape == (T, evaluator.tower.embed_dim) and torch.equal(e1, e2)
    assert torch.allclose(e1.norm(dim=-1), torch.ones(T))
    assert float((e1 * evaluator.embed_frames(run)).sum(-1).mean()) == pytest.approx(1.0, abs=1e-5)
    assert float((e1 * evaluator.embed_frames(sit)).sum(-1).mean()) < 0.9999
    row = {"caption": "Qiqi and Yuki quickly hugging, day beach, yellow surfboard, sandcastle", "characters": ["Qiqi", "Yuki"],
           "place": "beach", "time": "day", "props": ["yellow surfboard", "sandcastle"]}
    ps = {p.attribute: p for p in probes(row)}
    assert set(ps) == {"character", "place", "prop:surfboard"}  # the sandcastle has no colour to ask about
    for p in ps.values():
        assert p.captions[p.answer] == row["caption"] and len(set(p.captions)) == len(p.captions) > 1
    assert "Yuki and Yuki" not in " ".join(ps["character"].captions)
    assert all(c.startswith("Qiqi and Yuki quickly hugging, day ") for c in ps["place"].captions)
    assert all(c.endswith(" surfboard, sandcastle") for c in ps["prop:surfboard"].captions)


def test_own_tower_is_recognised(tiny, evaluator, tmp_path):
    """A packed model whose decoder run encoded its shots with the evaluator's tower is flagged."""
    from animegamer.evaluation.evaluator import recorded_tower_hashes
    from animegamer.training.shot_cache import CACHE_FORMAT

    run = tmp_path / "decoder_run"
    (run / "cache" / "train").mkdir(parents=True)
    (run / "cache" / "train" / "meta.json").write_text(json.dumps(
        {"format": CACHE_FORMAT, "split": "train", "clip": {"path": str(tiny["clip"] / "final" / "vision_tower")}}))
    (run / "joint" / "final" / "shot_decoder").mkdir(parents=True)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.json").write_text(json.dumps({"shot_decoder": {"from": str(run / "joint" / "final" / "shot_decoder")}}))
    assert recorded_tower_hashes(model) == {evaluator.weights_hash}
    assert recorded_tower_hashes(tiny["model"]) == set()


def test_start_states_hook(tiny, tmp_path):
    from animegamer.game.session import Game, GameInputError

    game = Game.load(tiny["model"], store=tmp_path / "saves")
    start = {"stamina": 10, "social": 95, "entertainment": 0}
    s = game.new_session(["Qiqi"], seed=3, states=start)
    assert s.states == start and game.open_session(s.id).states == start  # saved with the game
    t = s.step("Character: Qiqi; Motion: quickly run; Background: day town.")
    assert t.states_before == start
    assert game.new_session(["Qiqi"]).states == {"stamina": 50, "social": 50, "entertainment": 50}
    for bad in ({"stamina": 10}, {"stamina": 101, "social": 0, "entertainment": 0},
                {"stamina": "x", "social": 0, "entertainment": 0}):
        with pytest.raises(GameInputError):
            game.new_session(["Qiqi"], states=bad)


def test_eval_end_to_end(tiny, capsys):
    from animegamer.cli import main
    from animegamer.world.dataset import WorldDataset
    from animegamer.world.instructions import template_ids

    out = tiny["root"] / "eval"
    argv = ["eval", "--sessions", "3", "--turns", "2", "--height", str(H), "--width", str(W), "--frames", str(T),
            "--seed", "9000", "--out", str(out), "--model", str(tiny["model"]), "--evaluator", str(tiny["clip"]),
            "--window-ablation", "0", "--ablation", f"no adaptation={tiny['model']}", "--no-progress",
            "--contact-turns", "4"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| AnimeGamer |" in printed and "stand-in for DreamSim" in printed
    rep = json.loads((out / "eval.json").read_text())
    # held-out world: every session planned as the test split, free text only from held-out templates
    world = WorldDataset(out / "world")
    assert world.meta["split"] == "test" and len(world.rows) == 6
    held = set(template_ids("heldout")) | {"structured"}
    assert all(r["split"] == "test" and r["template_id"] in held for r in world.rows)
    names = ["AnimeGamer", "window 0", "no adaptation", "ground truth (evaluator ceiling)", "shuffled truth (floor)"]
    assert list(rep["summary"]) == names
    main_row = rep["summary"]["AnimeGamer"]
    assert main_row["turns"] == 6 and main_row["sessions"] == 3
    for k in ("clip_i", "clip_t", "psnr", "ssim", "acc_f_pixels", "acc_f_engine", "mae_f", "char_acc", "place_acc",
              "action_acc", "sec"):
        assert main_row[k] is not None, k
    assert main_row["ms_ssim"] is None  # 48-px frames are too small for it
    assert rep["summary"]["ground truth (evaluator ceiling)"]["action_acc"] is not None
    for k in ("char_id", "place_id", "time_id", "sharpness", "fd"):  # the picture columns
        assert main_row[k] is not None, k
    gt = rep["summary"]["ground truth (evaluator ceiling)"]
    assert gt["sharpness"] == pytest.approx(1.0) and abs(gt["fd"]) < 1e-3 and main_row["fd"] > 0
    assert 0 <= main_row["acc_f_pixels"] <= 1 and main_row["mae_f"] >= 0 and -1 <= main_row["clip_i"] <= 1
    # the same model dir under another name plays the same game: same numbers (seeded, greedy)
    for k in ("clip_i", "psnr", "ssim", "acc_f_engine", "mae_f", "char_acc"):
        assert rep["summary"]["no adaptation"][k] == pytest.approx(main_row[k])
    truth = rep["summary"]["ground truth (evaluator ceiling)"]
    assert truth["acc_f_pixels"] == 1.0 and truth["clip_i"] is None  # the labels come from the same flow code
    md = (out / "eval.md").read_text()
    assert "stand-in for DreamSim" in md and "GC (text-only context)" in md and "| window 0 |" in md
    for f in ("eval.png", "contact_sheet.png", "systems/animegamer.jsonl"):
        assert (out / f).stat().st_size > 0, f
    rows = [json.loads(x) for x in (out / "systems" / "animegamer.jsonl").read_text().splitlines()]
    first = rows[0]
    s0 = world.sessions("test")[0]
    assert first["instruction"] == s0[0]["instruction"]
    assert first["states"] == {k: min(100, max(0, s0[0]["states_before"][k] + 5 * first["deltas"][k]))
                               for k in first["states"]}  # the game started from the session's true states
    # a rerun reuses every system's graded turns and reports the same numbers
    assert main(argv) == 0
    assert capsys.readouterr().out.count("reusing") == 3
    rep2 = json.loads((out / "eval.json").read_text())
    assert rep2["summary"] == rep["summary"]  # the references are graded again: the evaluator is deterministic
    # where and at what precision the systems play is part of what made their rows: bf16 plays them again
    assert main(argv + ["--precision", "bf16"]) == 0
    assert "reusing" not in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert main(argv + ["--device", "cuda"]) != 0
        assert "no CUDA GPU" in capsys.readouterr().err


def test_bench(tiny, capsys, tmp_path):
    from animegamer.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "--model", str(tiny["model"]), "--turns", "3", "--windows", "1,2", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "KV reuse" in table and "peak RSS" in table
    res = json.loads(out.read_text())
    assert [(r["window"], r["kv_reuse"]) for r in res["rows"]] == [(1, True), (1, False), (2, True), (2, False)]
    for r in res["rows"]:
        assert r["measured_turns"] == 2 and all(v is not None and v >= 0 for v in r["median"].values())
        assert r["median"]["turn_s"] >= r["median"]["engine_s"]
    by = {(r["window"], r["kv_reuse"]): r for r in res["rows"]}
    assert by[(2, True)]["per_turn"][2]["reused_tokens"] > 0 == by[(2, False)]["per_turn"][2]["reused_tokens"]
    assert res["peak_rss_mb"] > 0 and res["frames_shape"] == [5, 8, 8, 3]
    assert main(["bench", "--model", str(tmp_path / "none")]) == 2
    assert "no playable model" in capsys.readouterr().err
