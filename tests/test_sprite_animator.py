"""The sprite animator and its layers: the world's sprite tracks (its training data), pasting sprites into a
place, the network's start as a copy, learning a pose change, the run on disk, and `train sprites` on a world."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.numpy import save as save_np

from animegamer.cli import main as cli_main
from animegamer.decoder.layered import (
    apart,
    frame_reach,
    ink_span,
    step_aside,
    EDGE,
    FOLLOW,
    LayeredScene,
    acts_as_pair,
    afresh,
    draw_turn,
    follow,
    framed,
    scene_frame,
    start_scene,
    tracks_as_played,
)
from animegamer.decoder.layers import cutout_canvas, layered_shot, paste
from animegamer.decoder.unet_blocks import warp
from animegamer.decoder.sprite_animator import (
    FrameCue,
    SpriteAnimator,
    load_into,
    SpriteAnimatorConfig,
    SpriteAnimatorNet,
    affine_error,
    body_affines,
    frame_change,
    sprite_animator_preset,
    to_unit,
    true_affine,
)
from animegamer.decoder.pipeline import SPRITES_DIR, ShotDecoder
from animegamer.decoder.stage import PlaceView, Sprite, Stage
from animegamer.engine.model import save_engine
from animegamer.core.runs import resolve_decoder
from animegamer.evaluation.drawn_shots import SYSTEMS, evaluate, load_animator
from animegamer.training.action_parts import SHIPPED
from animegamer.game.pack import pack_model
from animegamer.game.session import Game
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset
from animegamer.world.sessions import plan_session
from animegamer.world.pose import Pose
from animegamer.world.sprite_tracks import (
    FEET_ROW,
    SPRITE_H,
    SPRITE_W,
    draw_sprite,
    other_adverb,
    pair_gap_px,
    row_tracks,
    session_lengths,
    turn_tracks,
    verb_marks,
)
from animegamer.world.stage_art import STANDING_FRACTION, character_sprite
from animegamer.world.cast import load_cast
from animegamer.training.phase_sprites import SpriteShots, SpriteTensors, init_state, sprite_tensors
from tiny_game import continuing_anchors, forbid_world_renderer, tiny_models

torch.set_num_threads(1)


def _turn(verb_wanted: set[str], seed: int = 3):
    for index in range(40):
        for turn in plan_session(seed, index, 5, "train").turns:
            if turn.action.verb in verb_wanted:
                return index, turn
    raise AssertionError(f"no {verb_wanted} in 40 sessions")


def test_a_walk_is_drawn_alone_facing_right_with_its_stride_apart():
    index, turn = _turn({"walk", "run"})
    (track,) = turn_tracks(turn, load_cast(), 9, 8, 0.0)
    assert track.rgba.shape == (9, SPRITE_H, SPRITE_W, 4) and track.role == 0
    colour, alpha = track.rgba[..., :3].astype(int), track.rgba[..., 3:4].astype(int)
    assert (colour <= alpha + 1).all()  # premultiplied: no colour where nothing is drawn
    assert alpha[0, FEET_ROW - 20: FEET_ROW, SPRITE_W // 2 - 4: SPRITE_W // 2 + 4].mean() > 128  # feet at the anchor
    assert np.allclose(track.offset[0], 0) and track.offset[-1, 0] > 3  # travels right, kept out of the canvas
    assert not np.array_equal(track.rgba[1], track.rgba[3])  # the legs move
    assert track.standing[..., 3].max() == 255


def test_the_body_matrices_carry_a_standing_sprite_to_lying_down():
    """The world's body matrix of each frame (where the body is drawn) moves the standing picture onto a lying
    pose almost exactly: what the animator's body warp learns to do."""
    index, turn = _turn({"lie_down", "sleep"})
    (track,) = turn_tracks(turn, load_cast(), 17, 8, 0.0)
    source = torch.from_numpy(track.standing_body)[None]
    target = torch.from_numpy(track.body[-1])[None]
    affine = true_affine(source, target)
    standing = to_unit(torch.from_numpy(track.standing))[None]
    lying = to_unit(torch.from_numpy(track.rgba[-1]))[None]
    moved = warp(standing, torch.zeros(1, 2, SPRITE_H, SPRITE_W), affine=affine)
    assert (moved - lying).abs().mean() < 0.3 * (standing - lying).abs().mean()
    assert abs(float(affine[0, 0, 0])) < 0.3  # a quarter turn: x is taken from y
    identity = true_affine(source, source)
    torch.testing.assert_close(identity, torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]]), atol=1e-4, rtol=0)
    still, _ = body_affines(torch.zeros(1, 12), SPRITE_H, SPRITE_W, 16.0)
    torch.testing.assert_close(still, identity, atol=1e-4, rtol=0)
    coverage = lying[:, 3]
    assert float(affine_error(still, still, coverage)) == 0.0
    assert float(affine_error(affine, still, coverage)) > 5  # lying down moves the body's pixels far


def test_in_training_the_body_moves_along_the_worlds_affine_and_the_head_learns_it_apart():
    """``true_body``: the input is moved along the given (the world's) affine, not the head's own, and the head's
    error against it is a loss of its own."""
    torch.manual_seed(0)
    model = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny"))).eval()
    cfg = model.config
    first = to_unit(_batch(cfg)["rgba"][:1, 0])
    shift = torch.tensor([[[1.0, 0.0, -3.0], [0.0, 1.0, 0.0]]])  # the body 3 px to the right
    cue = FrameCue(torch.zeros(1, 3, cfg.cond_dim), torch.tensor([3]), torch.tensor([2]), torch.tensor([0]), torch.zeros(1))
    with torch.no_grad():
        own, _, affines = model.frame(first, first, cue)
        moved, _, _ = model.frame(first, first, cue, body=(shift, shift))
    torch.testing.assert_close(affines[0], true_affine(torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]]),
                                                       torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]])), atol=1e-5, rtol=0)
    assert (own - first).abs().mean() < 0.01  # an untrained head: no move
    expected = torch.roll(first, 3, dims=-1)
    assert (moved - expected).abs().mean() < 0.3 * (first - expected).abs().mean()
    batch = _batch(cfg)
    batch["body"] = batch["body"].clone()
    batch["body"][:, 1:, 0, 2] += 3.0  # the world moved the body 3 px right after frame 0
    loss, logs = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny", standing_share=0.0,
                                                                         went_on_share=0.0)))(batch)
    assert logs["body_px"] > 2.5  # an untrained head stands still: ~3 px off on every drawn pixel


def test_a_verbs_marks_are_found_apart_and_weigh_in_the_loss():
    """``verb_marks``: a sleeper's zzz and an eater's food are where the picture differs from the same pose drawn
    without them; a walker has none. With ``mark_weight`` an error on those pixels costs more."""
    cast = load_cast()
    (sleep,) = turn_tracks(_turn({"sleep"})[1], cast, 5, 8, 0.0)
    (walk,) = turn_tracks(_turn({"walk"})[1], cast, 5, 8, 0.0)
    assert sleep.marks.shape == (5, SPRITE_H, SPRITE_W) and sleep.marks.dtype == np.uint8
    assert (sleep.marks > 64).sum(axis=(1, 2)).min() > 20 and not walk.marks.any()
    marked = sleep.marks[2] > 64
    assert (sleep.rgba[2][marked, 3] > 0).mean() > 0.9  # drawn pixels of the picture, not background
    (eat,) = turn_tracks(_turn({"eat"})[1], cast, 17, 8, 0.0)
    assert (eat.marks > 64).any(axis=(1, 2)).sum() > 8  # the food in the hand, in most frames
    assert not verb_marks(cast[sleep.name], None, Pose(), sleep.rgba[0]).any()  # a bare pose: nothing to find
    torch.manual_seed(0)
    cfg = sprite_animator_preset("tiny", standing_share=0.0, went_on_share=0.0, aug_max=0.0)
    batch = _batch(cfg)
    marks = torch.zeros(batch["rgba"].shape[:4], dtype=torch.uint8)
    marks[:, 1:, :4, -4:] = 255  # a mark in the corner the untrained network does not draw
    batch["rgba"][:, 1:, :4, -4:] = 255
    batch["marks"] = marks
    losses = []
    for weight in (0.0, 16.0):
        torch.manual_seed(1)
        model = SpriteAnimator(SpriteAnimatorNet(dataclasses.replace(cfg, mark_weight=weight)))
        losses.append(model(batch)[1]["picture"])
    assert losses[1] > 1.5 * losses[0]


