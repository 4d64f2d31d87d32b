"""Per-shot motion control (decoder/motion_control.py): a shot that reads another level than asked is
decoded again at a corrected motion scale; one that reads its level is left alone."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from animegamer.decoder import motion_control
from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.motion_control import band_distance, control_motion, target_flow
from animegamer.decoder.network import DecoderNet, decoder_preset
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig, frame_mean
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
from animegamer.world.flow import MotionQuantizer, flow_magnitude

torch.set_num_threads(1)
QUANT = MotionQuantizer((0.05, 0.2, 0.4, 0.7))


def test_targets_sit_inside_each_levels_band():
    t = QUANT.thresholds
    for level in range(1, 6):
        flow = target_flow(level, t)
        assert QUANT.level(flow) == level
        assert band_distance(flow, level, t) == 0.0
    assert band_distance(0.1, 4, t) == pytest.approx(np.log(0.4 / 0.1))  # below the band: log distance
    assert band_distance(1.4, 3, t) == pytest.approx(np.log(1.4 / 0.4))  # above it


def _fake_shots(monkeypatch: pytest.MonkeyPatch) -> tuple[callable, list[float]]:
    """A decode whose frames carry, as their value, the latents' frame-to-frame spread: the fake flow
    of a shot is exactly that spread, so the controller's arithmetic can be checked exactly."""
    calls: list[float] = []

    def spread(latents: torch.Tensor) -> float:
        return float((latents - frame_mean(latents)).abs().mean())

    def decode(latents: torch.Tensor) -> np.ndarray:
        calls.append(spread(latents))
        return np.full((1, 3, 2, 2, 3), spread(latents), dtype=np.float64)

    monkeypatch.setattr(motion_control, "flow_magnitude", lambda frames: float(frames.flat[0]))
    return decode, calls


def test_a_shot_that_reads_its_level_is_not_decoded_again(monkeypatch):
    decode, calls = _fake_shots(monkeypatch)
    x = torch.randn(1, 3, 2, 2, 2)
    x = frame_mean(x) + (x - frame_mean(x)) * (0.3 / (x - frame_mean(x)).abs().mean())  # spread 0.3: level 3
    frames = np.concatenate([decode(x)])
    calls.clear()
    out = control_motion(x, frames, torch.tensor([3]), torch.tensor([1.0]), 3.0, decode, quantizer=QUANT)
    assert calls == [] and np.array_equal(out, frames)


def test_a_shot_too_calm_or_too_lively_is_moved_into_its_band(monkeypatch):
    decode, calls = _fake_shots(monkeypatch)
    x = torch.randn(2, 3, 2, 2, 2)
    spread = (x - frame_mean(x)).abs().mean(dim=(1, 2, 3, 4), keepdim=True)
    x = frame_mean(x) + (x - frame_mean(x)) * (torch.tensor([0.3, 0.3]).reshape(2, 1, 1, 1, 1) / spread)
    frames = np.concatenate([decode(x[i:i + 1]) for i in range(2)])  # both read level 3
    calls.clear()
    out = control_motion(x, frames, torch.tensor([5, 2]), torch.tensor([1.0, 1.0]), 3.0, decode, quantizer=QUANT)
    assert QUANT.level(out[0].flat[0]) == 5 and QUANT.level(out[1].flat[0]) == 2
    assert len(calls) == 2  # one correction each: the fake flow is exactly proportional to the scale
    assert out[1].flat[0] == pytest.approx(target_flow(2, QUANT.thresholds), rel=1e-4)


def test_the_total_scale_never_passes_the_bound_and_the_nearest_try_is_kept(monkeypatch):
    decode, calls = _fake_shots(monkeypatch)
    x = torch.randn(1, 3, 2, 2, 2)
    x = frame_mean(x) + (x - frame_mean(x)) * (0.1 / (x - frame_mean(x)).abs().mean())  # level 2, asked 5
    frames = decode(x)
    calls.clear()
    # drawn at scale 1.5, bounded at 2: at most 2 / 1.5 more, once (a second try would change nothing)
    out = control_motion(x, frames, torch.tensor([5]), torch.tensor([1.5]), 2.0, decode, quantizer=QUANT)
    assert calls == [pytest.approx(0.1 * 2 / 1.5, rel=1e-4)]
    assert out[0].flat[0] == pytest.approx(0.1 * 2 / 1.5, rel=1e-4)  # nearer the band than before, kept
    # a still shot cannot be made to move: nothing is tried
    still = frame_mean(x).expand_as(x).clone()
    still_frames = decode(still)
    calls.clear()
    control_motion(still, still_frames, torch.tensor([4]), torch.tensor([1.0]), 3.0, decode, quantizer=QUANT)
    assert calls == []


def test_the_decoder_controls_its_shots_when_its_sampler_says_so_and_stores_the_setting(tmp_path):
    torch.manual_seed(0)
    ae = ShotAutoencoder(autoencoder_config("tiny")).eval()
    dec = ShotDecoder(DecoderNet(decoder_preset("tiny")), ae, DiffusionConfig(), SamplerConfig(steps=2, guidance=1.0))
    s_a = torch.randn(dec.config.n_tokens, dec.config.d_cond, generator=torch.Generator().manual_seed(1))
    plain = dec(s_a, 1, torch.Generator().manual_seed(2))
    dec.sampler = dataclasses.replace(dec.sampler, motion_control_max_scale=2.0)
    controlled = dec(s_a, 1, torch.Generator().manual_seed(2))
    again = dec(s_a, 1, torch.Generator().manual_seed(2))
    assert np.array_equal(controlled, again)  # deterministic
    quant = motion_control.world_quantizer()
    # the tiny decoder's random shot reads far above level 1: the control damps it toward the band
    assert quant.level(flow_magnitude(plain)) > 1
    assert flow_magnitude(controlled) < flow_magnitude(plain)
    dec.save_pretrained(tmp_path / "dec")
    loaded = ShotDecoder.from_pretrained(tmp_path / "dec")
    assert loaded.sampler.motion_control_max_scale == 2.0
    assert np.array_equal(loaded(s_a, 1, torch.Generator().manual_seed(2)), controlled)
    with pytest.raises(ValueError, match="motion_control_max_scale must be in"):
        SamplerConfig(motion_control_max_scale=0.0)
