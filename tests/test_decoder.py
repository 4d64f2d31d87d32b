"""Phase a decoder: E_a, the CogVideoX decoder network, the diffusion loss/sampler, ShotDecoder.

Tiny random-init configs only (1 layer, width 16, 8x8 frames, 2 sampler steps).
"""
from __future__ import annotations


import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler

from animegamer.representation.action_encoder import ActionEncoder, ActionEncoderConfig, ActionRepresentation
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
from animegamer.decoder.network import DecoderConfig, DecoderNet, decoder_preset
from animegamer.decoder.diffusion import (
    DecoderBatch, Denoiser, DiffusionConfig, collate_decoder, draw_noise, v_target,
)
from animegamer.decoder.sampler import RETIRED_FIELDS, SamplerConfig, sample
from animegamer.decoder.pipeline import ShotDecoder, frames_from_uint8, frames_to_uint8

torch.set_num_threads(1)


def tiny_net(seed: int = 0, **overrides) -> DecoderNet:
    torch.manual_seed(seed)
    return DecoderNet(decoder_preset("tiny", **overrides))


def tiny_batch(cfg: DecoderConfig, b: int = 2, seed: int = 0) -> DecoderBatch:
    g = torch.Generator().manual_seed(seed)
    return DecoderBatch(
        latents=torch.randn(b, *cfg.latent_shape, generator=g),
        f_md=torch.randn(b, cfg.n_text, cfg.d_text_in, generator=g),
        f_v=torch.randn(b, cfg.n_visual, cfg.d_visual_in, generator=g),
        motion_level=torch.arange(b) % 5 + 1,
    )


def tiny_shot_decoder(seed: int = 0) -> ShotDecoder:
    torch.manual_seed(seed)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()  # 2x spatial, C' = 4 * 2 = 8
    return ShotDecoder(tiny_net(seed), ae, DiffusionConfig(), SamplerConfig(steps=2, guidance=2.0))


def test_shapes():
    net = tiny_net()
    cfg = net.config
    batch = tiny_batch(cfg)
    s_a = net.action_encoder(batch.f_md, batch.f_v)
    assert s_a.shape == (2, cfg.n_text + cfg.n_visual, cfg.width)
    out = net(batch.latents, torch.tensor([3, 900]), s_a, batch.motion_level)
    assert out.shape == batch.latents.shape == (2, 2, 8, 4, 4)
    frames = tiny_shot_decoder()(s_a[0], motion_level=2, generator=torch.Generator().manual_seed(0))
    assert frames.shape == (5, 8, 8, 3) and frames.dtype == np.uint8
    frames = tiny_shot_decoder()(s_a, motion_level=torch.tensor([1, 5]), generator=torch.Generator().manual_seed(0))
    assert frames.shape == (2, 5, 8, 8, 3)
    with pytest.raises(ValueError, match="s_a must be"):
        net(batch.latents, torch.tensor([3, 900]), s_a[:, 1:], batch.motion_level)


def test_uint8_frames_round_trip():
    frames = np.random.default_rng(0).integers(0, 256, (5, 8, 12, 3), dtype=np.uint8)
    x = frames_from_uint8(frames)
    assert x.shape == (5, 3, 8, 12) and x.min() >= -1 and x.max() <= 1
    assert np.array_equal(frames_to_uint8(x), frames)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="latent_height"):
        DecoderConfig(latent_height=7)
    with pytest.raises(ValueError, match="num_frames"):
        DecoderConfig(num_frames=16)
    with pytest.raises(ValueError, match="n_visual"):
        ActionEncoderConfig(n_visual=0)
    with pytest.raises(ValueError, match="cond_dropout"):
        DiffusionConfig(cond_dropout=1.5)


def test_null_branch_is_action_encoder_of_zeros():
    ea = ActionEncoder(ActionEncoderConfig(d_text_in=8, d_visual_in=6, n_text=3, n_visual=4, d_model=16))
    zeros = ea(torch.zeros(2, 3, 8), torch.zeros(2, 4, 6))
    assert torch.equal(ea.null(2), zeros)
    assert ea.null(2).shape == (2, 7, 16)