def test_from_standing_the_target_is_the_shot_drawn_from_phase_zero(tmp_path):
    """``canonical_start``: tracks whose input does not show the shot's phase (standing, another shot's last frame)
    are graded against the same shot drawn from phase 0; tracks from their own first frame against their own."""
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=3, turns=2, seed=5, workers=1), world, progress=False)
    rows = WorldDataset(world).rows
    sprites = sprite_tensors(rows, 17, workers=1, progress=False, canonical=True)
    assert sprites.canonical["rgba"].shape == sprites.rgba.shape
    phases = [(int(r["session"]) * 7 + int(r["turn"])) % 10 for r in rows]
    moved = [i for i, shot in enumerate(sprites.shot.tolist()) if phases[shot] and rows[shot]["motion"] != "fall"]
    assert moved and any(not torch.equal(sprites.canonical["rgba"][i], sprites.rgba[i]) for i in moved)
    item = SpriteShots(sprites, torch.zeros(len(rows), 2, 8), torch.full((len(rows),), 2))[0]
    assert torch.equal(item["canonical_rgba"], sprites.canonical["rgba"][0])
    cfg = sprite_animator_preset("tiny", canonical_start=True)
    batch = _batch(cfg, 3)
    batch |= {f"canonical_{k}": batch[k] + 1 for k in ("rgba", "offset", "body")}
    unseen = torch.tensor([True, False, True])
    got = SpriteAnimator(SpriteAnimatorNet(cfg)).targets(batch, unseen)
    for key in ("rgba", "offset", "body"):
        assert torch.equal(got[key][unseen], batch[f"canonical_{key}"][unseen])
        assert torch.equal(got[key][~unseen], batch[key][~unseen])
    off = sprite_animator_preset("tiny", canonical_start=False)
    own = SpriteAnimator(SpriteAnimatorNet(off)).targets(batch, unseen)
    assert torch.equal(own["rgba"], batch["rgba"])  # off: every track against its own shot


def test_a_level_swap_trains_a_track_in_another_adverbs_manner_at_its_level_with_the_shots_s_a(tmp_path):
    """``level_swap_share``: some items are the shot played in another adverb's manner (from phase 0, the turn's
    own stamina), asked at the level those tracks read and with the shot's own s_a; a wilder manner moves more."""
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=3, turns=2, seed=5, workers=1), world, progress=False)
    rows = WorldDataset(world).rows
    lengths = session_lengths(rows)
    row = next(r for r in rows if r["motion"] not in ("sleep", "sit", "lie_down", "fall"))
    assert other_adverb(row) != row["adverb"] and other_adverb(row) == other_adverb(dict(row))
    n = lengths[(row["seed"], row["session"])]
    slow, wild = (row_tracks(row, n, 17, phase=0.0, adverb=a)[0] for a in ("slowly", "wildly"))
    moved = [np.abs(np.diff(t.rgba.astype(np.int16), axis=0)).mean() + np.abs(np.diff(t.offset, axis=0)).sum()
             for t in (slow, wild)]
    assert moved[1] > moved[0]
    sprites = sprite_tensors(rows, 17, workers=1, progress=False, canonical=True, other=True)
    assert sprites.other["rgba"].shape == sprites.rgba.shape
    assert any(not torch.equal(sprites.other["rgba"][i], sprites.canonical["rgba"][i]) for i in range(len(sprites.role)))
    s_a = torch.arange(len(rows) * 16, dtype=torch.float32).reshape(len(rows), 2, 8)
    levels, other_levels = torch.full((len(rows),), 2), torch.full((len(rows),), 5)
    apart = next(i for i, shot in enumerate(sprites.shot.tolist()) if shot != int(sprites.shot[0]))
    other_levels[int(sprites.shot[apart])] = 0  # unreadable: never swapped
    swapped = SpriteShots(sprites, s_a, levels, 0, other_levels, swap_share=1.0)
    item = swapped[0]
    shot = int(sprites.shot[0])
    assert int(item["motion_level"]) == 5 and torch.equal(item["s_a"], s_a[shot])
    for key in ("rgba", "offset", "body", "marks"):
        assert torch.equal(item[key], sprites.other[key][0]) and torch.equal(item[f"canonical_{key}"], item[key])
    kept = swapped[apart]
    assert int(kept["motion_level"]) == 2 and torch.equal(kept["rgba"], sprites.rgba[apart])
    assert int(SpriteShots(sprites, s_a, levels, 0, other_levels, swap_share=0.0)[0]["motion_level"]) == 2
    # another manner that reads the shot's own level is never swapped in: one input, one manner to draw
    same = SpriteShots(sprites, s_a, levels, 0, torch.full((len(rows),), 2), swap_share=1.0)[0]
    assert int(same["motion_level"]) == 2 and torch.equal(same["rgba"], sprites.rgba[0])
    with pytest.raises(ValueError, match="another manner"):
        SpriteShots(dataclasses.replace(sprites, other=None), s_a, levels, 0, other_levels, swap_share=0.5)


def test_a_pair_gives_two_tracks_and_a_rendered_row_is_replanned(tmp_path):
    index, turn = _turn({"hug", "talk_with", "play_with", "chase"})
    tracks = turn_tracks(turn, load_cast(), 5, 8, 0.0)
    assert [t.role for t in tracks] == [1, 2]
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=2, turns=2, seed=5, workers=1), world, progress=False)
    rows = WorldDataset(world).rows
    lengths = session_lengths(rows)
    for row in rows:
        got = row_tracks(row, lengths[(row["seed"], row["session"])], 17)
        assert len(got) == len(row["characters"]) and [t.name for t in got] == row["characters"]
    with pytest.raises(ValueError, match="re-planned"):
        row_tracks({**rows[0], "motion": "swim" if rows[0]["motion"] != "swim" else "walk"}, 2, 17)


