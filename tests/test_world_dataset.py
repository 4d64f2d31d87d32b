"""The rendered dataset: determinism, round trip through the torch datasets, bad arguments."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from animegamer.world.dataset import (RenderConfig, SessionDataset, ShotDataset, WorldDataset, collate_shots,
                                      render_dataset)
from animegamer.world.shot import render_session


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("world")
    # 20 sessions so that every split (train / val / test) has at least one session.
    meta = render_dataset(RenderConfig(sessions=20, turns=2, seed=3, height=48, width=72, workers=1), out,
                          progress=False)
    return out, meta


def test_render_is_deterministic_for_a_seed():
    a = list(render_session(5, 1, 2, height=48, width=72))
    b = list(render_session(5, 1, 2, height=48, width=72))
    c = list(render_session(6, 1, 2, height=48, width=72))
    for x, y in zip(a, b):
        assert np.array_equal(x.frames, y.frames)
        assert x.row == y.row
    assert not all(np.array_equal(x.frames, z.frames) for x, z in zip(a, c))


def test_shot_shape_and_rows(tiny_dataset):
    out, meta = tiny_dataset
    world = WorldDataset(out)
    assert meta["turns_total"] == len(world.rows) == 40
    row = world.rows[0]
    for key in ("session", "turn", "instruction", "characters", "motion", "adverb", "place", "time", "props",
                "flow_magnitude", "motion_level", "deltas", "states_before", "states_after", "caption"):
        assert key in row, key
    frames = world.frames(row)
    assert frames.shape == (17, 48, 72, 3) and frames.dtype == np.uint8
    assert 1 <= row["motion_level"] <= 5
    # states chain from turn to turn within a session
    for s in world.sessions():
        for prev, nxt in zip(s[:-1], s[1:]):
            assert prev["states_after"] == nxt["states_before"]


def test_torch_datasets_round_trip(tiny_dataset):
    out, _ = tiny_dataset
    shots = ShotDataset(out, split=None)
    item = shots[0]
    assert np.array_equal(item["frames"].numpy(), WorldDataset(out).frames(item["row"]))
    batch = collate_shots([shots[0], shots[1]])
    assert batch.frames.shape == (2, 17, 3, 48, 72)
    assert batch.frames.min() >= -1 and batch.frames.max() <= 1
    assert batch.motion_level.dtype == torch.long
    back = ((batch.frames[0].permute(0, 2, 3, 1) + 1) * 127.5).round().to(torch.uint8)
    assert torch.equal(back, item["frames"])
    sessions = SessionDataset(out, split="train")
    assert all(len(s) == 2 for s in sessions.items)
    assert {r["split"] for r in ShotDataset(out, split="test").rows} == {"test"}


def test_refuses_to_overwrite_a_finished_dataset(tiny_dataset):
    out, _ = tiny_dataset
    with pytest.raises(FileExistsError, match="already holds"):
        render_dataset(RenderConfig(sessions=1, turns=1, height=48, width=72, workers=1), out, progress=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"sessions": 0, "turns": 1}, "sessions"),
    ({"sessions": 1, "turns": 1, "frames": 16}, "4k\\+1"),
    ({"sessions": 1, "turns": 1, "height": 50}, "height"),
])
def test_bad_config_is_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RenderConfig(**kwargs)


def test_cli_bad_arguments_give_clear_errors(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "animegamer", *a], capture_output=True, text=True)
    r = run("world", "render", "--sessions", "0", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--sessions must be >= 1" in r.stderr
    r = run("world", "render", "--sessions", "1", "--frames", "16", "--out", str(tmp_path / "y"))
    assert r.returncode == 2 and "4k+1" in r.stderr and "Traceback" not in r.stderr
    r = run("world", "preview", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "p.png"))
    assert r.returncode == 2 and "not a finished world dataset" in r.stderr


def test_catalog_json():
    r = subprocess.run([sys.executable, "-m", "animegamer", "world", "catalog", "--json"], capture_output=True,
                       text=True, check=True)
    cat = json.loads(r.stdout)
    assert len(cat["cast"]) >= 8 and len(cat["places"]) >= 8
    assert len(cat["motions"]) >= 16 and len(cat["interactions"]) >= 3
