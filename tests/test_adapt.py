"""Phase c end to end on tiny models: clip -> vae -> decoder (E_a frozen after warm-up) -> engine
on the warm-up's E_a -> adapt on the engine's predicted s_a.

A 20-session x 2-turn world at 48 x 72; every phase runs through its real command-line entry.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from animegamer.core.checkpoint import load_safetensors
from animegamer.training.cli import PHASES

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"  # the paper's ablations as override files

torch.set_num_threads(1)


def run_phase(name: str, argv: list[str]) -> None:
    import importlib

    phase = importlib.import_module(PHASES[name][0])
    parser = argparse.ArgumentParser()
    phase.add_arguments(parser)
    assert phase.run(parser.parse_args(argv + ["--no-progress"])) == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from animegamer.world.dataset import RenderConfig, render_dataset

    root = tmp_path_factory.mktemp("adapt")
    world = root / "world"
    render_dataset(RenderConfig(sessions=20, turns=2, height=48, width=72, workers=1), world, progress=False)
    w = str(world)
    run_phase("clip", ["--preset", "tiny", "--data", w, "--out", str(root / "clip"), "--steps", "2"])
    run_phase("vae", ["--preset", "tiny", "--data", w, "--out", str(root / "vae"), "--steps", "2"])
    run_phase("decoder", ["--preset", "tiny", "--data", w, "--clip", str(root / "clip"), "--vae", str(root / "vae"),
                          "--out", str(root / "decoder"), "--steps", "3", "--freeze-action-encoder",
                          "--samples", "0", "--eval-shots", "4", "--gradient-checkpointing"])
    # the engine learns from the warm-up's E_a while (in a real run) the joint stage goes on
    run_phase("engine", ["--preset", "tiny", "--data", w, "--decoder",
                         str(root / "decoder" / "warmup" / "final" / "shot_decoder"),
                         "--out", str(root / "engine"), "--steps", "2", "--no-closed-loop", "--eval-windows", "1",
                         "--gradient-checkpointing"])  # the LLM under LoRA, recomputed in the backward pass
    return {"root": root, "world": world}


def test_joint_stage_keeps_the_warmup_action_encoder(runs):
    dec = runs["root"] / "decoder"
    warm = load_safetensors(dec / "warmup" / "final" / "shot_decoder" / "shot_decoder.safetensors")
    joint = load_safetensors(dec / "joint" / "final" / "shot_decoder" / "shot_decoder.safetensors")
    ea = [k for k in warm if k.startswith("action_encoder.")]
    assert ea and all(torch.equal(warm[k], joint[k]) for k in ea)
    assert any(not torch.equal(warm[k], joint[k]) for k in warm if k.startswith("transformer.transformer_blocks"))
    run = json.loads((dec / "joint" / "run_config.json").read_text())  # trained with --gradient-checkpointing
    assert any(p.endswith("transformer") for p in run["gradient_checkpointing"]) and run["memory"]["trained_params"]
    engine_run = json.loads((runs["root"] / "engine" / "run_config.json").read_text())
    assert any(p.endswith("backbone") for p in engine_run["gradient_checkpointing"])


def test_adapt_trains_the_transformer_on_predicted_s_a_and_resumes(runs):
    from animegamer.decoder.pipeline import ShotDecoder
    from animegamer.training.loop import read_log

    root, out = runs["root"], runs["root"] / "adapt"
    argv = ["--preset", "tiny", "--data", str(runs["world"]), "--engine", str(root / "engine"),
            "--decoder", str(root / "decoder"), "--out", str(out), "--steps", "2", "--eval-shots", "4"]
    run_phase("adapt", argv)
    parts = sorted((out / "predicted_closed").glob("part_*.safetensors"))
    assert parts and load_safetensors(parts[0])["s_a"].dim() == 3
    base = ShotDecoder.from_pretrained(root / "decoder" / "joint" / "final" / "shot_decoder")
    adapted = ShotDecoder.from_pretrained(out / "final" / "shot_decoder")
    b, a = base.net.state_dict(), adapted.net.state_dict()
    assert all(torch.equal(b[k], a[k]) for k in b if k.startswith("action_encoder."))  # E_a frozen
    assert any(not torch.equal(b[k], a[k]) for k in b if k.startswith("transformer."))
    m = json.loads((out / "final" / "metrics.json").read_text())
    assert m["train_turns"] > 0 and m["history"] == "closed"
    ho = m["heldout_v_loss_predicted_s_a"]
    assert ho["turns"] > 0 and set(ho["before"]) == set(ho["after"]) and ho["before"]
    # resume: predictions are reused, training continues to the new step count
    stamp = parts[0].stat().st_mtime_ns
    run_phase("adapt", argv[:-4] + ["--steps", "3", "--eval-shots", "4", "--resume"])
    assert read_log(out)[-1]["step"] == 3 and parts[0].stat().st_mtime_ns == stamp


def test_adapt_mixes_true_shots_and_reports_what_was_kept(runs):
    """--true-fraction: part of every batch is phase a's task (the cache's true shots with s_a = E_a),
    and metrics.json grades the held-out v-loss on the TRUE s_a before and after as well."""
    from animegamer.decoder.pipeline import ShotDecoder
    from animegamer.training.phase_c import TrueShots
    from animegamer.training.phase_c import find_cache_dir
    from animegamer.training.shot_cache import CachedShots

    root, out = runs["root"], runs["root"] / "adapt_mixed"
    run_phase("adapt", ["--preset", "tiny", "--data", str(runs["world"]), "--engine", str(root / "engine"),
                        "--decoder", str(root / "decoder"), "--out", str(out), "--steps", "2", "--eval-shots", "4",
                        "--true-fraction", "0.5"])
    m = json.loads((out / "final" / "metrics.json").read_text())
    assert m["true_fraction"] == 0.5
    kept = m["heldout_v_loss_true_s_a"]
    assert kept["shots"] > 0 and kept["before"]["val_loss"] > 0 and kept["after"]["val_loss"] > 0
    # a true shot's s_a is exactly what E_a makes of its features
    net = ShotDecoder.from_pretrained(root / "decoder" / "joint" / "final" / "shot_decoder").net
    cache = CachedShots(find_cache_dir(root / "decoder", "train"))
    item = TrueShots(cache, net.action_encoder)[0]
    with torch.no_grad():
        torch.testing.assert_close(item["s_a"], net.action_encoder(item["f_md"][None], item["f_v"][None])[0])


def test_mix_true_shots_share_and_errors():
    from animegamer.training.phase_c import mix_true_shots

    predicted, true = list(range(10)), [f"t{i}" for i in range(100)]
    assert mix_true_shots(predicted, true, 0.0) is predicted
    for fraction in (0.25, 0.5, 0.8):
        mixed = mix_true_shots(predicted, true, fraction, seed=1)
        items = [mixed[i] for i in range(len(mixed))]
        share = sum(isinstance(x, str) for x in items) / len(items)
        assert abs(share - fraction) < 0.05, (fraction, share)
        assert set(range(10)) <= set(items)  # every predicted turn is in every epoch
        assert len({x for x in items if isinstance(x, str)}) == sum(isinstance(x, str) for x in items)  # no repeats
    assert [mixed[i] for i in range(len(mixed))] == [mix_true_shots(predicted, true, 0.8, seed=1)[i]
                                                     for i in range(len(mixed))]  # seeded
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="--true-fraction"):
            mix_true_shots(predicted, true, bad)


def test_adapt_refuses_a_bad_true_fraction_before_predicting(runs, tmp_path):
    root = runs["root"]
    with pytest.raises(SystemExit, match="--true-fraction must be in"):
        run_phase("adapt", ["--preset", "tiny", "--data", str(runs["world"]), "--engine", str(root / "engine"),
                            "--decoder", str(root / "decoder"), "--out", str(tmp_path / "a"), "--steps", "1",
                            "--true-fraction", "1"])
    assert not (tmp_path / "a" / "predicted_closed").exists()


def test_predicted_s_a_replaces_action_encoder_in_the_loss():
    from animegamer.decoder.network import DecoderNet, decoder_preset
    from animegamer.decoder.diffusion import DecoderBatch, Denoiser, DiffusionConfig

    torch.manual_seed(0)
    cfg = decoder_preset("tiny")
    den = Denoiser(DecoderNet(cfg), DiffusionConfig()).eval()
    g = torch.Generator().manual_seed(0)
    base = DecoderBatch(torch.randn(2, *cfg.latent_shape, generator=g), torch.randn(2, cfg.n_text, cfg.d_text_in),
                        torch.randn(2, cfg.n_visual, cfg.d_visual_in), torch.tensor([1, 5]))
    t, noise = torch.tensor([500, 500]), torch.randn(2, *cfg.latent_shape, generator=g)
    with torch.no_grad():
        ea = den.net.action_encoder(base.f_md, base.f_v)
        same = DecoderBatch(*(base.latents, base.f_md, base.f_v, base.motion_level), s_a=ea)
        other = DecoderBatch(*(base.latents, base.f_md, base.f_v, base.motion_level), s_a=torch.randn_like(ea))
        l0, l1, l2 = (den(x, timesteps=t, noise=noise)[0] for x in (base, same, other))
    torch.testing.assert_close(l0, l1)
    assert not torch.allclose(l0, l2)


def test_pack_makes_a_playable_fp16_model(runs, tmp_path):
    from animegamer.game.model_cli import register
    from animegamer.game.session import Game
    from animegamer.core.checkpoint import load_safetensors

    root = runs["root"]
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    out = tmp_path / "model"
    args = parser.parse_args(["model", "pack", "--engine", str(root / "engine"), "--decoder", str(root / "decoder"),
                              "--out", str(out)])
    assert args.func(args) == 0
    eng = load_safetensors(out / "engine" / "engine.safetensors")
    assert eng["rep_mean"].dtype == torch.float32
    assert all(v.dtype == torch.float16 for k, v in eng.items() if v.is_floating_point() and not k.startswith("rep_"))
    info = json.loads((out / "model.json").read_text())
    assert info["dtype"] == "float16" and info["engine"]["from"].endswith("final")
    game = Game.load(out, store=tmp_path / "saves")
    turn = game.new_session(["Qiqi"]).step("Character: Qiqi; Motion: quickly run; Background: day town.")
    assert turn.frames.dtype.name == "uint8" and turn.frames.shape[-1] == 3 and 1 <= turn.motion_level <= 5
    # a mismatched pair is refused with a clear message, and the old model stays
    with pytest.raises(FileNotFoundError, match="no engine"):
        from animegamer.game.pack import pack_model

        pack_model(tmp_path / "nowhere", root / "decoder", out)
    assert Game.load(out, store=tmp_path / "saves2").engine is not None
    # the sampler trade-off can be chosen when packing; a bad value fails before anything is written
    from animegamer.decoder.pipeline import ShotDecoder

    stored_decoder = ShotDecoder.from_pretrained(out / "shot_decoder")
    stored, stored_prior = stored_decoder.sampler, stored_decoder.diffusion.shared_noise_by_level
    args = parser.parse_args(["model", "pack", "--engine", str(root / "engine"), "--decoder", str(root / "decoder"),
                              "--out", str(tmp_path / "cfg1"), "--guidance", "1", "--sample-steps", "3"])
    assert args.func(args) == 0
    packed_decoder = ShotDecoder.from_pretrained(tmp_path / "cfg1" / "shot_decoder")
    packed = packed_decoder.sampler
    assert (packed.guidance, packed.steps) == (1.0, 3) and (stored.guidance, stored.steps) != (1.0, 3)
    assert packed_decoder.diffusion.shared_noise_by_level == stored_prior  # the training prior is untouched
    assert json.loads((tmp_path / "cfg1" / "model.json").read_text())["sampler_override"] == {
        "guidance": 1.0, "steps": 3}
    bad = parser.parse_args(["model", "pack", "--engine", str(root / "engine"), "--decoder", str(root / "decoder"),
                             "--out", str(out), "--sample-steps", "0"])
    with pytest.raises(SystemExit, match="model pack: .*steps must be >= 1"):
        bad.func(bad)
    assert ShotDecoder.from_pretrained(out / "shot_decoder").sampler == stored  # the old model stays


def test_eval_decoder_grades_true_s_a(runs, tmp_path):
    from animegamer.evaluation.cli import register

    root = runs["root"]
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    out = tmp_path / "dec.json"
    args = parser.parse_args(["eval-decoder", "--decoder", str(root / "decoder"), "--data", str(runs["world"]),
                              "--evaluator", str(root / "clip"), "--n", "2", "--out", str(out), "--no-progress",
                              "--steps", "1", "--guidance", "1.5", "--sheet", str(tmp_path / "sheet.png"),
                              "--sheet-shots", "2", "--latent-noise", "0,0.5"])
    assert args.func(args) == 0
    r = json.loads(out.read_text())
    ceiling = r["autoencoder_ceiling"]  # the autoencoder's round trips of the same 2 shots, per latent noise
    still = ceiling.pop("still_frame_sigma")  # the true motion's own frame-to-frame latent change
    assert set(ceiling) == {"0.0", "0.5"} and all(sum(c["level_counts"]) == 2 and 0 <= c["acc_f"] <= 1
                                                  for c in ceiling.values())
    assert still > 0 and r["latent_rms"] > 0 and r["latent_frame_sigma"] > 0
    # each shot is decoded at its true level and at a wrong one: 4 decodes filed by requested level
    by_level = r["latent_motion_by_level"]
    assert set(by_level) == {"1", "2", "3", "4", "5"} and sum(m["decodes"] for m in by_level.values()) == 4
    assert all(m["decoded"] > 0 for m in by_level.values() if m["decodes"])
    assert sum(m["true"] is not None for m in by_level.values()) >= 1  # the true shots' own motion
    per_true = r["by_true_level"]  # the same columns split by each shot's true level
    assert sum(m["shots"] for m in per_true.values()) == 2
    assert sum(m["shots"] * m["acc_f"] for m in per_true.values() if m["shots"]) / 2 == pytest.approx(r["acc_f"])
    bad = parser.parse_args(["eval-decoder", "--decoder", str(root / "decoder"), "--data", str(runs["world"]),
                             "--latent-noise", "0,-1"])
    with pytest.raises(SystemExit, match="standard deviations >= 0"):
        bad.func(bad)
    assert r["shots"] == 2 and r["steps"] == 1 and r["guidance"] == 1.5 and sum(r["decoded_level_counts"]) == 2
    # true x measured: every shot once, its columns are the measured counts, its diagonal the accuracy
    assert [sum(col) for col in zip(*r["level_confusion"])] == r["decoded_level_counts"]
    assert sum(r["level_confusion"][i][i] for i in range(5)) / 2 == pytest.approx(r["acc_f"])
    for k in ("clip_i", "character", "place", "acc_f", "acc_f_wrong_level", "ssim"):
        assert r[k] is not None and -1 <= r[k] <= 1
    assert r["psnr"] > 0 and r["ms_ssim"] is None  # the tiny world's 48-px frames are below MS-SSIM's minimum
    from PIL import Image

    with Image.open(r["sheet"]) as im:  # 2 rows: decoded strip beside the annotated true strip
        assert im.width > im.height > 0


def test_latent_visual_reference_trains_decoder_and_engine(runs, tmp_path):
    """visual_reference latent: f_v is the autoencoder's first-frame latent in patches; the engine's
    s_a targets are built with the same reference (found through the decoder run's cache meta)."""
    from animegamer.models.autoencoder import ShotAutoencoder
    from animegamer.representation.reference_encoder import LatentReference, reference_kind
    from animegamer.decoder.pipeline import ShotDecoder

    root, w = runs["root"], str(runs["world"])
    run_phase("decoder", ["--preset", "tiny", "--data", w, "--set", "visual_reference=latent", "--set",
                          "reference_patch=4", "--vae", str(root / "vae"), "--out", str(tmp_path / "decoder"), "--steps", "2",
                          "--freeze-action-encoder", "--samples", "0", "--eval-shots", "4"])
    meta = json.loads((tmp_path / "decoder" / "cache" / "train" / "meta.json").read_text())
    assert reference_kind(meta["clip"]["path"]) == "latent" and meta["reference_patch"] == 4
    dec = ShotDecoder.from_pretrained(tmp_path / "decoder" / "joint" / "final" / "shot_decoder")
    ae = ShotAutoencoder.from_pretrained(root / "vae" / "final" / "autoencoder")
    tokens = LatentReference(ae, 4).patch_tokens(torch.zeros(1, 3, 48, 72))
    assert (dec.config.n_visual, dec.config.d_visual_in) == tuple(tokens.shape[1:])
    run_phase("engine", ["--preset", "tiny", "--data", w, "--decoder",
                         str(tmp_path / "decoder" / "warmup" / "final" / "shot_decoder"),
                         "--out", str(tmp_path / "engine"), "--steps", "1", "--no-closed-loop", "--eval-windows", "1"])
    built = json.loads((tmp_path / "engine" / "sessions" / "train" / "engine_meta.json").read_text())
    assert reference_kind(built["build"]["clip"]) == "latent"


def test_cache_only_then_an_ablation_shares_the_cache(runs, tmp_path):
    """--cache-only builds the features and stops; the paper's w/o-level ablation (its override file) reads the
    same cache (the level is not a cached feature) and trains a decoder that ignores the level."""
    from animegamer.decoder.pipeline import ShotDecoder

    root, w = runs["root"], str(runs["world"])
    common = ["--preset", "tiny", "--data", w, "--clip", str(root / "clip"), "--vae", str(root / "vae"),
              "--cache", str(tmp_path / "cache"), "--samples", "0", "--eval-shots", "4"]
    run_phase("decoder", common + ["--out", str(tmp_path / "full"), "--cache-only"])
    assert json.loads((tmp_path / "cache" / "train" / "meta.json").read_text())["parts"] >= 1
    assert not (tmp_path / "full" / "joint").exists()  # nothing trained
    stamp = (tmp_path / "cache" / "train" / "part_00000.safetensors").stat().st_mtime_ns
    run_phase("decoder", common + ["--out", str(tmp_path / "no_ml"), "--config", str(CONFIGS / "no_motion_level.yaml"),
                                   "--steps", "2"])
    assert (tmp_path / "cache" / "train" / "part_00000.safetensors").stat().st_mtime_ns == stamp  # reused
    dec = ShotDecoder.from_pretrained(tmp_path / "no_ml" / "joint" / "final" / "shot_decoder")
    assert not dec.config.use_motion_level
    s_a = torch.randn(dec.config.n_tokens, dec.config.d_cond)
    a = dec(s_a, 1, torch.Generator().manual_seed(0), steps=1)
    b = dec(s_a, 5, torch.Generator().manual_seed(0), steps=1)
    assert (a == b).all()  # the level cannot change anything


def test_gc_baseline_caption_condition(runs, tmp_path):
    """The GC baseline's override file (condition caption): f_md encodes the whole caption, the visual stream is one
    constant token, and the engine's s_a targets are built the same way (from the decoder run's cache)."""
    from animegamer.engine.data import load_sessions
    from animegamer.decoder.pipeline import ShotDecoder

    root, w = runs["root"], str(runs["world"])
    run_phase("decoder", ["--preset", "tiny", "--data", w, "--config", str(CONFIGS / "gc_caption.yaml"),
                          "--set", "n_text=12", "--vae", str(root / "vae"), "--out", str(tmp_path / "gc"),
                          "--steps", "2", "--freeze-action-encoder", "--samples", "0", "--eval-shots", "4"])
    meta = json.loads((tmp_path / "gc" / "cache" / "train" / "meta.json").read_text())
    assert meta["condition"] == "caption" and meta["n_text"] == 12
    mine = load_safetensors(tmp_path / "gc" / "cache" / "train" / "part_00000.safetensors")
    theirs = load_safetensors(root / "decoder" / "cache" / "train" / "part_00000.safetensors")
    assert torch.equal(mine["latents"], theirs["latents"]) and not torch.equal(mine["f_md"], theirs["f_md"])
    dec = ShotDecoder.from_pretrained(tmp_path / "gc" / "joint" / "final" / "shot_decoder")
    assert (dec.config.n_text, dec.config.n_visual, dec.config.d_visual_in) == (12, 1, 1)
    run_phase("engine", ["--preset", "tiny", "--data", w, "--decoder",
                         str(tmp_path / "gc" / "warmup" / "final" / "shot_decoder"),
                         "--out", str(tmp_path / "engine"), "--steps", "1", "--no-closed-loop", "--eval-windows", "1"])
    sess_dir = tmp_path / "engine" / "sessions" / "train"
    assert json.loads((sess_dir / "engine_meta.json").read_text())["build"]["condition"] == "caption"
    turns = [t for s in load_sessions(sess_dir)[0] for t in s]
    vis = torch.stack([t["s_a"][12:] for t in turns])  # (turns, 1, D): the constant visual token
    assert torch.allclose(vis, vis[:1].expand_as(vis))
    text = torch.stack([t["s_a"][:12] for t in turns])
    assert not torch.allclose(text, text[:1].expand_as(text))  # captions differ turn to turn


def test_adapt_refuses_engine_sessions_of_another_world(tmp_path):
    """Shots pair with predictions by file name, which every world reuses: a world mismatch must stop."""
    from types import SimpleNamespace

    from animegamer.training.phase_c import check_same_world

    world, sessions = tmp_path / "world", tmp_path / "sessions"
    world.mkdir(), sessions.mkdir()
    (world / "meta.json").write_text(json.dumps({"seed": 1000}))
    cache = SimpleNamespace(meta={"data_seed": 1000})
    (sessions / "engine_meta.json").write_text(json.dumps({"build": {"world_seed": 1000}}))
    check_same_world(sessions, cache, world)  # one world: fine
    (sessions / "engine_meta.json").write_text(json.dumps({"build": {"world_seed": 5000}}))
    with pytest.raises(SystemExit, match="engine sessions 5000"):
        check_same_world(sessions, cache, world)
    with pytest.raises(SystemExit, match="decoder cache 3000"):
        check_same_world(tmp_path / "synthetic", SimpleNamespace(meta={"data_seed": 3000}), world)