def test_paste_blends_premultiplied_sprites_in_the_light_and_cuts_at_the_edges():
    frame = np.full((20, 30, 3), 100.0, np.float32)
    sprite = np.zeros((SPRITE_H, SPRITE_W, 4), np.float32)
    sprite[FEET_ROW - 4: FEET_ROW, SPRITE_W // 2, :] = [0.5, 0.5, 0.5, 1.0]  # an opaque grey post
    sprite[FEET_ROW - 4: FEET_ROW, SPRITE_W // 2 + 1, :] = [0.25, 0.25, 0.25, 0.5]  # half covered
    paste(frame, sprite, 10, 12, None)
    assert np.allclose(frame[8:12, 10], 127.5) and np.allclose(frame[8:12, 11], 0.25 * 255 + 50)
    assert np.allclose(frame[:8], 100) and np.allclose(frame[12:], 100)  # nothing else touched
    lit = np.full((20, 30, 3), 100.0, np.float32)
    paste(lit, sprite, 10, 12, ([0.5, 0.5, 0.5], [10.0, 10.0, 10.0]))
    assert np.allclose(lit[8:12, 10], 127.5 * 0.5 + 10)
    edge = np.full((20, 30, 3), 100.0, np.float32)
    paste(edge, sprite, 29.6, 3, None)  # mostly outside: what is inside is drawn, no error
    paste(edge, sprite, -200, -200, None)
    view = PlaceView(np.full((20, 30, 3), 100, np.uint8), np.zeros((20, 30, 4), np.uint8), 0.6, None)
    shot = layered_shot(view, [np.repeat(sprite[None], 3, 0)], [np.array([[5, 12], [10, 12], [15, 12]])])
    assert shot.shape == (3, 20, 30, 3) and shot[1, 10, 10, 0] == 128 and shot[1, 10, 5, 0] == 100


def test_a_stage_cutout_stands_on_the_canvas_feet():
    rgba = np.zeros((40, 20, 4), np.uint8)
    rgba[..., 3] = 255
    rgba[..., 0] = 200
    canvas = cutout_canvas(Sprite(rgba, 1.0), 30)
    ys, xs = np.nonzero(canvas[..., 3] > 128)
    assert ys.max() == FEET_ROW and ys.min() == FEET_ROW - 29 and abs(xs.mean() - SPRITE_W / 2) < 1.5
    assert canvas[ys[0], xs[0], 0] == 200 and canvas[ys[0], xs[0], 1] == 0
    spec = load_cast()["Kaito"]  # the world's standing character and the stage's cut-out of it agree on the canvas
    world = draw_sprite(spec, None, Pose(head_turn=-0.15))
    stage = cutout_canvas(Sprite(*character_sprite(spec)), STANDING_FRACTION * 96)
    for a in (world, stage):
        ys, xs = np.nonzero(a[..., 3] > 128)
        assert abs(ys.max() - FEET_ROW) <= 1 and abs(xs.mean() - SPRITE_W / 2) < 1.5
    assert abs(int((world[..., 3] > 128).sum()) - int((stage[..., 3] > 128).sum())) < 0.1 * (world[..., 3] > 128).sum()


def test_config_names_the_wrong_field():
    with pytest.raises(ValueError, match="multiples of"):
        SpriteAnimatorConfig(height=50)
    with pytest.raises(ValueError, match="unknown fields"):
        SpriteAnimatorConfig.from_dict({"frames": 17, "flw_scale": 2})


def _batch(cfg: SpriteAnimatorConfig, n: int = 2) -> dict[str, torch.Tensor]:
    """A square that rises one pixel a frame while its feet travel right 2 px a frame."""
    rgba = np.zeros((n, cfg.frames, cfg.height, cfg.width, 4), np.uint8)
    for t in range(cfg.frames):
        rgba[:, t, 8 - t // 2: 12 - t // 2, 6:10] = [200, 100, 50, 255]
    offset = np.zeros((n, cfg.frames, 2), np.float32)
    offset[:, :, 0] = 2 * np.arange(cfg.frames)
    return {"rgba": torch.from_numpy(rgba), "standing": torch.from_numpy(rgba[:, 0].copy()),
            "offset": torch.from_numpy(offset), "role": torch.zeros(n, dtype=torch.long),
            "s_a": torch.zeros(n, 3, cfg.cond_dim), "motion_level": torch.full((n,), 3),
            "donor_first": torch.from_numpy(rgba[:, 0].copy()), "donor_s_a": torch.zeros(n, 3, cfg.cond_dim),
            "donor_level": torch.full((n,), 3), "donor_role": torch.zeros(n, dtype=torch.long),
            "body": _still_body(n, cfg.frames), "standing_body": _still_body(n, 1)[:, 0],
            "donor_last_body": _still_body(n, 1)[:, 0]}


def _still_body(n: int, frames: int) -> torch.Tensor:
    """Body matrices of a body that does not move (the square's whole-body move is none)."""
    return torch.tensor([[8.0, 0.0, 8.0], [0.0, -8.0, 12.0]]).expand(n, frames, 2, 3).clone()


def test_a_scene_that_goes_on_is_trained_from_the_networks_own_drawing_of_a_donor_of_the_same_look(monkeypatch):
    cfg = sprite_animator_preset("tiny", standing_share=0.0, went_on_share=1.0, aug_max=0.0)
    model = SpriteAnimator(SpriteAnimatorNet(cfg))
    batch = _batch(cfg)
    batch["donor_first"] = torch.full_like(batch["donor_first"], 77)
    seen = []
    real = model.frame

    def frame(sprite, *args, **kwargs):
        seen.append(sprite.detach().clone())
        return real(sprite, *args, **kwargs)

    monkeypatch.setattr(model, "frame", frame)
    model(batch)
    assert len(seen) == 2  # the donor's last frame (no gradient), then the graded frames from it
    torch.testing.assert_close(seen[0], torch.full_like(seen[0], 77 / 255))
    cue = FrameCue(batch["donor_s_a"], batch["donor_level"], torch.full((2,), cfg.frames - 1), batch["donor_role"],
                   torch.zeros(2))
    drawn = real(seen[0], to_unit(batch["standing"]), cue)[0]
    torch.testing.assert_close(seen[1], drawn.repeat_interleave(cfg.frames_per_track, dim=0))
    with pytest.raises(ValueError, match="summing to <= 1"):
        sprite_animator_preset("tiny", standing_share=0.8, went_on_share=0.3)

    standing = torch.zeros(5, 4, 4, 4, dtype=torch.uint8)
    standing[3:] = 9  # tracks 0-2 one look, 3-4 another
    rgba = torch.arange(5, dtype=torch.uint8)[:, None, None, None, None].expand(5, 3, 4, 4, 4).clone()
    sprites = SpriteTensors(rgba, standing, torch.zeros(5, 3, 2), torch.zeros(5, dtype=torch.long), torch.arange(5),
                            0, _still_body(5, 3), _still_body(5, 1)[:, 0], torch.zeros(5, 3, 4, 4, dtype=torch.uint8))
    shots = SpriteShots(sprites, torch.zeros(5, 2, 8), torch.full((5,), 2))
    for i, look in enumerate([{0, 1, 2}] * 3 + [{3, 4}] * 2):
        donors = {int(shots[i]["donor_first"][0, 0, 0]) for _ in range(20)}  # a track's pictures hold its index
        assert set(map(int, shots.group_of[i])) == look and donors <= look


def test_an_untrained_animator_nearly_copies_its_input():
    torch.manual_seed(0)
    model = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny"))).eval()
    cfg = model.config
    first = to_unit(_batch(cfg)["rgba"][:, 0])
    frames, feet = model.draw(first, first, torch.zeros(2, 3, cfg.cond_dim), torch.tensor([1, 5]),
                              torch.tensor([0, 2]))
    assert frames.shape == (2, cfg.frames - 1, 4, cfg.height, cfg.width) and feet.shape == (2, cfg.frames - 1, 2)
    assert (frames - first[:, None]).abs().max() < 0.1 and feet.abs().max() == 0
    assert (frames[:, :, :3] <= frames[:, :, 3:] + 1e-6).all()  # premultiplied


def test_it_learns_a_pose_change_and_the_feet_and_the_run_reloads(tmp_path):
    torch.manual_seed(0)
    # without the change loss: at this toy's lr 3e-3 its L1 kicks cost the picture (docs/layers.md, "Shipped")
    model = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny", aug_max=0.0, change_weight=0.0)))
    batch = _batch(model.config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first_logs, last = None, []
    for step in range(120):
        torch.manual_seed(step)
        loss, logs = model(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first_logs = first_logs or logs
        last.append(logs)
    picture = np.mean([x["picture"] for x in last[-10:]])
    assert picture < 0.5 * np.mean([x["copy"] for x in last[-10:]])  # far better than copying the input
    assert np.mean([x["feet"] for x in last[-10:]]) < 0.3 * first_logs["feet_still"]
    model.eval()
    cfg = model.config
    first = to_unit(batch["rgba"][:1, 0])
    args = (first, first, batch["s_a"][:1], torch.tensor([3]), torch.tensor([0]))
    frames, feet = model.draw(*args)
    assert abs(float(feet[0, -1, 0]) - 2 * (cfg.frames - 1)) < 2
    model.save_pretrained(tmp_path / "run")
    again = SpriteAnimator.from_pretrained(tmp_path / "run")
    assert again.config == model.config
    torch.testing.assert_close(again.draw(*args)[0], frames, atol=2e-2, rtol=0)
    with pytest.raises(FileNotFoundError, match="no sprite animator"):
        SpriteAnimator.from_pretrained(tmp_path)


def test_train_sprites_on_a_world_and_resume(tmp_path):
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=2, turns=2, seed=5, workers=1), world, progress=False)
    args = ["train", "sprites", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "run"),
            "--render-workers", "1", "--no-progress"]
    assert cli_main(args) == 0
    model = SpriteAnimator.from_pretrained(tmp_path / "run")
    assert (model.config.height, model.config.width, model.config.frames) == (SPRITE_H, SPRITE_W, 17)
    assert cli_main(args + ["--resume", "--steps", "6"]) == 0
    # eval-drawn grades it from the world's true first frames on the shipped model's stage, against its ceiling
    # (the true sprites layered) and its floor (the cut-outs held still); a checkpoint is graded with its EMA weights
    checkpoint = sorted((tmp_path / "run" / "checkpoints").glob("step_*"))[-1]
    assert cli_main(["eval-drawn", "--sprites", str(checkpoint), "--data", str(world), "--n", "2",
                     "--out", str(tmp_path / "drawn.json"), "--sheet", str(tmp_path / "drawn.png"), "--keep", "1",
                     "--no-progress"]) == 0
    report = json.loads((tmp_path / "drawn.json").read_text())
    assert report["shots"] == 2 and set(report["systems"]) == set(SYSTEMS)
    assert all(len(report["per_shot"][k]) == 2 for k in SYSTEMS)
    assert report["systems"]["still"]["new_content"]["mean"] == 0.0  # a picture held still has nothing new
    assert report["systems"]["truth"]["level"]["mean"] == 1.0  # the truth reads its own level
    assert set(report["paired_vs_still"]) == set(SYSTEMS) - {"still", "truth"}
    assert (tmp_path / "drawn.png").stat().st_size > 1000
    # every version is seen through play's camera: on the stage's wide places, the true first pose stands in the
    # same view of the place as the standing cut-outs
    shots = evaluate(load_animator(str(checkpoint)), resolve_decoder(SHIPPED), world, n=1, keep=1,
                     progress=False)["_shots"][0][1]
    assert np.abs(shots["drawn_first"][0].astype(int) - shots["still"][0].astype(int)).mean() < 8


def _stage(h: int = 40, w: int = 60) -> Stage:
    view = PlaceView(np.full((h, w, 3), 90, np.uint8), np.zeros((h, w, 4), np.uint8), 0.9, None)
    rgba = np.zeros((20, 8, 4), np.uint8)
    rgba[..., 3] = 255
    rgba[:, :4, 0] = 250  # red on its left half: a mirror shows
    return Stage({("meadow", "day"): view}, {"Qiqi": Sprite(rgba, 1.0), "Ren": Sprite(rgba.copy(), 1.1)}, 0.5)


def _animator(**overrides) -> SpriteAnimator:
    torch.manual_seed(0)
    cfg = sprite_animator_preset("tiny", height=SPRITE_H, width=SPRITE_W, frames=5, **overrides)
    return SpriteAnimator(SpriteAnimatorNet(cfg)).eval()


def test_a_scene_starts_as_the_stage_stands_it_and_survives_its_bytes():
    stage = _stage()
    scene = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=True)
    (a, b) = scene.actors
    assert (a.facing, b.facing) == (1, -1) and a.x < b.x
    red_a = np.nonzero(a.sprite[..., 0] > 100)[1].mean()
    red_b = np.nonzero(b.sprite[..., 0] > 100)[1].mean()
    assert red_a < SPRITE_W / 2 < red_b  # the right-hand one turned towards the other
    again = LayeredScene.from_bytes(scene.to_bytes())
    assert again.names() == ["Qiqi", "Ren"] and (again.place, again.time) == ("meadow", "day")
    assert all(np.array_equal(x.sprite, y.sprite) and x.x == y.x and x.facing == y.facing
               for x, y in zip(again.actors, scene.actors))
    with pytest.raises(ValueError, match="not a layered scene"):
        LayeredScene.from_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")


def test_a_turn_draws_who_acts_holds_the_others_and_goes_on_from_its_last_frame():
    stage = _stage()
    animator = _animator()
    for name, p in animator.net.named_parameters():  # a live network: a move and a change to see
        if "conv_out" in name or "conv2" in name or "offset" in name:
            torch.nn.init.normal_(p, std=0.05)
    scene = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=True)
    s_a = torch.zeros(3, animator.config.cond_dim)
    refs = {n: cutout_canvas(stage.sprites[n], stage.standing * 40) for n in ("Qiqi", "Ren")}
    frames, after = draw_turn(animator, stage, scene, ["Qiqi"], s_a, 3, refs, verb="dance")
    assert frames.shape == (5, 40, 60, 3)
    assert not np.array_equal(frames[-1], frames[0])
    assert after.names() == ["Ren", "Qiqi"]  # who acted is pasted over who held still, and stays so
    ren0, ren1 = scene.actors[1], after.actors[0]
    # Ren did not act: the same pose (at a new shot he may step clear of her, step_aside's test)
    assert np.array_equal(ren0.sprite, ren1.sprite) and ren1.verb is None
    assert not np.array_equal(after.actors[1].sprite, scene.actors[0].sprite)  # Qiqi keeps her last drawn pose
    assert after.actors[1].verb == "dance" and EDGE * 60 <= after.actors[1].x <= (1 - EDGE) * 60
    frames2, _ = draw_turn(animator, stage, after, ["Qiqi"], s_a, 3, refs, verb="dance")
    np.testing.assert_allclose(frames2[0].astype(int), frames[-1].astype(int), atol=1)  # she dances on from it


