"""FrameNet, the pixel decoder of frames after the first: shapes, determinism, learning, the new-content metric."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from animegamer.cli import main as cli_main
from animegamer.core.checkpoint import save_json_atomic, save_safetensors_atomic
from animegamer.decoder.frame_diffusion import EDMConfig, FrameDenoiser, FrameSamplerConfig, karras_sigmas, sample_frames
from animegamer.decoder.frame_net import FrameNet, FrameNetConfig, frame_net_preset
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.engine.model import save_engine
from animegamer.evaluation.metrics import new_content
from animegamer.game.session import Game
from animegamer.game.store import frames_of
from animegamer.world.dataset import RenderConfig, render_dataset
from tiny_game import continuing_anchors, tiny_models

torch.set_num_threads(1)


def tiny() -> FrameDenoiser:
    torch.manual_seed(0)
    return FrameDenoiser(FrameNet(frame_net_preset("tiny")), EDMConfig())


def inputs(b: int = 2, seed: int = 0):
    cfg = frame_net_preset("tiny")
    g = torch.Generator().manual_seed(seed)
    first = torch.rand(b, 3, cfg.height, cfg.width, generator=g) * 2 - 1
    s_a = torch.randn(b, 6, cfg.cond_dim, generator=g)
    return first, s_a, torch.tensor([1, 5][:b])


def test_config_names_the_wrong_field():
    with pytest.raises(ValueError, match="frames - 1"):
        FrameNetConfig(frames=16, group=2, channels=(128, 160, 224))
    with pytest.raises(ValueError, match="cannot read its input"):
        FrameNetConfig(group=4, channels=(96, 160, 224))
    with pytest.raises(ValueError, match="divisible"):
        FrameNetConfig(height=90)
    assert FrameNetConfig.from_dict(FrameNetConfig().to_dict()) == FrameNetConfig()


def test_the_sampler_draws_every_frame_after_the_first_deterministically():
    d = tiny().eval()
    torch.nn.init.normal_(d.net.conv_out.weight, std=0.05)  # zero-initialised: the change would be 0 at init
    first, s_a, level = inputs()
    cfg = d.net.config
    a = sample_frames(d, first, s_a, level, FrameSamplerConfig(steps=2), torch.Generator().manual_seed(3))
    b = sample_frames(d, first, s_a, level, FrameSamplerConfig(steps=2), torch.Generator().manual_seed(3))
    assert a.shape == (2, cfg.frames - 1, 3, cfg.height, cfg.width)
    assert torch.equal(a, b) and float(a.abs().max()) <= 1.0
    c = sample_frames(d, first, s_a, level, FrameSamplerConfig(steps=2), torch.Generator().manual_seed(4))
    assert not torch.equal(a, c)


def test_a_shot_in_a_batch_is_the_same_shot_alone():
    d = tiny().eval()
    first, s_a, level = inputs()
    x = torch.randn(2, d.net.config.frames - 1, 3, d.net.config.height, d.net.config.width)
    sigma, aug = torch.tensor([0.5, 2.0]), torch.zeros(2)
    both = d.denoise(x, sigma, first, s_a, level, aug)
    one = d.denoise(x[1:], sigma[1:], first[1:], s_a[1:], level[1:], aug[1:])
    torch.testing.assert_close(both[1:], one, atol=1e-5, rtol=1e-4)


def test_the_level_and_s_a_reach_the_output():
    d = tiny()
    for p in d.parameters():  # zero-initialised heads hide the conditioning at init: perturb them
        torch.nn.init.normal_(p, std=0.05) if p.dim() > 1 else None
    first, s_a, level = inputs()
    x = torch.randn(2, d.net.config.frames - 1, 3, d.net.config.height, d.net.config.width)
    sigma, aug = torch.tensor([1.0, 1.0]), torch.zeros(2)
    base = d.denoise(x, sigma, first, s_a, level, aug)
    assert not torch.allclose(base, d.denoise(x, sigma, first, s_a, torch.tensor([3, 3]), aug))
    assert not torch.allclose(base, d.denoise(x, sigma, first, s_a + 1, level, aug))
    assert not torch.allclose(base, d.denoise(x, sigma, -first, s_a, level, aug))


def test_training_lowers_the_loss_and_the_run_reloads(tmp_path):
    torch.manual_seed(0)
    module = FrameDenoiser(FrameNet(frame_net_preset("tiny")), EDMConfig(p_mean=0.0, p_std=0.3))
    first, s_a, level = inputs()
    cfg = module.net.config
    # a shot that moves: the first frame shifted one pixel a frame
    frames = torch.stack([first.roll(t, dims=-1) for t in range(cfg.frames)], dim=1)  # (B, T, 3, H, W)
    batch = {"frames": frames, "s_a": s_a, "motion_level": level}
    opt = torch.optim.AdamW(module.parameters(), lr=3e-3)
    losses = []
    for step in range(60):
        torch.manual_seed(step % 4)  # the same 4 noise draws over and over
        loss, logs = module(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert np.mean(losses[-8:]) < 0.5 * np.mean(losses[:8])
    uint8 = dict(batch, frames=((frames.permute(0, 1, 3, 4, 2) + 1) * 127.5).round().to(torch.uint8))
    torch.manual_seed(0)
    assert torch.isfinite(module(uint8)[0])  # the training batch as the data loader sends it
    save_json_atomic({"model_config": module.config_dict()}, tmp_path / "config.json")
    save_safetensors_atomic({k: v.half() for k, v in module.state_dict().items()}, tmp_path / "model.safetensors")
    again = FrameDenoiser.from_pretrained(tmp_path)
    assert again.net.config == module.net.config
    for k, v in module.state_dict().items():
        torch.testing.assert_close(again.state_dict()[k], v.half().float())


def test_the_step_schedule_runs_from_sigma_max_to_zero():
    s = karras_sigmas(3, 0.002, 5.0, 7.0)
    assert float(s[0]) == pytest.approx(5.0, rel=1e-5) and float(s[-2]) == pytest.approx(0.002, rel=1e-4)
    assert float(s[-1]) == 0
    assert bool((s[:-1] > s[1:]).all())


def test_new_content_is_zero_for_a_moved_picture_and_not_for_a_new_object():
    yy, xx = np.mgrid[0:96, 0:144]
    background = np.stack([100 + 60 * np.sin(xx / 23), 120 + 50 * np.cos(yy / 17), 90 + 0 * xx], -1)
    sprite = np.zeros((20, 16, 3))
    sprite[:, :8], sprite[:, 8:] = (250, 40, 40), (40, 40, 250)  # two-coloured: the flow can follow it

    def shot(extra: bool) -> np.ndarray:
        frames = []
        for t in range(17):
            f = background.copy()
            f[40:60, 20 + t:36 + t] = sprite  # the sprite slides right, 1 px a frame
            if extra and t >= 8:
                f[10:40, 100:130] = (255, 255, 255)  # something the first frame does not hold appears
            frames.append(f)
        return np.stack(frames).astype(np.uint8)

    slid = new_content(shot(False))
    assert slid < 0.02  # DIS on flat colours leaves a small floor (true world shots score about 0.02)
    assert new_content(shot(True)) > slid + 0.025


def test_a_game_whose_decoder_draws_frames_goes_on_from_the_last_frame_shown(tmp_path):
    """With FrameNet packed in, a scene that goes on starts from the last frame the player saw (not a stored
    picture), every later frame is the network's, and a saved model reopens with it."""
    engine, decoder = tiny_models()
    continuing_anchors(decoder)  # every later turn continues
    h, w = decoder.frame_size
    cfg = frame_net_preset("tiny", frames=decoder.config.num_frames, height=h, width=w, cond_dim=decoder.config.d_cond)
    torch.manual_seed(1)
    decoder.framenet = FrameDenoiser(FrameNet(cfg), EDMConfig(), FrameSamplerConfig(steps=2, aug=0.0))
    torch.nn.init.normal_(decoder.framenet.net.conv_out.weight, std=0.05)  # a change to see
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    assert ShotDecoder.from_pretrained(tmp_path / "model" / "shot_decoder").draws_frames
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=["Qiqi", "Mika", "Ren"])
    s = game.new_session(["Qiqi", "Mika"], seed=4)
    t1 = s.step("Mika runs to the beach")
    t2 = s.step("Mika sits down")
    assert (t1.anchor, t2.anchor) == ("retrieved", "continued")
    shown = frames_of(t1.video_path)  # what the player saw, read back from the saved clip
    assert np.array_equal(t2.frames[0], shown[-1])
    assert not np.array_equal(t2.frames[1], t2.frames[0])  # drawn by the network, not a copy


