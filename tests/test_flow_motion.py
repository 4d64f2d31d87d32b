"""Flow motion (decoder/flow_motion.py): flows from true shots, their packed layout, the motion network
that draws them, a shot that is its picture moved, and `train motion` -> `model pack` -> play."""
from __future__ import annotations

import argparse
import copy
import dataclasses

import numpy as np
import pytest
import torch
from tiny_game import tiny_models

from animegamer.cli import main as cli_main
from animegamer.decoder.diffusion import Denoiser, DiffusionConfig, collate_decoder
from animegamer.decoder.flow_motion import FlowCodec, FlowMotion, flows_to_first, warp_picture
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig, add_sampler_arguments, sampler_overrides
from animegamer.engine.model import save_engine
from animegamer.game.pack import MotionPacking, pack_model
from animegamer.game.session import Game
from animegamer.training.phase_motion import MotionTrainModule, flow_std

torch.set_num_threads(1)
CAST = ["Qiqi", "Mika", "Ren"]


def scene(h: int = 48, w: int = 72, seed: int = 0) -> np.ndarray:
    """A smooth textured picture DIS can follow (blobs of colour on a gradient)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / w * 200, yy / h * 200, np.full_like(xx, 80)], -1)
    for _ in range(12):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(3, 8)
        img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    return img.clip(0, 255).astype(np.uint8)


def test_the_flows_of_a_moving_picture_point_back_to_the_first_frame():
    picture = scene()
    frames = np.stack([np.roll(picture, 2 * k, axis=1) for k in range(5)])  # moving right, 2 px a frame
    flows = flows_to_first(frames)
    assert flows.shape == (5, 48, 72, 2) and not flows[0].any()
    inner = (slice(8, 40), slice(16, 56))
    for k in range(1, 5):  # each pixel of frame k came from 2k px to its left
        assert abs(float(np.median(flows[k][inner][..., 0])) + 2 * k) < 0.5, k
        assert abs(float(np.median(flows[k][inner][..., 1]))) < 0.5
    moved = warp_picture(picture, flows)
    err = np.abs(moved[:, inner[0], inner[1]].astype(int) - frames[:, inner[0], inner[1]]).mean()
    assert err < 6.0  # the picture moved along its own flows is the shot again
    with pytest.raises(ValueError, match="uint8"):
        flows_to_first(frames.astype(np.float32))
    with pytest.raises(ValueError, match="of its size"):
        warp_picture(picture, flows[:, :10])


def test_packed_flows_keep_the_latent_layout_and_come_back():
    codec = FlowCodec(spatial_ratio=4, temporal_ratio=4, channels_per_frame=4)
    flows = np.zeros((17, 48, 72, 2), np.float32)
    flows[1:, ..., 0] = np.arange(1, 17)[:, None, None] * -1.5  # a uniform pan, 1.5 px a frame
    packed = codec.pack(flows)
    assert packed.shape == (5, 16, 12, 18)  # the autoencoder's packed layout: 5 latent frames x 4 frames x 4 ch
    back = codec.unpack(packed[None], (48, 72))[0]
    assert np.allclose(back, flows, atol=1e-4)
    assert not packed.reshape(5, 4, 4, 12, 18)[:, :, 2:].any()  # the channels a flow does not use stay zero
    frames = torch.from_numpy(np.stack([scene()] * 17)).permute(0, 3, 1, 2).float().div(127.5).sub(1)[None]
    assert torch.equal(codec.encode(frames), torch.zeros(1, 5, 16, 12, 18))  # a still shot: no flow
    assert flow_std(torch.stack([packed, packed])) == pytest.approx(float(packed.reshape(5, 4, 4, 12, 18)[:, :, :2].std()),
                                                                     rel=1e-4)
    with pytest.raises(ValueError, match="needs 2 channels"):
        FlowCodec(4, 4, 1)
    rough = packed.clone()
    rough[1:, 0] += torch.from_numpy(np.indices((12, 18)).sum(0) % 2 * 2.0 - 1.0).float()  # a checkerboard tear
    torn, smoothed = codec.unpack(rough[None], (48, 72))[0], codec.unpack(rough[None], (48, 72), smooth=2.0)[0]
    assert np.abs(np.diff(smoothed[1:, ..., 0], axis=2)).mean() < 0.2 * np.abs(np.diff(torn[1:, ..., 0], axis=2)).mean()
    assert np.allclose(codec.unpack(packed[None], (48, 72), smooth=2.0)[0], flows, atol=1e-3)  # a uniform pan stays


def tiny_motion(dec: ShotDecoder) -> FlowMotion:
    net = copy.deepcopy(dec.net)
    return FlowMotion(net, DiffusionConfig(latent_scale=0.5), SamplerConfig(steps=2, guidance=1.0))


def test_a_shot_with_a_picture_is_that_picture_moved_and_saves(tmp_path):
    _, dec = tiny_models()
    h, w = dec.frame_size
    s_a = torch.randn(dec.config.n_tokens, dec.config.d_cond, generator=torch.Generator().manual_seed(1))
    picture = scene(h, w)
    plain = dec(s_a, 4, generator=torch.Generator().manual_seed(2), source=picture)
    dec.motion = tiny_motion(dec)
    assert np.array_equal(dec(s_a, 4, generator=torch.Generator().manual_seed(2), source=picture), plain)  # flag off
    dec.sampler = dataclasses.replace(dec.sampler, flow_motion=True)
    moved = dec(s_a, 4, generator=torch.Generator().manual_seed(2), source=picture)
    assert moved.shape == plain.shape and np.array_equal(moved[0], picture)  # starts from the picture itself
    assert not np.array_equal(moved[-1], picture)  # and moves it
    assert np.array_equal(dec(s_a, 4, generator=torch.Generator().manual_seed(2), source=picture), moved)  # seeded
    assert np.array_equal(dec(s_a, 4, generator=torch.Generator().manual_seed(2)), dec.decode_shots(
        dec.sample_latents(s_a[None], 4, torch.Generator().manual_seed(2)), 4)[0])  # no picture: the picture decoder
    batch = dec(torch.stack([s_a, s_a]), 4, generator=torch.Generator().manual_seed(2), source=[None, picture])
    assert np.array_equal(batch[1][0], picture) and batch.shape == (2, *plain.shape)
    dec.save_pretrained(tmp_path / "dec", dtype=torch.float16)
    back = ShotDecoder.from_pretrained(tmp_path / "dec")
    assert back.moves_pictures
    assert np.array_equal(back(s_a, 4, generator=torch.Generator().manual_seed(2), source=picture)[0], picture)
    other_net = copy.deepcopy(dec.net)
    with torch.no_grad():
        next(other_net.action_encoder.parameters()).add_(1.0)
    with pytest.raises(ValueError, match="another picture decoder"):
        FlowMotion.from_pretrained(tmp_path / "dec" / "motion", other_net)
    with pytest.raises(ValueError, match="smooth must be >= 0"):
        FlowMotion(dec.motion.net, dec.motion.diffusion, smooth=-1.0)


def test_a_motion_network_stored_as_a_low_rank_difference(tmp_path):
    _, dec = tiny_models()
    motion = tiny_motion(dec)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a fine-tune whose change of every weight has rank 2
        for name, w in motion.net.named_parameters():
            if w.dim() == 2 and min(w.shape) > 4 and not name.startswith("action_encoder."):
                w.add_(torch.randn(w.shape[0], 2, generator=g) @ torch.randn(2, w.shape[1], generator=g) * 0.01)
    whole = tmp_path / "whole"
    motion.save_pretrained(whole)
    motion.rank = 2
    motion.save_pretrained(tmp_path / "low", base=dec.net)
    size = lambda d: (d / "motion.safetensors").stat().st_size  # noqa: E731
    assert size(tmp_path / "low") < 0.5 * size(whole)
    back = FlowMotion.from_pretrained(tmp_path / "low", dec.net)
    assert back.rank == 2
    for (k, a), b in zip(motion.net.state_dict().items(), back.net.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-4), k
    changed = copy.deepcopy(dec.net)
    with torch.no_grad():
        next(changed.transformer.parameters()).add_(1.0)
    with pytest.raises(ValueError, match="another picture decoder"):
        FlowMotion.from_pretrained(tmp_path / "low", changed)  # a difference needs the base it was taken from
    with pytest.raises(ValueError, match="rank must be >= 1"):
        FlowMotion(motion.net, motion.diffusion, rank=0)


def test_the_motion_network_learns_on_flows():
    _, dec = tiny_models()
    t, c, hh, ww = dec.config.latent_shape[0], dec.config.latent_shape[1], *dec.config.latent_shape[2:]
    g = torch.Generator().manual_seed(0)
    items = [{"latents": torch.randn(t, c, hh, ww, generator=g) * 0.1, "f_md": torch.randn(dec.config.n_text, dec.config.d_text_in, generator=g),
              "f_v": torch.randn(dec.config.n_visual, dec.config.d_visual_in, generator=g), "motion_level": torch.tensor(3)}
             for _ in range(4)]
    batch = collate_decoder(items)
    module = MotionTrainModule(Denoiser(copy.deepcopy(dec.net), DiffusionConfig(latent_scale=5.0)), SamplerConfig())
    assert all(not p.requires_grad for p in module.denoiser.net.action_encoder.parameters())  # E_a is shared, frozen
    opt = torch.optim.AdamW(module.trainable_parameters(), lr=3e-3)
    noise = torch.randn(batch.latents.shape, generator=torch.Generator().manual_seed(1))
    ts = torch.full((4,), 500)

    def loss() -> float:
        with torch.no_grad():
            return float(module.denoiser(batch, timesteps=ts, noise=noise)[0])
    before = loss()
    for _ in range(30):
        opt.zero_grad()
        module.denoiser(batch, timesteps=ts, noise=noise)[0].backward()
        opt.step()
    assert loss() < 0.7 * before


def test_the_option_on_the_command_line():
    p = argparse.ArgumentParser()
    add_sampler_arguments(p)
    assert sampler_overrides(p.parse_args(["--flow-motion", "on"])) == {"flow_motion": True}
    with pytest.raises(ValueError, match="--flow-motion must be 'on' or 'off'"):
        sampler_overrides(p.parse_args(["--flow-motion", "yes"]))


def test_pack_a_motion_network_and_play_it(tmp_path):
    engine, dec = tiny_models()
    save_engine(engine, tmp_path / "run" / "engine")
    dec.save_pretrained(tmp_path / "run" / "shot_decoder")
    tiny_motion(ShotDecoder.from_pretrained(tmp_path / "run" / "shot_decoder")).save_pretrained(tmp_path / "m" / "motion")
    with pytest.raises(ValueError, match="needs a motion network"):
        pack_model(tmp_path / "run", tmp_path / "run", tmp_path / "bad", sampler={"flow_motion": True})
    assert not (tmp_path / "bad").exists()
    with pytest.raises(SystemExit, match="pass --motion-net"):
        cli_main(["model", "pack", "--engine", str(tmp_path / "run"), "--decoder", str(tmp_path / "run"),
                  "--out", str(tmp_path / "bad"), "--motion-smooth", "2"])
    out = pack_model(tmp_path / "run", tmp_path / "run", tmp_path / "model",
                     motion=MotionPacking(tmp_path / "m", smooth=2.0, max_scale=3.0, rank=2))
    game = Game.load(out, store=tmp_path / "saves", cast=CAST)
    assert game.decoder.moves_pictures
    assert (game.decoder.motion.smooth, game.decoder.motion.max_scale, game.decoder.motion.rank) == (2.0, 3.0, 2)
    s = game.new_session(["Mika"], seed=3)
    picture = scene(*game.decoder.frame_size)
    turn = s.step("Mika runs to the beach")  # without anchors there is no picture: the picture decoder draws
    assert turn.frames.shape[0] == game.decoder.config.num_frames
    drawn = game.decoder.draw_from_frame(turn.s_a, picture)
    shot = game.decoder(drawn, 5, generator=torch.Generator().manual_seed(0), source=picture)
    assert np.array_equal(shot[0], picture)