def test_who_starts_a_verb_is_drawn_from_the_cut_out_and_who_goes_on_from_the_pose_it_holds(monkeypatch):
    """A verb of the world starts in its pose (the world's films hold no move from one verb's pose into another's):
    who starts one (the stage stood them, or they did another verb) is drawn from the reference cut-out with frame 0
    drawn; who goes on with the same verb, from the sprite it holds, frame 0 the frame the player saw."""
    stage = _stage()
    animator = _animator(first_frame=True)
    calls: list[tuple[np.ndarray, int]] = []
    draw = animator.draw

    def record(*args, **kwargs):
        calls.append((args[0][0].permute(1, 2, 0).numpy(), kwargs.get("start", 1)))
        return draw(*args, **kwargs)

    monkeypatch.setattr(animator, "draw", record)
    scene = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=False)
    s_a = torch.zeros(3, animator.config.cond_dim)
    refs = {n: cutout_canvas(stage.sprites[n], stage.standing * 40) for n in ("Qiqi", "Ren")}
    unit = lambda x: x.astype(np.float32) / 255  # noqa: E731
    assert afresh(scene, ["Qiqi"], "sit") and afresh(scene, ["Qiqi"], None)  # the stage stood her
    _, sat = draw_turn(animator, stage, scene, ["Qiqi"], s_a, 3, refs, verb="sit")
    assert np.allclose(calls[-1][0], unit(refs["Qiqi"])) and calls[-1][1] == 0  # afresh: the cut-out, frame 0 drawn
    qiqi = next(a for a in sat.actors if a.name == "Qiqi")
    assert qiqi.verb == "sit" and not afresh(sat, ["Qiqi"], "sit") and afresh(sat, ["Qiqi", "Ren"], "sit")
    frames, still_sat = draw_turn(animator, stage, sat, ["Qiqi"], s_a, 3, refs, verb="sit")
    assert np.allclose(calls[-1][0], unit(qiqi.sprite)) and calls[-1][1] == 1  # she goes on from the pose she holds
    assert np.array_equal(frames[0], scene_frame(stage, sat))
    _, waved = draw_turn(animator, stage, still_sat, ["Qiqi"], s_a, 3, refs, verb="wave")
    assert np.allclose(calls[-1][0], unit(refs["Qiqi"])) and calls[-1][1] == 0  # another verb: afresh
    _, unread = draw_turn(animator, stage, waved, ["Qiqi"], s_a, 3, refs, verb=None)  # a verb play did not read
    assert np.allclose(calls[-1][0], unit(waved.actors[1].sprite)) and calls[-1][1] == 1  # goes on from her pose
    assert unread.actors[1].verb == "" and afresh(unread, ["Qiqi"], "wave") and not afresh(unread, ["Qiqi"], None)
    ren = next(a for a in waved.actors if a.name == "Ren")
    assert ren.verb is None and np.array_equal(ren.sprite, scene.actors[1].sprite)  # who does not act holds still
    again = LayeredScene.from_bytes(waved.to_bytes())
    assert [a.verb for a in again.actors] == [a.verb for a in waved.actors] == [None, "wave"]
    tampered = LayeredScene(waved.place, waved.time, [replace(a, verb="x" * 65) for a in waved.actors], waved.camera)
    with pytest.raises(ValueError, match="verb is not a name"):
        LayeredScene.from_bytes(tampered.to_bytes())