def test_motion_embedding_zero_at_init_then_matters():
    net = tiny_net().eval()
    last = net.transformer.ofs_embedding.linear_2
    assert torch.count_nonzero(last.weight) == 0 and torch.count_nonzero(last.bias) == 0
    batch = tiny_batch(net.config)
    s_a = net.action_encoder(batch.f_md, batch.f_v)
    t = torch.tensor([500, 500])
    with torch.no_grad():
        out1 = net(batch.latents, t, s_a, torch.tensor([1, 1]))
        out5 = net(batch.latents, t, s_a, torch.tensor([5, 5]))
        assert torch.equal(out1, out5)  # zero-initialised: the level adds nothing yet
        torch.nn.init.normal_(last.weight, std=0.5)  # what training does to it
        out1 = net(batch.latents, t, s_a, torch.tensor([1, 1]))
        out5 = net(batch.latents, t, s_a, torch.tensor([5, 5]))
    assert (out1 - out5).abs().max() > 1e-3
    # the ablation without f_ms has no motion embedding at all
    assert tiny_net(use_motion_level=False).transformer.ofs_embedding is None


def test_v_prediction_target():
    sched = DDPMScheduler(**DiffusionConfig().schedule_kwargs())
    g = torch.Generator().manual_seed(0)
    x0, noise = torch.randn(3, 2, 4, 2, 2, generator=g), torch.randn(3, 2, 4, 2, 2, generator=g)
    t = torch.tensor([0, 400, 999])
    acp = sched.alphas_cumprod[t]
    v = v_target(x0, noise, acp)
    torch.testing.assert_close(v, sched.get_velocity(x0, noise, t))
    # known case: at the zero-terminal-SNR end (alpha_bar = 0) v = -x0; x0 = 0 gives v = sqrt(a) * eps
    assert acp[2] == 0
    torch.testing.assert_close(v[2], -x0[2])
    torch.testing.assert_close(v_target(torch.zeros_like(x0), noise, acp), acp.sqrt().view(3, 1, 1, 1, 1) * noise)
    # x0 is recovered from (x_t, v): x0 = sqrt(a) x_t - sqrt(1 - a) v
    a = acp.view(3, 1, 1, 1, 1)
    x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
    torch.testing.assert_close(a.sqrt() * x_t - (1 - a).sqrt() * v, x0)


