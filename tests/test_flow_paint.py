"""FlowPaint, the decoder that draws frames as the first frame moved along a drawn per-pixel flow plus a painted
change: the warp, shapes and determinism, learning a motion, the run on disk, training on a world and grading."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from animegamer.cli import main as cli_main
from animegamer.decoder.flow_paint import FlowPaint, FlowPaintConfig, FlowPaintNet, flow_paint_preset, warp
from animegamer.decoder.pipeline import FLOWPAINT_DIR, ShotDecoder
from animegamer.engine.model import save_engine
from animegamer.game.session import Game
from animegamer.game.store import frames_of
from animegamer.world.dataset import RenderConfig, render_dataset
from tiny_game import continuing_anchors, tiny_models

torch.set_num_threads(1)


def tiny(**overrides) -> FlowPaint:
    torch.manual_seed(0)
    return FlowPaint(FlowPaintNet(flow_paint_preset("tiny", **overrides)))


def test_warp_moves_a_picture_by_its_flow_and_keeps_edges():
    pic = torch.arange(2 * 3 * 6 * 8, dtype=torch.float32).reshape(2, 3, 6, 8)
    torch.testing.assert_close(warp(pic, torch.zeros(2, 2, 6, 8)), pic)
    flow = torch.zeros(2, 2, 6, 8)
    flow[:, 0] = 1.0  # each pixel comes from one to its right
    moved = warp(pic, flow)
    torch.testing.assert_close(moved[..., :-1], pic[..., 1:])
    torch.testing.assert_close(moved[..., -1], pic[..., -1])  # past the edge: the edge


def test_config_names_the_wrong_field():
    with pytest.raises(ValueError, match="multiples of"):
        FlowPaintConfig(height=50)
    with pytest.raises(ValueError, match="unknown fields"):
        FlowPaintConfig.from_dict({"frames": 17, "flw_scale": 2})


def test_an_untrained_net_holds_the_first_frame_and_draws_deterministically():
    model = tiny().eval()
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    first = torch.rand(2, 3, cfg.height, cfg.width, generator=g) * 2 - 1
    s_a, level = torch.randn(2, 6, cfg.cond_dim, generator=g), torch.tensor([1, 5])
    seed = lambda n: torch.Generator().manual_seed(n)  # noqa: E731
    out = model.draw(first, s_a, level, seed(0))
    assert out.shape == (2, cfg.frames - 1, 3, cfg.height, cfg.width)
    torch.testing.assert_close(out, first[:, None].expand_as(out), atol=1e-5, rtol=0)  # zero output layer: held
    for name, p in model.net.named_parameters():  # zero-initialised layers made live, as training makes them
        if "conv_out" in name or "conv2" in name or "camera" in name:
            torch.nn.init.normal_(p, std=0.1)
    a, b = model.draw(first, s_a, level, seed(0)), model.draw(first, s_a, level, seed(0))
    torch.testing.assert_close(a, b)  # a seed gives one shot
    assert not torch.allclose(model.draw(first, s_a, level, seed(1)), a)  # another seed, another motion
    assert not torch.allclose(model.draw(first, s_a, torch.tensor([5, 1]), seed(0)), a)  # the level reaches it


def test_it_learns_a_motion_and_the_run_reloads(tmp_path):
    """A square that moves one pixel right each frame: the drawn flow learns it and the frames follow."""
    model = tiny(frames_per_shot=4, aug_max=0.0)
    cfg = model.config
    frames = np.zeros((2, cfg.frames, cfg.height, cfg.width, 3), np.uint8)
    flows = np.zeros((2, cfg.frames - 1, cfg.height, cfg.width, 2), np.float16)
    for t in range(cfg.frames):
        frames[:, t, 5:10, 3 + t:8 + t] = 255
        if t:
            flows[:, t - 1, :, :, 0] = -t  # each pixel of frame t was t pixels to the left in frame 0
    batch = {"frames": torch.from_numpy(frames), "flows": torch.from_numpy(flows),
             "s_a": torch.zeros(2, 6, cfg.cond_dim), "motion_level": torch.tensor([3, 3])}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(80):
        torch.manual_seed(step)
        loss, logs = model(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(logs["flow"])
    assert np.mean(losses[-8:]) < 0.3 * np.mean(losses[:8])
    model.eval()
    first = batch["frames"][:1, 0].permute(0, 3, 1, 2).float() / 127.5 - 1
    drawn = model.draw(first, batch["s_a"][:1], torch.tensor([3]), torch.Generator().manual_seed(0), mode="bilinear")
    true = batch["frames"][0, 1:].permute(0, 3, 1, 2).float() / 127.5 - 1
    held = first.expand_as(true)
    assert (drawn[0] - true).abs().mean() < 0.5 * (held - true).abs().mean()  # closer than holding the first
    model.save_pretrained(tmp_path / "run")
    again = FlowPaint.from_pretrained(tmp_path / "run")
    assert again.config == model.config
    torch.testing.assert_close(again.draw(first, batch["s_a"][:1], torch.tensor([3]), torch.Generator().manual_seed(0)),
                               model.draw(first, batch["s_a"][:1], torch.tensor([3]), torch.Generator().manual_seed(0)),
                               atol=2e-2, rtol=0)
    with pytest.raises(FileNotFoundError, match="no FlowPaint"):
        FlowPaint.from_pretrained(tmp_path)


def test_train_flowpaint_on_a_world_then_grade_it(tmp_path):
    """`train flowpaint` on a rendered world (flows computed, s_a from the shipped E_a), resumable; eval-drawn grades it."""
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=2, turns=3, seed=5, workers=1), world, progress=False)
    args = ["train", "flowpaint", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "run"),
            "--no-progress"]
    assert cli_main(args) == 0
    assert FlowPaint.from_pretrained(tmp_path / "run").config.height == 96
    assert cli_main(args + ["--resume", "--steps", "6"]) == 0
    report = tmp_path / "drawn.json"
    assert cli_main(["eval-drawn", "--flowpaint", str(tmp_path / "run"), "--data", str(world), "--n", "2",
                     "--no-shipped", "--out", str(report)]) == 0
    systems = json.loads(report.read_text())["systems"]
    assert set(systems) == {"truth", "flowpaint"} and 0 <= systems["flowpaint"]["new_content"]["mean"] <= 1


def test_a_game_with_flowpaint_goes_on_from_the_last_frame_shown(tmp_path):
    """FlowPaint packed in a decoder: saved in flowpaint/, reopened, every later frame is its output, and a scene
    that goes on starts from the last frame the player saw."""
    engine, decoder = tiny_models()
    continuing_anchors(decoder)  # every later turn continues
    h, w = decoder.frame_size
    torch.manual_seed(1)
    decoder.framenet = FlowPaint(FlowPaintNet(flow_paint_preset(
        "tiny", frames=decoder.config.num_frames, height=h, width=w, cond_dim=decoder.config.d_cond)))
    torch.nn.init.normal_(decoder.framenet.net.conv_out.weight, std=0.05)  # a motion and a change to see
    save_engine(engine, tmp_path / "model" / "engine")
    decoder.save_pretrained(tmp_path / "model" / "shot_decoder")
    assert (tmp_path / "model" / "shot_decoder" / FLOWPAINT_DIR).is_dir()
    again = ShotDecoder.from_pretrained(tmp_path / "model" / "shot_decoder")
    assert again.draws_frames and isinstance(again.framenet, FlowPaint)
    game = Game.load(tmp_path / "model", store=tmp_path / "saves", cast=["Qiqi", "Mika", "Ren"])
    s = game.new_session(["Qiqi", "Mika"], seed=4)
    t1 = s.step("Mika runs to the beach")
    t2 = s.step("Mika sits down")
    assert (t1.anchor, t2.anchor) == ("retrieved", "continued")
    shown = frames_of(t1.video_path)
    assert np.array_equal(t2.frames[0], shown[-1])
    assert not np.array_equal(t2.frames[1], t2.frames[0])