def test_each_turn_is_framed_as_the_world_frames_a_shot():
    """Who acts in the middle of the view, within the place's ends: a character who ran to a side of the view does
    the next verb in the middle of the next shot."""
    stage = _stage(40, 60)
    view = stage.places[("meadow", "day")]
    layer = np.dstack([np.full((40, 180, 3), 90, np.uint8), np.full((40, 180), 255, np.uint8)])
    view.wide_layers, view.wide_lights, view.wide_foreground = [layer], [None], np.zeros((40, 180, 4), np.uint8)
    scene = start_scene(stage, "meadow", "day", ["Qiqi"], stage.sprites, pair=False)
    assert scene.camera == 60 and framed(stage, scene, ["Qiqi"], "run").camera == pytest.approx(60)  # staged: in the middle
    ran = replace(scene, actors=[replace(scene.actors[0], x=150.0)])
    assert framed(stage, ran, ["Qiqi"], "run").camera == pytest.approx(120)  # the place's right end: as far as it goes
    ran = replace(scene, actors=[replace(scene.actors[0], x=100.0)])
    assert framed(stage, ran, ["Qiqi"], "run").camera == pytest.approx(70)
    assert framed(stage, ran, [], "run").camera == scene.camera  # nobody acts: the camera stays


def test_an_animator_that_draws_frame_0_draws_a_scene_that_starts_in_the_verbs_pose(monkeypatch):
    """``first_frame``: trained at index 0 too; in play a scene the stage stood starts with who acts drawn at frame 0
    (not standing as the stage stood them), and a scene that goes on starts from what the player saw last."""
    torch.manual_seed(0)
    cfg = sprite_animator_preset("tiny", first_frame=True, standing_share=1.0, went_on_share=0.0)
    model = SpriteAnimator(SpriteAnimatorNet(cfg))
    seen, real = [], model.frame
    monkeypatch.setattr(model, "frame", lambda *a, **k: (seen.append(a[2].index), real(*a, **k))[1])
    model(_batch(cfg, 8))
    assert 0 in torch.cat(seen).tolist()
    with pytest.raises(ValueError, match="first_frame"):
        _animator(first_frame=False).draw(*[torch.zeros(1, 4, 16, 16)] * 2, torch.zeros(1, 3, 16), torch.tensor([3]),
                         torch.tensor([0]), start=0)
    stage = _stage()
    animator = _animator(first_frame=True)

    def draw(sprite, reference, s_a, level, role, start=1, **kw):  # a white sprite where the character stands
        t = animator.config.frames - start
        return torch.ones(1, t, 4, *sprite.shape[-2:]) * (sprite[:, None, 3:] > 0.5), torch.zeros(1, t, 2)
    monkeypatch.setattr(animator, "draw", draw)
    scene = start_scene(stage, "meadow", "day", ["Qiqi"], stage.sprites, pair=False)
    s_a = torch.zeros(3, animator.config.cond_dim)
    refs = {"Qiqi": cutout_canvas(stage.sprites["Qiqi"], stage.standing * 40)}
    starts, _ = draw_turn(animator, stage, scene, ["Qiqi"], s_a, 3, refs, verb="wave")
    waving = replace(scene, actors=[replace(scene.actors[0], verb="wave")])  # in the pose of the verb it goes on with
    goes_on, _ = draw_turn(animator, stage, waving, ["Qiqi"], s_a, 3, refs, verb="wave")
    assert np.array_equal(goes_on[0], scene_frame(stage, scene))  # frame 0: the scene as the player saw it
    assert not np.array_equal(starts[0], goes_on[0]) and np.array_equal(starts[0], starts[1])  # drawn, white
    pair = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=False)
    under = replace(pair, actors=[replace(pair.actors[0], verb="hug"), replace(pair.actors[1], x=pair.actors[0].x,
                                                                                  verb="hug")])
    refs["Ren"] = cutout_canvas(stage.sprites["Ren"], stage.standing * 40)
    _, cut = draw_turn(animator, stage, under, ["Qiqi"], s_a, 3, refs, verb="wave")  # a new shot: Ren steps aside
    assert abs(cut.actors[0].x - cut.actors[1].x) >= 8
    _, kept = draw_turn(animator, stage, replace(under, actors=[replace(under.actors[0], verb="wave"),
                                                                under.actors[1]]), ["Qiqi"], s_a, 3, refs, verb="wave")
    assert {a.name: a.x for a in kept.actors}["Ren"] == under.actors[1].x  # a shot that goes on moves no one


def test_two_who_do_a_verb_of_one_each_do_it_apart_and_a_pair_acts_as_subject_and_partner(monkeypatch):
    """"Tomo and Yuki dance": each dances alone (the role the animator learned dances in), standing apart as the
    stage spaces two; "Tomo hugs Yuki": subject and partner, face to face."""
    assert acts_as_pair(["Tomo", "Yuki"], "hug") and acts_as_pair(["Tomo", "Yuki"], "talk_with")
    assert not acts_as_pair(["Tomo", "Yuki"], "dance") and not acts_as_pair(["Tomo", "Yuki"], "lie_down")
    assert not acts_as_pair(["Tomo"], "hug") and not acts_as_pair(["Tomo", "Yuki", "Ren"], "hug")
    assert acts_as_pair(["Tomo", "Yuki"], None)  # no verb read: two are taken for a pair
    stage = _stage()
    apart = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=False)
    close = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=True)
    gap = apart.actors[1].x - apart.actors[0].x
    assert gap == pytest.approx(0.2 * stage.size[1]) and gap > close.actors[1].x - close.actors[0].x
    animator = _animator()
    seen: list[list[int]] = []
    draw = animator.draw

    def record(*args, **kwargs):
        seen.append([int(r) for r in args[4]])  # the role tensor
        return draw(*args, **kwargs)

    monkeypatch.setattr(animator, "draw", record)
    s_a = torch.zeros(3, animator.config.cond_dim)
    refs = {n: cutout_canvas(stage.sprites[n], stage.standing * 40) for n in ("Qiqi", "Ren")}
    assert [a.facing for a in apart.actors] == [1, -1]  # the stage turns the right-hand one to the other
    _, after = draw_turn(animator, stage, apart, ["Qiqi", "Ren"], s_a, 3, refs, verb="dance")
    assert sorted(sum(seen, [])) == [0, 0]
    assert [a.facing for a in after.actors] == [1, 1]  # a group goes one way, as the world draws one
    seen.clear()
    _, hugged = draw_turn(animator, stage, apart, ["Qiqi", "Ren"], s_a, 3, refs, verb="hug")
    assert sorted(sum(seen, [])) == [1, 2]
    assert sorted(a.facing for a in hugged.actors) == [-1, 1]  # a pair face to face


