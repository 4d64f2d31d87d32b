"""Source detail (decoder/source_detail.py): a shot drawn from a real picture starts from it and carries its
detail along the decoded flow; the bank keeps its pictures; the game draws and reopens with them."""
from __future__ import annotations

import argparse
import dataclasses

import cv2
import numpy as np
import pytest
import torch
from tiny_game import tiny_models

from animegamer.decoder.anchors import AnchorConfig, VisualAnchors, decode_frame, encode_frame
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import add_sampler_arguments, sampler_overrides
from animegamer.decoder.source_detail import transfer_detail, transfer_details
from animegamer.engine.model import save_engine
from animegamer.game.session import Game

torch.set_num_threads(1)
CAST = ["Qiqi", "Mika", "Ren"]
H, W = 64, 96


def textured(seed: int = 0) -> np.ndarray:
    """A picture with fine detail: flat colour fields with a checker of 2-pixel squares on a block."""
    rng = np.random.default_rng(seed)
    img = np.full((H, W, 3), 90, np.uint8)
    img[:, : W // 2] = (200, 120, 60)
    img[16:40, 30:54] = np.where(((np.indices((24, 24)).sum(0) // 2) % 2)[..., None], 250, 20).astype(np.uint8)
    img[44:56, 10:20] = rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)
    return img


def blur(img: np.ndarray) -> np.ndarray:
    return cv2.GaussianBlur(img, (7, 7), 2.0)


def shifted(img: np.ndarray, dx: int) -> np.ndarray:
    return np.roll(img, dx, axis=1)


def test_a_still_shot_becomes_its_source_picture():
    source = textured()
    frames = np.stack([blur(source)] * 5)  # what a decoder that lost the detail draws of a still shot
    out = transfer_detail(frames, source)
    assert np.array_equal(out[0], source)  # the shot starts from the picture itself
    assert np.abs(out[1:].astype(int) - source).mean() < 1.0  # and every frame keeps its detail
    assert np.abs(frames.astype(int) - source).mean() > 5.0  # which the decoded frames had lost


def test_the_detail_follows_the_decoded_motion():
    source = textured(1)
    truth = np.stack([shifted(source, 2 * k) for k in range(5)])  # the picture moving right, 2 px a frame
    frames = np.stack([blur(f) for f in truth])  # what the decoder draws of it: the motion, not the detail
    out = transfer_detail(frames, source)
    inner = (slice(8, H - 8), slice(12, W - 12))  # away from the wrapped border
    for k in range(1, 5):
        err_out = np.abs(out[k][inner].astype(int) - truth[k][inner]).mean()
        err_dec = np.abs(frames[k][inner].astype(int) - truth[k][inner]).mean()
        assert err_out < 0.5 * err_dec, (k, err_out, err_dec)


def test_what_the_first_frame_does_not_hold_keeps_the_decoded_pixels():
    source = textured(2)
    later = blur(source).copy()
    later[20:36, 60:80] = (10, 200, 10)  # new content the flow cannot explain from frame 0
    frames = np.stack([blur(source), later])
    out = transfer_detail(frames, source)
    block = (slice(24, 32), slice(64, 76))
    assert np.abs(out[1][block].astype(int) - later[block]).mean() < 3.0
    with pytest.raises(ValueError, match="uint8"):
        transfer_detail(frames.astype(np.float32), source)
    with pytest.raises(ValueError, match="source picture"):
        transfer_detail(frames, source[:10])
    with pytest.raises(ValueError, match="2 source pictures for 1"):
        transfer_details(frames[None], [source, None])
    assert np.array_equal(transfer_details(frames[None], [None])[0], frames)  # no picture: untouched


def test_the_decoder_starts_from_the_source_only_when_asked():
    _, dec = tiny_models()
    h, w = dec.frame_size
    s_a = torch.randn(dec.config.n_tokens, dec.config.d_cond, generator=torch.Generator().manual_seed(1))
    source = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    dec.sampler = dataclasses.replace(dec.sampler, motion_control_max_scale=2.0)  # re-decodes keep their picture
    plain = dec(s_a, 3, generator=torch.Generator().manual_seed(2))
    ignored = dec(s_a, 3, generator=torch.Generator().manual_seed(2), source=source)  # the flag is off
    assert np.array_equal(plain, ignored)
    dec.sampler = dataclasses.replace(dec.sampler, source_detail=True)
    drawn = dec(s_a, 3, generator=torch.Generator().manual_seed(2), source=source)
    assert np.array_equal(drawn[0], source) and drawn.shape == plain.shape
    assert np.array_equal(dec(s_a, 3, generator=torch.Generator().manual_seed(2)), plain)  # no picture: the decoder's
    batch = dec(torch.stack([s_a, s_a]), 3, generator=torch.Generator().manual_seed(2), source=[None, source])
    assert np.array_equal(batch[1][0], source) and not np.array_equal(batch[0][0], source)
    with pytest.raises(ValueError, match="source picture must be uint8"):
        dec(s_a, 3, generator=torch.Generator().manual_seed(2), source=source[:1])


def test_the_option_on_the_command_line():
    p = argparse.ArgumentParser()
    add_sampler_arguments(p)
    assert sampler_overrides(p.parse_args(["--source-detail", "on"])) == {"source_detail": True}
    assert sampler_overrides(p.parse_args(["--source-detail", "off"])) == {"source_detail": False}
    with pytest.raises(ValueError, match="--source-detail must be 'on' or 'off'"):
        sampler_overrides(p.parse_args(["--source-detail", "yes"]))


def picture_bank(dec: ShotDecoder, config: AnchorConfig | None = None) -> VisualAnchors:
    """A bank of random pictures of the decoder's size, each with the tokens its reference makes of it."""
    keys = [["Qiqi"], ["Mika"], ["Mika", "Qiqi"], ["Ren"]]
    h, w = dec.frame_size
    rng = np.random.default_rng(5)
    pictures = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in keys]
    ref = dec.latent_reference()
    f_v = torch.stack([ref.patch_tokens(torch.from_numpy(p).permute(2, 0, 1).float().div(127.5).sub(1)[None])[0]
                       for p in pictures])
    entries = [{"characters": k, "place": "town", "time": "day", "shot": f"s{i}"} for i, k in enumerate(keys)]
    return VisualAnchors(f_v, entries, ref._grid(h, w), config, [encode_frame(p) for p in pictures])


def test_the_bank_keeps_its_pictures(tmp_path):
    _, dec = tiny_models()
    dec.anchors = picture_bank(dec)
    picture = dec.anchors.frame(1)
    assert np.array_equal(decode_frame(encode_frame(picture)), picture)  # lossless
    dec.save_pretrained(tmp_path / "dec")
    back = ShotDecoder.from_pretrained(tmp_path / "dec").anchors
    assert all(np.array_equal(back.frame(i), dec.anchors.frame(i)) for i in range(len(back)))
    tokens = back.tokens(list(range(len(back))), dec.net.action_encoder.visual)
    assert back.entry_of(tokens[2].half(), dec.net.action_encoder) == 2  # read back from a saved turn (fp16)
    assert back.entry_of(tokens[2] + 1.0, dec.net.action_encoder) is None  # other tokens: not the bank's
    plain = VisualAnchors(dec.anchors.f_v, dec.anchors.entries, dec.anchors.grid)  # a bank of tokens only
    assert plain.frame(0) is None
    with pytest.raises(ValueError, match="3 frames for 4 entries"):
        VisualAnchors(dec.anchors.f_v, dec.anchors.entries, dec.anchors.grid, None, dec.anchors.frames[:3])


def test_the_game_draws_from_the_bank_pictures_and_reopens_alike(tmp_path):
    engine, dec = tiny_models()
    dec.anchors = picture_bank(dec, AnchorConfig(gate=1e6))  # every later turn with the same cast continues
    dec.sampler = dataclasses.replace(dec.sampler, source_detail=True)
    save_engine(engine, tmp_path / "model" / "engine")
    dec.save_pretrained(tmp_path / "model" / "shot_decoder")
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST)
    s = game.new_session(["Qiqi", "Mika"], seed=4)
    mika = game.decoder.anchors.frame(1)  # the bank's only picture of Mika alone
    t1 = s.step("Mika runs to the beach")
    assert np.array_equal(t1.frames[0], mika)  # the shot starts from the bank's picture, not the autoencoder's
    t2 = s.step("Mika waves")
    assert (t1.anchor, t2.anchor) == ("retrieved", "continued")
    assert np.array_equal(t2.frames[0], mika)  # a continued scene starts from the same picture again
    game.engine.reset_cache()
    reopened = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=CAST).open_session(s.id)
    u3 = reopened.step("Mika sits down")
    game.engine.reset_cache()
    replay = game.new_session(["Qiqi", "Mika"], seed=4)
    for t in (t1, t2):
        replay.step(t.instruction)
    t3 = replay.step("Mika sits down")
    assert u3.anchor == t3.anchor == "continued" and np.array_equal(u3.frames, t3.frames)
    assert np.array_equal(u3.frames[0], mika)