def test_train_framenet_on_a_world_then_grade_it(tmp_path):
    """`train framenet` on a rendered world (s_a from the shipped E_a), resumable; `eval-drawn` grades the run."""
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=2, turns=3, seed=5, workers=1), world, progress=False)
    args = ["train", "framenet", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "run"),
            "--no-progress", "--text-table", str(tmp_path / "table.safetensors")]
    assert cli_main(args) == 0
    assert FrameDenoiser.from_pretrained(tmp_path / "run").net.config.height == 96
    assert cli_main(args + ["--resume", "--steps", "6"]) == 0
    assert (tmp_path / "table.safetensors").is_file()  # the texts it met, kept for a machine without MiniLM
    report = tmp_path / "drawn.json"
    assert cli_main(["eval-drawn", "--framenet", str(tmp_path / "run"), "--data", str(world), "--n", "2",
                     "--steps", "1", "--no-shipped", "--out", str(report)]) == 0
    systems = json.loads(report.read_text())["systems"]
    assert set(systems) == {"truth", "framenet"} and 0 <= systems["framenet"]["new_content"]["mean"] <= 1
    # EDM on the change from the first frame: the run draws with the sampler of its parametrization
    crop = ["train", "framenet", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "crop"),
            "--no-progress", "--text-table", str(tmp_path / "table.safetensors"),
            "--edm", json.dumps({"prediction": "residual", "sigma_data": 0.25})]
    assert cli_main(crop) == 0
    run = FrameDenoiser.from_pretrained(tmp_path / "crop")
    assert (run.net.config.height, run.edm.prediction, run.sampler.sigma_min) == (96, "residual", 0.002)
    with pytest.raises(SystemExit, match="from scratch"):
        cli_main(crop[:-2] + ["--init", str(tmp_path / "run"), "--edm", "{}", "--out", str(tmp_path / "x")])