def test_a_game_in_layers_draws_who_acts_goes_on_from_the_last_frame_and_reopens(tmp_path, monkeypatch):
    """The animator packed beside the stage: every turn is drawn in layers, a turn that goes on starts from the
    last frame shown (after a reopen too), the scene is saved with the turn and travels in the archive; the
    world renderer is never called."""
    engine, decoder = tiny_models()
    continuing_anchors(decoder)  # every later turn continues in town
    torch.manual_seed(1)
    decoder.animator = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset(
        "tiny", frames=decoder.config.num_frames, height=SPRITE_H, width=SPRITE_W, cond_dim=decoder.config.d_cond)))
    for name, p in decoder.animator.net.named_parameters():  # a live network: a move and a change to see
        if "conv_out" in name or "conv2" in name:
            torch.nn.init.normal_(p, std=0.05)
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    assert (tmp_path / "model" / "shot_decoder" / SPRITES_DIR).is_dir()
    forbid_world_renderer(monkeypatch)
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=["Qiqi", "Mika", "Ren"])
    assert game.decoder.draws_layers
    s = game.new_session(["Qiqi", "Mika"], seed=4)
    t1 = s.step("Mika runs to the beach")
    last = t1.frames[-1].copy()
    assert not np.array_equal(t1.frames[1], t1.frames[0])  # drawn, not held
    t2 = s.step("Mika sits down")
    assert (t1.anchor, t2.anchor) == ("staged", "went on")
    np.testing.assert_allclose(t2.frames[0].astype(int), last.astype(int), atol=2)  # goes on from what was shown
    scene = LayeredScene.from_bytes(s.layers)
    # the anchors read town; the beach the first turn named is drawn, and the second, naming none, stays there
    assert scene.names() == ["Mika"] and (scene.place, scene.time) == ("beach", "day")
    last = t2.frames[-1].copy()
    again = game.open_session(s.id)
    assert again.layers == s.layers  # saved with the turn
    assert [r.layers is None for r in game.store.load_turns(s.id)] == [True, False]  # the newest scene only
    t3 = again.step("Mika waves")
    np.testing.assert_allclose(t3.frames[0].astype(int), last.astype(int), atol=2)
    archive = game.archive_session(s.id, tmp_path / "game.zip")
    restored = game.open_session(game.restore_session(archive))
    assert restored.layers == game.open_session(s.id).layers


def test_a_run_without_a_reference_starts_one_with_it_drawing_the_same(tmp_path):
    torch.manual_seed(0)
    old = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny", reference=False, reference_warp=False,
                                                                  body_warp=False)))
    for name, p in old.net.named_parameters():
        if "conv_out" in name or "conv2" in name:
            torch.nn.init.normal_(p, std=0.05)
    old.eval().save_pretrained(tmp_path / "old")
    new = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny", reference_warp=False,
                                                                  body_warp=False))).eval()
    load_into(new, init_state(str(tmp_path / "old")))
    cfg = new.config
    first = to_unit(_batch(cfg)["rgba"][:1, 0])
    ref = torch.rand_like(first)
    args = (torch.zeros(1, 3, cfg.cond_dim), torch.tensor([3]), torch.tensor([0]))
    saved = SpriteAnimator.from_pretrained(tmp_path / "old")  # its weights as stored (fp16)
    assert saved.config.reference is False and saved.config.reference_warp is False
    before = saved.draw(first, None, *args)[0]
    torch.testing.assert_close(new.draw(first, ref, *args)[0], before, atol=1e-5, rtol=0)
    # and the reference warp: gained with the input's flow and a mask nearly closed, it draws nearly as before
    warping = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny"))).eval()
    load_into(warping, init_state(str(tmp_path / "old")))
    offset, flow, mask, paint, ref_flow, ref_mask, body = warping.net(first * 2 - 1, ref * 2 - 1, *args[:2],
                                                                      torch.tensor([4]), args[2], torch.zeros(1))
    torch.testing.assert_close(ref_flow, flow)
    assert float(ref_mask.max()) == -4.0 and not body.any()  # and the body warp gained at zero: no move
    assert (warping.draw(first, ref, *args)[0] - before).abs().max() < 0.03


def test_with_its_mask_open_the_reference_warp_draws_the_reference_moved():
    model = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny"))).eval()
    cfg = model.config
    with torch.no_grad():
        model.net.conv_out.bias[(7 + 2) * cfg.stem ** 2:] = 30.0  # the reference's mask wide open, its flow zero
    first = to_unit(_batch(cfg)["rgba"][:1, 0])
    ref = torch.rand_like(first)
    ref = torch.cat([torch.minimum(ref[:, :3], ref[:, 3:]), ref[:, 3:]], dim=1)  # premultiplied
    frames, _ = model.draw(first, ref, torch.zeros(1, 3, cfg.cond_dim), torch.tensor([3]), torch.tensor([0]))
    torch.testing.assert_close(frames, ref[:, None].expand_as(frames), atol=1e-5, rtol=0)


def test_the_camera_follows_a_traveller_across_the_wide_place_and_stays_for_the_others():
    x = 100 + 6.0 * np.arange(17)  # a runner 6 px a frame to the right, in a place 432 wide seen 144 wide
    cam = follow(x, 30.0, 144, 432)  # a shot that goes on: the camera starts where it was, locked on the runner
    assert cam[0] == 30.0 and np.all(np.diff(cam) >= 0) and cam.max() <= 432 - 144
    assert np.allclose(x - cam, 70.0)  # where it stood on screen, all the way (the world's follow camera)
    fresh = follow(x, 30.0, 144, 432, fresh=True)  # a new shot: the runner starts just behind the middle
    assert np.allclose(x - fresh, 144 * (0.5 - FOLLOW))
    assert np.allclose(follow(x[::-1], 30.0, 144, 432, fresh=True)[-1], x[0] - 144 * (0.5 + FOLLOW))  # going left
    assert np.array_equal(follow(100 + 0.1 * np.arange(17), 50.0, 144, 432), np.full(17, 50.0))  # not travelling
    assert np.array_equal(follow(x, 0.0, 144, 144), np.zeros(17))  # one view wide: nowhere to go
    group = follow(x, 30.0, 144, 432, fresh=True, keep=(40.0, 170.0))  # three fliers from 40 to 170 at frame 0
    assert group[0] <= 40.0 - 2 and group[0] + 144 >= 170.0 + 2  # all in the picture, not one left behind
    assert np.isclose(follow(x, 30.0, 144, 432, fresh=True, keep=(20.0, 200.0))[0], 110.0 - 72)  # too wide: centred
    stuck = follow(400 + 6.0 * np.arange(17), 250.0, 144, 432)
    assert stuck.max() == 432 - 144  # the place ends: the camera stops, the runner goes on to its edge
    wide = np.tile(np.arange(90, dtype=np.uint8)[None, :, None], (20, 1, 4))
    wide[..., 3] = 255  # one opaque layer: a flat place that pans as a whole
    view = PlaceView(np.zeros((20, 30, 3), np.uint8), np.zeros((20, 30, 4), np.uint8), 0.9, None,
                     [wide], [None], np.zeros((20, 90, 4), np.uint8))
    shot = layered_shot(view, [], [], np.array([0.0, 10.0, 60.0]))
    assert shot.shape == (3, 20, 30, 3) and [int(f[0, 0, 0]) for f in shot] == [0, 10, 60]  # the window it shows