def test_training_step_lowers_loss_on_fixed_batch():
    net = tiny_net()
    den = Denoiser(net, DiffusionConfig(cond_dropout=0.0)).train()
    batch = tiny_batch(net.config, b=4)
    t = torch.tensor([100, 300, 600, 900])
    noise = torch.randn(batch.latents.shape, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.Adam(den.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss, logs = den(batch, timesteps=t, noise=noise)
        assert set(logs) >= {"loss", "cond_drop"}
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses


def test_condition_dropout_uses_null_branch():
    net = tiny_net()
    den = Denoiser(net, DiffusionConfig(cond_dropout=0.999)).train()
    batch = tiny_batch(net.config)
    s_a, drop = den.condition(batch, 0.999)
    assert drop.all() and torch.equal(s_a, net.action_encoder.null(2))


def test_warmup_freezes_the_transformer():
    net = tiny_net()
    net.set_warmup(True)
    trainable = {n for n, p in net.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("action_encoder.", "transformer.ofs_embedding.",
                                           "transformer.patch_embed.text_proj.")) for n in trainable)
    assert any(n.startswith("action_encoder.") for n in trainable)
    net.set_warmup(False)
    assert all(p.requires_grad for p in net.parameters())


def test_seeded_sampling_is_deterministic():
    dec = tiny_shot_decoder()
    s_a = torch.randn(7, 16, generator=torch.Generator().manual_seed(3))
    a = dec(s_a, 3, generator=torch.Generator().manual_seed(11))
    b = dec(s_a, 3, generator=torch.Generator().manual_seed(11))
    c = dec(s_a, 3, generator=torch.Generator().manual_seed(12))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # batch vs single: the same noise gives the same latents
    net, cfg = dec.net, dec.diffusion
    s2 = torch.stack([s_a, s_a * 0.5])
    lat_b = sample(net, s2, torch.tensor([3, 3]), torch.Generator().manual_seed(5), cfg, dec.sampler)
    lat_1 = sample(net, s2[:1], torch.tensor([3]), torch.Generator().manual_seed(5), cfg, dec.sampler)
    torch.testing.assert_close(lat_b[:1], lat_1, atol=1e-5, rtol=1e-4)


def test_shared_noise_is_unit_variance_and_correlated_across_frames_only():
    shape = (64, 3, 8, 4, 4)  # B, F latent frames, C' = 4 frames x 2 channels, h, w
    iid = draw_noise(shape, DiffusionConfig(), torch.Generator().manual_seed(1))
    assert torch.equal(iid, torch.randn(shape, generator=torch.Generator().manual_seed(1)))  # old decoders: same draw
    mixed = draw_noise(shape, DiffusionConfig(shared_noise=0.6, noise_frame_groups=4), torch.Generator().manual_seed(1))
    assert mixed.var().item() == pytest.approx(1.0, abs=0.05)
    frames = mixed.reshape(64, 3 * 4, 2, 4, 4)  # one (2, 4, 4) latent per video frame
    same_pos = torch.corrcoef(torch.stack([frames[:, 1].flatten(), frames[:, 9].flatten()]))[0, 1]
    other_channel = torch.corrcoef(torch.stack([frames[:, 1, 0].flatten(), frames[:, 9, 1].flatten()]))[0, 1]
    other_shot = torch.corrcoef(torch.stack([frames[:32, 1].flatten(), frames[32:, 9].flatten()]))[0, 1]
    assert same_pos.item() == pytest.approx(0.6, abs=0.07)  # the shared fraction, between any two frames
    assert abs(other_channel.item()) < 0.1 and abs(other_shot.item()) < 0.1
    with pytest.raises(ValueError, match="shared_noise"):
        DiffusionConfig(shared_noise=1.0)
    with pytest.raises(ValueError, match="noise_frame_groups 3"):
        draw_noise(shape, DiffusionConfig(shared_noise=0.5, noise_frame_groups=3))


def test_shared_noise_decoder_trains_samples_and_round_trips(tmp_path):
    torch.manual_seed(0)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()
    dec = ShotDecoder(tiny_net(), ae, DiffusionConfig(shared_noise=0.5, noise_frame_groups=4),
                      SamplerConfig(steps=2, guidance=2.0))
    den = Denoiser(dec.net, dec.diffusion).train()
    loss, _ = den(tiny_batch(dec.config))
    loss.backward()
    assert torch.isfinite(loss)
    dec.save_pretrained(tmp_path / "dec")
    loaded = ShotDecoder.from_pretrained(tmp_path / "dec")
    assert loaded.diffusion.shared_noise == 0.5 and loaded.diffusion.noise_frame_groups == 4
    s_a = torch.randn(7, 16)
    a = loaded(s_a, 2, torch.Generator().manual_seed(0))
    assert np.array_equal(a, dec(s_a, 2, torch.Generator().manual_seed(0)))
    loaded.diffusion.shared_noise = 0.0  # the sampler really draws the mixed noise
    assert not np.array_equal(a, loaded(s_a, 2, torch.Generator().manual_seed(0)))


def test_level_matched_noise_follows_each_samples_level_and_round_trips(tmp_path):
    shape = (400, 3, 8, 2, 2)
    cfg = DiffusionConfig(shared_noise=0.5, shared_noise_by_level=[0.95, 0.9, 0.6, 0.3, 0.0], noise_frame_groups=4)
    levels = torch.tensor([1, 5] * 200)
    x = draw_noise(shape, cfg, torch.Generator().manual_seed(2), motion_level=levels).reshape(400, 12, 2, 2, 2)
    for level, rho in ((1, 0.95), (5, 0.0)):  # frame-to-frame correlation = that level's shared fraction
        rows = x[levels == level]
        corr = torch.corrcoef(torch.stack([rows[:, 2].flatten(), rows[:, 7].flatten()]))[0, 1]
        assert corr.item() == pytest.approx(rho, abs=0.08) and rows.var().item() == pytest.approx(1.0, abs=0.1)
    # no level (or a decoder without it): the scalar shared_noise, exactly as before
    assert torch.equal(draw_noise(shape, cfg, torch.Generator().manual_seed(2)),
                       draw_noise(shape, DiffusionConfig(shared_noise=0.5, noise_frame_groups=4),
                                  torch.Generator().manual_seed(2)))
    with pytest.raises(ValueError, match="shared_noise_by_level"):
        DiffusionConfig(shared_noise_by_level=[0.9, 0.5])
    with pytest.raises(ValueError, match="1..5"):
        draw_noise(shape, cfg, motion_level=torch.tensor([0] * 400))
    torch.manual_seed(0)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()
    dec = ShotDecoder(tiny_net(), ae, DiffusionConfig(noise_frame_groups=4, shared_noise_by_level=[0.99, 0.9, 0.5, 0.2, 0.0]),
                      SamplerConfig(steps=2, guidance=1.0))
    den = Denoiser(dec.net, dec.diffusion).train()
    loss, _ = den(tiny_batch(dec.config))
    assert torch.isfinite(loss)
    batch = tiny_batch(dec.config)  # training and held-out losses draw the same level-matched noise
    assert torch.equal(den.noise_for(batch, torch.Generator().manual_seed(3)),
                       draw_noise(tuple(batch.latents.shape), dec.diffusion, torch.Generator().manual_seed(3),
                                  motion_level=batch.motion_level))
    dec.save_pretrained(tmp_path / "dec")
    loaded = ShotDecoder.from_pretrained(tmp_path / "dec")
    assert loaded.diffusion.shared_noise_by_level == [0.99, 0.9, 0.5, 0.2, 0.0]
    s_a = torch.randn(7, 16)
    a = loaded(s_a, 1, torch.Generator().manual_seed(0))
    assert np.array_equal(a, dec(s_a, 1, torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="pass a motion level"):
        sample(loaded.net, s_a[None], None, torch.Generator().manual_seed(0), loaded.diffusion, loaded.sampler)
    loaded.diffusion.shared_noise_by_level = None  # the sampler really draws the level-1 prior
    assert not np.array_equal(a, loaded(s_a, 1, torch.Generator().manual_seed(0)))


def test_version_1_decoders_load_with_their_sampler_settings(tmp_path):
    """shot_decoder.json v1 kept the sampler's settings inside the diffusion config: it loads and samples the
    same shots; the settings of the picture decoder's retired fixes (motion guidance, per-level noise and motion
    scale, motion control, source detail, flow motion) are dropped, in v1 and v2 alike; a v1 decoder that used a
    sampler option this version dropped long ago is refused by name."""
    import json

    dec = tiny_shot_decoder(seed=3)
    dec.save_pretrained(tmp_path / "dec")
    path = tmp_path / "dec" / "shot_decoder.json"
    meta = json.loads(path.read_text())
    v2 = json.loads(json.dumps(meta))
    v2["sampler"].update(motion_guidance=1.0, shared_noise_by_level=[0.9] * 5, source_detail=True)
    assert set(RETIRED_FIELDS) >= {"motion_guidance", "shared_noise_by_level", "source_detail"}
    path.write_text(json.dumps(v2))
    assert ShotDecoder.from_pretrained(tmp_path / "dec").sampler == dec.sampler
    s = meta.pop("sampler")
    meta["format_version"] = 1
    meta["diffusion"].update(steps=s["steps"], guidance=s["guidance"], motion_guidance=1.0,
                             autocast=s["autocast"], dynamic_cfg=False, sampler="dpmpp",
                             sampling_shared_noise_by_level=[0.9] * 5, sampling_motion_scale_by_level=None)
    path.write_text(json.dumps(meta))
    old = ShotDecoder.from_pretrained(tmp_path / "dec")
    assert old.sampler == dec.sampler and old.diffusion == dec.diffusion
    s_a = torch.randn(7, 16)
    assert np.array_equal(old(s_a, 2, torch.Generator().manual_seed(0)), dec(s_a, 2, torch.Generator().manual_seed(0)))
    meta["diffusion"]["dynamic_cfg"] = True
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="dynamic CFG"):
        ShotDecoder.from_pretrained(tmp_path / "dec")


def test_save_load_round_trip_is_exact(tmp_path):
    dec = tiny_shot_decoder(seed=4)
    with torch.no_grad():  # make E_a / motion weights non-trivial, as after training
        torch.nn.init.normal_(dec.net.transformer.ofs_embedding.linear_2.weight)
    dec.save_pretrained(tmp_path / "dec")
    dec.save_pretrained(tmp_path / "dec")  # overwriting an existing directory is atomic too
    loaded = ShotDecoder.from_pretrained(tmp_path / "dec")
    a_sd, b_sd = dec.state_dict(), loaded.state_dict()
    assert a_sd.keys() == b_sd.keys()
    assert all(torch.equal(a_sd[k], b_sd[k]) for k in a_sd)
    assert loaded.config == dec.config and loaded.diffusion == dec.diffusion
    s_a = torch.randn(7, 16)
    assert np.array_equal(dec(s_a, 4, torch.Generator().manual_seed(0)),
                          loaded(s_a, 4, torch.Generator().manual_seed(0)))
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_action_representation_uses_first_frame():
    class Tower:  # f_v = per-channel mean of the image, as 4 tokens of width 6 (3 used)
        def patch_tokens(self, images):
            m = images.mean(dim=(2, 3))  # (B, 3)
            return torch.cat([m, m], dim=1).unsqueeze(1).expand(-1, 4, -1)  # (B, 4, 6)

    class Text:
        def token_states(self, texts, n_text):
            states = torch.ones(len(texts), n_text, 8)
            mask = torch.zeros(len(texts), n_text, dtype=torch.bool)
            mask[:, :2] = True
            return states * mask[..., None], mask

    ea = ActionEncoder(ActionEncoderConfig(d_text_in=8, d_visual_in=6, n_text=3, n_visual=4, d_model=16))
    rep = ActionRepresentation(Tower(), Text(), ea)
    frames = torch.randn(2, 5, 3, 8, 8)
    s_first = rep.encode_shots(frames, ["run", "walk"])
    assert s_first.shape == (2, 7, 16)
    torch.testing.assert_close(s_first, rep.encode(frames[:, 0], ["run", "walk"]))
    rep.random_frame = True
    s_rand = rep.encode_shots(frames, ["run", "walk"], generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(s_rand, s_first)


def test_collate_decoder():
    items = [{"latents": torch.zeros(2, 8, 4, 4), "f_md": torch.zeros(3, 8), "f_v": torch.zeros(4, 8),
              "motion_level": torch.tensor(3)} for _ in range(2)]
    batch = collate_decoder(items)
    assert batch.latents.shape == (2, 2, 8, 4, 4) and batch.motion_level.tolist() == [3, 3]


def test_video_io_round_trip(tmp_path):
    from animegamer.core.video_io import read_video, save_gif, save_mp4

    frames = np.zeros((5, 16, 24, 3), np.uint8)
    for i in range(5):  # distinct frames: PIL merges identical consecutive GIF frames (timing kept)
        frames[i, :, : 4 + 4 * i] = 200
    save_mp4(frames, tmp_path / "a.mp4", fps=8)
    save_gif(frames, tmp_path / "a.gif", fps=8)
    mp4, gif = read_video(tmp_path / "a.mp4"), read_video(tmp_path / "a.gif")
    assert mp4.shape == gif.shape == (5, 16, 24, 3)
    assert np.abs(gif.astype(int) - frames).max() <= 2 and np.abs(mp4.astype(int) - frames).mean() < 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif", "a.mp4"]


def test_phase_cache_and_warmup_stage_train_only_the_condition_path(tmp_path):
    """Cache build (resumable parts) + the two-stage schedule through the generic loop."""
    from animegamer.training.phase_a import DecoderTrainModule
    from animegamer.training.shot_cache import CachedShots, build_cache
    from animegamer.training.loop import TrainConfig, train

    torch.manual_seed(0)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()

    class Tower:
        def patch_tokens(self, images):  # (B, 3, 8, 8) -> (B, 4, 8)
            return images.mean(1).reshape(-1, 4, 16)[..., :8]

    class Text:
        def token_states(self, texts, n):
            return torch.ones(len(texts), n, 8), torch.ones(len(texts), n, dtype=torch.bool)

    g = torch.Generator().manual_seed(0)
    shots = [{"frames": torch.randint(0, 255, (5, 8, 8, 3), generator=g, dtype=torch.uint8),
              "row": {"motion_text": "run", "caption": "c", "motion_level": 1 + i % 5, "characters": ["a"],
                      "place": "town", "motion": "run"}} for i in range(4)]
    meta = {"split": "train", "n_text": 3, "random_frame": False}
    calls = []

    def enc():
        calls.append(1)
        return {"tower": Tower(), "text": Text(), "ae": ae}

    build_cache(shots, enc, tmp_path / "cache", meta, progress=False)
    build_cache(shots, enc, tmp_path / "cache", meta, progress=False)  # finished parts are reused
    assert len(calls) == 1
    ds = CachedShots(tmp_path / "cache")
    assert len(ds) == 4 and ds[0]["latents"].shape == (2, 8, 4, 4) and ds[0]["f_v"].shape == (4, 8)

    from animegamer.decoder.diffusion import collate_decoder

    den = Denoiser(tiny_net(), DiffusionConfig())
    before = {k: v.clone() for k, v in den.net.state_dict().items()}
    cfg = TrainConfig(steps=2, batch_size=2, lr=1e-2, warmup_steps=0, log_every=1, save_every=0, progress=False)
    train(DecoderTrainModule(den, ae, "warmup"), ds, collate_decoder, cfg, tmp_path / "warmup")
    after = den.net.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert any(k.startswith("action_encoder.") for k in changed)
    assert all(k.startswith(("action_encoder.", "transformer.ofs_embedding.", "transformer.patch_embed.text_proj."))
               for k in changed), changed
    loaded = ShotDecoder.from_pretrained(tmp_path / "warmup" / "final" / "shot_decoder")
    assert loaded.config == den.net.config


def test_benchmark_and_sweep_run_on_tiny():
    from animegamer.evaluation.bench.decoder import sweep
    from animegamer.decoder.speed import bench_decode

    dec = tiny_shot_decoder()
    r = bench_decode(dec, steps=2, guidance=2.0, n=1, warmup=0)
    assert r["total_s"] >= r["sample_s"] > 0 and r["peak_rss_mb"] > 0
    s_a = torch.randn(2, 7, 16)
    true = np.zeros((2, 5, 8, 8, 3), np.uint8)
    rows = sweep(dec, s_a, torch.tensor([1, 2]), true, [1, 2], [1.0, 3.0],
                 metrics=lambda p, t: {"mean": float(p.mean())})
    assert len(rows) == 4 and {"psnr", "s_per_shot", "mean"} <= set(rows[0])


def test_sampler_with_oracle_v_recovers_the_data_point():
    """If the network predicts the exact v of a one-point data distribution, sampling lands on it:
    checks the timestep / v-prediction / schedule conventions between training and sampling."""
    net = tiny_net()
    cfg = DiffusionConfig()
    acp = DDPMScheduler(**cfg.schedule_kwargs()).alphas_cumprod.double()
    x0 = torch.randn(1, *net.config.latent_shape, generator=torch.Generator().manual_seed(2))

    class Oracle(torch.nn.Module):
        config, action_encoder = net.config, net.action_encoder

        def forward(self, x_t, t, s_a, level):
            a = acp[t.long()].clamp_min(2.0**-24).view(-1, 1, 1, 1, 1)
            eps = (x_t.double() - a.sqrt() * x0) / (1 - a).sqrt()
            return (a.sqrt() * eps - (1 - a).sqrt() * x0).float()

    out = sample(Oracle(), torch.zeros(1, 7, 16), torch.tensor([3]), torch.Generator().manual_seed(0), cfg,
                 SamplerConfig(steps=4, guidance=1.0))
    torch.testing.assert_close(out, x0.float(), atol=1e-3, rtol=1e-3)


def test_latent_reference_patches_the_first_frame_latent():
    """Token (i, j) of the latent reference holds exactly latent patch (i, j) of the frame."""
    from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
    from animegamer.representation.reference_encoder import LatentReference

    torch.manual_seed(0)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()
    ref = LatentReference(ae, patch=2)
    img = torch.rand(2, 3, 16, 24) * 2 - 1
    tok = ref.patch_tokens(img)
    with torch.no_grad():
        z = (ae.encode_frames(img) - ae.latent_shift) * ae.latent_scale  # (2, C, h, w)
    s, c = ae.spatial_ratio, z.shape[1]
    gh, gw = 16 // s // 2, 24 // s // 2
    assert tok.shape == (2, gh * gw, c * 4)
    assert torch.allclose(tok[1, 1 * gw + 2].reshape(c, 2, 2), z[1, :, 2:4, 4:6], atol=1e-6)
    with pytest.raises(ValueError, match="divisible"):
        ref.patch_tokens(torch.zeros(1, 3, 10, 24))


def test_spatial_reference_lays_visual_tokens_on_their_patches_and_starts_as_the_old_decoder():
    cfg = decoder_preset("tiny", reference_channels=3)  # 4 visual tokens on a 2 x 2 grid of 2 x 2 patches
    net = tiny_net(reference_channels=3).eval()
    assert net.transformer.patch_embed.proj.in_channels == cfg.latent_channels + 3
    # token k fills exactly patch k of the map (row-major over the patch grid)
    with torch.no_grad():
        net.reference_proj.weight.zero_()
        net.reference_proj.bias.copy_(torch.arange(12.0))  # C_r x p x p = 3 x 2 x 2
        s_a = torch.zeros(1, cfg.n_tokens, cfg.d_cond)
        m = net.reference_map(s_a)  # (1, 3, 4, 4)
        assert m.shape == (1, 3, 4, 4)
        torch.testing.assert_close(m[0, 1, :2, :2], torch.tensor([[4.0, 5.0], [6.0, 7.0]]))
        net.reference_proj.bias.zero_()
        net.reference_proj.weight[0, 0] = 1.0  # channel 0, pixel (0, 0) of each patch <- s_a[..., 0]
        s_a[0, cfg.n_text + 3, 0] = 2.0  # visual token 3 = patch (1, 1)
        m = net.reference_map(s_a)
        assert m[0, 0, 2, 2] == 2.0 and int(torch.count_nonzero(m)) == 1
    # from a decoder without it: the same outputs at init (new input channels zero), then the map matters
    old = tiny_net(seed=1)
    net.init_from(old)
    batch = tiny_batch(cfg)
    s_a = old.action_encoder(batch.f_md, batch.f_v)
    t = torch.tensor([200, 700])
    with torch.no_grad():
        torch.testing.assert_close(net(batch.latents, t, s_a, batch.motion_level),
                                   old(batch.latents, t, s_a, batch.motion_level))
        torch.nn.init.normal_(net.transformer.patch_embed.proj.weight)
        s_b = s_a.clone()
        s_b[:, cfg.n_text:] += 1.0  # other visual tokens, same text tokens
        assert (net(batch.latents, t, s_a, batch.motion_level)
                - net(batch.latents, t, s_b, batch.motion_level)).abs().max() > 1e-3
    with pytest.raises(ValueError, match="patch grid"):
        decoder_preset("tiny", reference_channels=3, n_visual=5)


def test_spatial_reference_round_trips_and_trains(tmp_path):
    torch.manual_seed(0)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()
    dec = ShotDecoder(tiny_net(reference_channels=2), ae, DiffusionConfig(), SamplerConfig(steps=2, guidance=2.0))
    dec.save_pretrained(tmp_path / "d")
    back = ShotDecoder.from_pretrained(tmp_path / "d")
    assert back.config.reference_channels == 2
    for k, v in dec.net.state_dict().items():
        assert torch.equal(v, back.net.state_dict()[k]), k
    den = Denoiser(tiny_net(reference_channels=2), DiffusionConfig(cond_dropout=0.0)).train()
    batch = tiny_batch(den.net.config, b=4)
    t, noise = torch.tensor([100, 300, 600, 900]), torch.randn(batch.latents.shape, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.Adam(den.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = den(batch, timesteps=t, noise=noise)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0] and den.net.reference_proj.weight.grad.abs().sum() > 0


def test_a_decoder_saved_with_the_retired_frame_difference_weight_loads_and_a_nonzero_one_is_refused():
    saved = DiffusionConfig(shared_noise=0.5).to_dict() | {"frame_diff_loss": 0.0}  # every shipped decoder's json
    assert DiffusionConfig.from_dict(saved) == DiffusionConfig(shared_noise=0.5)
    with pytest.raises(ValueError, match="frame_diff_loss"):  # a decoder trained with it is not what this code draws
        DiffusionConfig.from_dict(saved | {"frame_diff_loss": 2.0})