def test_residual_edm_reads_its_input_by_construction_and_learns():
    """EDM on the change from the first frame: at a small sigma D is the noisy input itself (the skip path), at a
    large one the first frame plus the network's change; a moving shot's loss falls in training."""
    torch.manual_seed(0)
    edm = EDMConfig(prediction="residual", sigma_data=0.25, p_mean=-1.0, p_std=0.5)
    d = FrameDenoiser(FrameNet(frame_net_preset("tiny")), edm)
    first, s_a, level = inputs()
    cfg = d.net.config
    frames = torch.stack([first.roll(t, dims=-1) for t in range(cfg.frames)], dim=1)  # (B, T, 3, H, W)
    x = frames[:, 1:] + 0.001 * torch.randn_like(frames[:, 1:])
    with torch.no_grad():
        low = d.denoise(x, torch.full((2,), 0.001), first, s_a, level, torch.zeros(2))
        high = d.denoise(x, torch.full((2,), 50.0), first, s_a, level, torch.zeros(2))
    assert float((low - x).abs().max()) < 1e-3  # conv_out is zero at init: only the skip path speaks
    torch.testing.assert_close(high, first[:, None].expand_as(high), atol=0.01, rtol=0)
    opt = torch.optim.AdamW(d.parameters(), lr=3e-3)
    losses = []
    for step in range(60):
        torch.manual_seed(step % 4)
        loss, _ = d({"frames": frames, "s_a": s_a, "motion_level": level})
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert np.mean(losses[-8:]) < 0.5 * np.mean(losses[:8])
    with pytest.raises(ValueError, match="prediction must be one of"):
        EDMConfig(prediction="x0")


def test_the_net_draws_any_size_its_levels_divide():
    """Convolutions and attention over time only: a run graded on crops (experiments/) draws whole frames."""
    d = tiny().eval()
    cfg = d.net.config
    first, s_a, level = inputs()
    big = torch.rand(2, 3, 2 * cfg.height, 3 * cfg.width) * 2 - 1  # the tiny net's levels divide 4
    x = torch.randn(2, cfg.frames - 1, 3, 2 * cfg.height, 3 * cfg.width)
    assert d.denoise(x, torch.ones(2), big, s_a, level, torch.zeros(2)).shape == x.shape
    assert sample_frames(d, big, s_a, level, FrameSamplerConfig(steps=1)).shape == x.shape
    with pytest.raises(ValueError, match="multiples of 4"):
        d.denoise(x[..., :-2], torch.ones(2), big[..., :-2], s_a, level, torch.zeros(2))