def test_pack_the_animator_draws_the_stage_wide_and_leaves_out_what_layers_supersede(tmp_path):
    engine, dec = tiny_models()
    continuing_anchors(dec)
    dec.anchors.frames = [np.zeros(3, np.uint8)] * len(dec.anchors.entries)  # a bank with pictures
    save_engine(engine, tmp_path / "run" / "engine")
    dec.save_pretrained(tmp_path / "run" / "shot_decoder")
    animator = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset(
        "tiny", frames=dec.config.num_frames, height=SPRITE_H, width=SPRITE_W, cond_dim=dec.config.d_cond)))
    animator.save_pretrained(tmp_path / "sprites")
    wrong = SpriteAnimator(SpriteAnimatorNet(sprite_animator_preset("tiny", height=SPRITE_H, width=SPRITE_W,
                                                                    cond_dim=8)))
    wrong.save_pretrained(tmp_path / "wrong")
    with pytest.raises(ValueError, match="s_a 8 wide"):
        pack_model(tmp_path / "run", tmp_path / "run", tmp_path / "bad", sprites=tmp_path / "wrong")
    assert not (tmp_path / "bad").exists()
    out = pack_model(tmp_path / "run", tmp_path / "run", tmp_path / "model", sprites=tmp_path / "sprites")
    dec2 = ShotDecoder.from_pretrained(out / "shot_decoder")
    assert dec2.draws_layers
    assert dec2.anchors.frames is None and len(dec2.anchors.entries) == 3  # the tokens stay: they name the scene
    assert all(len(v.wide_layers) == 4 and v.width == 3 * v.background.shape[1] for v in dec2.stage.places.values())


def test_two_who_each_lie_down_are_drawn_side_by_side_not_one_over_the_other():
    """apart: characters who each do a verb of one stand at least their widest pose apart (lying ones far, standing
    ones as the stage stood them); each keeps its own motion, the group its middle, and all stay in the place."""
    t, h, w = 5, SPRITE_H, SPRITE_W

    def sprite(half_width: int) -> np.ndarray:
        s = np.zeros((t, h, w, 4), np.float32)
        s[:, 60:70, w // 2 - half_width:w // 2 + half_width, 3] = 1.0
        return s

    lying, standing = sprite(25), sprite(5)
    xs = [np.full(t, 100.0), np.array([120.0, 121, 122, 123, 124])]
    a, b = apart(xs, [lying, lying], 10.0, 300.0)
    assert b[0] - a[0] >= 50 and np.allclose(np.diff(b), 1.0) and np.allclose(np.diff(a), 0.0)
    assert np.isclose((a[0] + b[0]) / 2, 110.0)
    assert all(np.array_equal(x, y) for x, y in zip(apart(xs, [standing, standing], 10.0, 300.0), xs))
    a, b = apart([np.full(t, 20.0), np.full(t, 30.0)], [lying, lying], 10.0, 300.0)  # by the place's left end
    assert a[0] - 25 >= 10.0 and b[0] - a[0] >= 50
    head_left = np.zeros((t, h, w, 4), np.float32)  # a body lying from its feet to the left, as a sleeper does
    head_left[:, 60:70, w // 2 - 30:w // 2, 3] = 1.0
    a, b = apart([np.full(t, 40.0), np.full(t, 60.0)], [head_left, head_left], 0.0, 100.0)  # a view 100 wide
    left, right = a[0] - 30, b[0]  # the group's ink
    assert left >= 0.0 and right <= 100.0 and b[0] - a[0] >= 30  # both in the view, side by side
    assert np.isclose((left + right) / 2, 50.0)  # the ink's middle where the feet's was
    a, b = apart([np.full(t, 40.0), np.full(t, 60.0)], [head_left, head_left], 0.0, 50.0)  # no room: centred
    assert np.isclose((a[0] - 30 + b[0]) / 2, 25.0)
    leaning = np.zeros((t, h, w, 4), np.float32)  # 10 px wide, leaning 5 px further right each frame (a jump)
    for k in range(t):
        leaning[k, 20:70, w // 2 - 5 + 5 * k:w // 2 + 5 + 5 * k, 3] = 1.0
    a, b = apart([np.full(t, 50.0), np.full(t, 51.0)], [leaning, leaning], 0.0, 300.0)
    assert np.isclose(b[0] - a[0], 10 + 2)  # apart by a frame's pose, not by the whole turn's lean (32)
    a, b = apart(xs, [standing, standing], 10.0, 300.0, least=53.0)  # as far apart as the world stands a group
    assert np.isclose(b[0] - a[0], 53.0) and np.isclose((a[0] + b[0]) / 2, 110.0) and np.allclose(b - b[0], xs[1] - 120)


def test_a_characters_ink_is_its_body_and_its_marks_not_a_smudge_at_the_canvas_edge():
    t, h, w = 2, SPRITE_H, SPRITE_W
    s = np.zeros((t, h, w, 4), np.float32)
    s[:, 40:66, w // 2 - 30:w // 2 + 15, 3] = 1.0  # a body lying from 30 px left of its feet to 15 right
    s[:, 30:34, w // 2 + 18:w // 2 + 21, 3] = 1.0  # a mark 3 px beside it (a note, a laugh line)
    s[1, 48:54, w - 6:w - 1, 3] = 0.8  # frame 1: a smudge 19 px clear of the body, by the canvas's edge
    s[1, 10:12, 0:2, 3] = 0.3  # and a faint speck
    reach = frame_reach(s)
    assert reach.tolist() == [[-30.0, 21.0], [-30.0, 21.0]]
    assert np.isnan(frame_reach(np.zeros((1, h, w, 4), np.float32))).all()


def test_who_holds_still_steps_clear_of_who_acts_at_a_new_shot():
    """step_aside: a bystander whose ink would lie under the actors' (after a hug, the one who reads next stood on
    the other) moves just clear of them, to the side it stood on, the next one beside it; one clear already, or
    with no room on either side, stays where it is. ink_span: the columns the actors cover over the turn."""
    t, h, w = 3, SPRITE_H, SPRITE_W
    body = np.zeros((t, h, w, 4), np.float32)
    body[:, 20:70, w // 2 - 10:w // 2 + 10, 3] = 1.0  # ink 10 px either side of the feet
    assert ink_span([np.array([100.0, 105, 110])], [body]) == (90.0, 120.0)
    span, reach = (90.0, 120.0), (-10.0, 10.0)
    a, b, c = step_aside(span, [98.0, 112.0, 200.0], [reach] * 3, 0.0, 400.0)
    assert a + 10 <= 90 - 2 and b - 10 >= 120 + 2 and c == 200.0  # each to its own side; the far one stays
    a, b = step_aside(span, [100.0, 101.0], [reach] * 2, 0.0, 400.0)  # both left of the middle: side by side
    assert max(a, b) + 10 <= 90 - 2 and abs(a - b) >= 20 + 2 - 1e-6
    assert step_aside(span, [100.0], [reach], 95.0, 105.0) == [100.0]  # no room in the place: it stays
    assert step_aside(span, [100.0], [(0.0, 0.0)], 0.0, 400.0) == [100.0]  # no ink: nothing to clear


def test_a_pair_starts_at_its_verbs_gap_and_play_shows_the_true_tracks_at_their_level():
    """A partner's track starts where the world's shot stands it (its verb's gap from its subject) and does not
    step there at frame 1; play stands a pair that acts there. ``tracks_as_played``: the true tracks on the
    stage as play shows them, still ones read as level 1 (the label the animator learns, phase_sprites)."""
    from animegamer.decoder.pipeline import STAGE_DIR
    from animegamer.game.session import DEFAULT_WEIGHTS
    from animegamer.world.flow import MotionQuantizer, flow_magnitude

    _, turn = _turn({"hug"})
    sub, par = turn_tracks(turn, load_cast(), 17, 8, 0.0)
    assert par.role == 2 and abs(par.offset[1, 0]) < 1.0  # no step from frame 0 to frame 1
    assert pair_gap_px("hug") < pair_gap_px("chase") and pair_gap_px(None) == pair_gap_px("dance")
    stage = Stage.from_pretrained(DEFAULT_WEIGHTS / "shot_decoder" / STAGE_DIR)
    scene = start_scene(stage, "meadow", "day", ["Qiqi", "Ren"], stage.sprites, pair=True, verb="hug")
    assert abs(scene.actors[1].x - scene.actors[0].x - pair_gap_px("hug")) < 1e-6
    shown = tracks_as_played(stage, "meadow", "day", [sub.rgba, par.rgba], [sub.offset, par.offset], "hug")
    assert shown.shape == (17, *stage.size, 3) and shown.dtype == np.uint8
    still = np.repeat(sub.rgba[:1], 17, 0)
    held = tracks_as_played(stage, "meadow", "day", [still], [np.zeros((17, 2), np.float32)], "sit")
    assert MotionQuantizer.load().level(flow_magnitude(held)) == 1
    assert not np.array_equal(shown[0], shown[-1])  # the hug moves


def test_a_still_character_whose_drawn_feet_wobble_below_a_pixel_holds_still(monkeypatch):
    # the animator draws each frame apart: a still sleeper's feet come out ~0.1-0.4 px off from frame to frame.
    # The shot is pasted at whole pixels from where the character stands, so that wobble is no move, wherever on
    # the place's pixel grid the character stands (rounded against the grid, it was a one-pixel jump each time it
    # crossed a half pixel)
    stage = _stage()
    animator = _animator()
    t = animator.config.frames
    wobble = torch.tensor([[0.0, 0.0], [0.4, -0.3], [-0.3, 0.4], [0.45, 0.2], [-0.4, -0.45]])[:t]

    def still_draw(sprite, reference, s_a, level, role, start=1, **_):
        n = t - start
        return sprite[:, None].expand(-1, n, -1, -1, -1).clone(), wobble[start:][None].clone()

    monkeypatch.setattr(animator, "draw", still_draw)
    refs = {n: cutout_canvas(stage.sprites[n], stage.standing * 40) for n in ("Qiqi", "Ren")}
    s_a = torch.zeros(3, animator.config.cond_dim)
    for x in (29.5, 30.0, 30.49, 30.5):  # on and off the grid, near a half pixel
        scene = start_scene(stage, "meadow", "day", ["Qiqi"], stage.sprites, pair=False)
        scene = replace(scene, actors=[replace(scene.actors[0], x=x, verb="sleep")])
        frames, after = draw_turn(animator, stage, scene, ["Qiqi"], s_a, 1, refs, verb="sleep")
        assert all(np.array_equal(f, frames[0]) for f in frames[1:]), x
        assert after.actors[0].x == pytest.approx(x, abs=1e-4)


def test_a_broom_flies_above_the_ground_line_from_its_first_frame():
    # the world flies a broom ~40 px up from frame 0 on; tracks that kept only the move from frame 0 taught the
    # animator a broom on the ground line, and play flew every flight on the cloud sea
    index, turn = _turn({"fly_broom"})
    (track,) = turn_tracks(turn, load_cast(), 9, 8, 0.0)
    assert track.offset[0, 0] == 0 and 25 < track.offset[0, 1] < 60 and (track.offset[:, 1] > 20).all()
    (walk,) = turn_tracks(_turn({"walk", "run"})[1], load_cast(), 9, 8, 0.0)
    assert walk.offset[0, 1] == 0  # every other verb starts on the ground


def test_a_character_keeps_its_lift_from_one_turn_to_the_next_and_in_a_saved_scene(monkeypatch):
    stage = _stage(80, 60)
    animator = _animator()
    t = animator.config.frames

    def flying(sprite, reference, s_a, level, role, start=1, **_):  # the feet 30 px up, a little higher each frame
        n = t - start
        feet = torch.stack([torch.zeros(t), 30.0 + torch.arange(t, dtype=torch.float32)], dim=1)[start:]
        return sprite[:, None].expand(-1, n, -1, -1, -1).clone(), feet[None]

    monkeypatch.setattr(animator, "draw", flying)
    refs = {n: cutout_canvas(stage.sprites[n], stage.standing * 80) for n in ("Qiqi", "Ren")}
    s_a = torch.zeros(3, animator.config.cond_dim)
    scene = start_scene(stage, "meadow", "day", ["Qiqi"], stage.sprites, pair=False)
    frames, after = draw_turn(animator, stage, scene, ["Qiqi"], s_a, 3, refs, verb="fly_broom")
    assert after.actors[0].lift == 30.0 + t - 1  # where the last frame left her
    drawn_rows = np.nonzero(np.abs(frames[0].astype(int) - 90).sum(-1).any(-1))[0]
    ground = stage.places[("meadow", "day")].ground * 80
    assert drawn_rows.max() < ground - 25  # pasted above the ground line, not on it
    again = LayeredScene.from_bytes(after.to_bytes())
    assert again.actors[0].lift == after.actors[0].lift
    np.testing.assert_array_equal(scene_frame(stage, again), frames[-1])  # the next turn starts where she flies
    goes_on, later = draw_turn(animator, stage, again, ["Qiqi"], s_a, 3, refs, verb="fly_broom")
    np.testing.assert_array_equal(goes_on[0], frames[-1])
    bad = replace(after, actors=[replace(after.actors[0], lift=1e9)]).to_bytes()
    with pytest.raises(ValueError, match="lift"):
        LayeredScene.from_bytes(bad)
    a = after.actors[0]  # a scene saved before scenes kept the lift: its characters on the ground
    meta = {"place": after.place, "time": after.time, "camera": "0.0",
            "actors": json.dumps([{"name": a.name, "x": a.x, "facing": a.facing, "verb": a.verb}])}
    old = save_np({"sprite0": np.ascontiguousarray(a.sprite)}, meta)
    assert LayeredScene.from_bytes(old).actors[0].lift == 0.0


def test_the_change_loss_draws_neighbouring_frames_and_grades_a_still_drawing_of_a_moving_track():
    torch.manual_seed(0)
    cfg = sprite_animator_preset("tiny", aug_max=0.0, standing_share=0.0, went_on_share=0.0, change_weight=1.0)
    model = SpriteAnimator(SpriteAnimatorNet(cfg))
    seen = {}
    real = model.frame

    def frame(sprite, reference, cue, *args, **kwargs):
        seen["index"] = cue.index.clone()
        return real(sprite, reference, cue, *args, **kwargs)

    model.frame = frame
    loss, logs = model(_batch(cfg))
    pairs = seen["index"].reshape(-1, 2)
    assert torch.equal(pairs[:, 1], pairs[:, 0] + 1)  # drawn in pairs of neighbours
    # the untrained animator copies its input: its drawing hardly changes where the square rises every other frame
    assert logs["change_ratio"] < 0.2 and logs["change_error"] > 0.8
    # a batch whose true frames all hold still, drawn with a flicker of 1e-4 a frame: the change is graded against
    # the floor (1e-3 a pair), not against ~0
    still = _batch(cfg)
    still["rgba"] = still["rgba"][:, :1].expand_as(still["rgba"]).clone()

    def flicker(sprite, reference, cue, *args, **kwargs):
        drawn, offset, affines = real(sprite, reference, cue, *args, **kwargs)
        return drawn + 1e-4 * cue.index.float()[:, None, None, None], offset, affines

    model.frame = flicker
    _, logs = model(still)
    assert logs["change_ratio"] == logs["change_error"] and 0.05 < logs["change_error"] < 0.2
    frames = torch.zeros(4, 1, 2, 2)
    frames[1] = 1.0  # a pair that changes by 1 everywhere, and one that holds
    torch.testing.assert_close(frame_change(frames, 2, 2), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="even frames_per_track"):
        sprite_animator_preset("tiny", change_weight=1.0, frames_per_track=3)
