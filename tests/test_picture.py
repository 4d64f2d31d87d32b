"""The picture instrument: the frame classifier (who, where, when), sharpness and the Frechet distance."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from animegamer.evaluation.picture import frechet_distance, picture_summary, read_picture, sharpness
from animegamer.models.frame_classifier import PRESETS as BACKBONES
from animegamer.models.frame_classifier import FrameClassifier
from animegamer.training.fit_frame_classifier import FramesModule, PRESETS, build_module, gaussian_blur, world_labels
from animegamer.world.dataset import collate_shots
from animegamer.world.instructions import Action
from animegamer.world.shot import render_action

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def shot():
    return render_action(Action(("Qiqi",), "run", "quickly", "town", "day"), seed=0, height=48, width=72, n_frames=5)


def test_sharpness_falls_with_blur_and_is_zero_for_flat_frames(shot):
    import cv2

    blurred = np.stack([cv2.GaussianBlur(f, (0, 0), 2.0) for f in shot])
    assert sharpness(shot) > 2 * sharpness(blurred) > 0
    assert sharpness(np.full((3, 16, 16, 3), 128, np.uint8)) == 0.0


def test_frechet_distance_matches_the_closed_form():
    rng = np.random.default_rng(0)
    a = rng.normal(0.0, 1.0, (4000, 2))
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    # N(0, 1) vs N(3, 2^2) per dimension: 3^2 + (1 - 2)^2 = 10 per dimension
    b = rng.normal(3.0, 2.0, (4000, 2))
    assert frechet_distance(a, b) == pytest.approx(20.0, rel=0.1)
    with pytest.raises(ValueError, match="at least 2"):
        frechet_distance(a[:1], b)


def test_gaussian_blur_keeps_sigma_zero_images_and_softens_the_others():
    x = torch.zeros(2, 3, 9, 9)
    x[:, :, 4, 4] = 1.0
    y = gaussian_blur(x, torch.tensor([0.0, 1.0]))
    assert torch.equal(y[0], x[0])
    assert y[1, 0, 4, 4] < 0.5 and y[1].sum() == pytest.approx(3.0, rel=1e-4)  # mass kept, spread out


def test_classifier_reads_a_shot_and_round_trips_exactly(shot, tmp_path):
    torch.manual_seed(0)
    clf = FrameClassifier(BACKBONES["tiny"], *world_labels(), (48, 64)).eval()
    seen = clf.read_shot(shot, 2)
    assert len(seen["characters"]) == 2 and set(seen["characters"]) <= set(clf.characters)
    assert seen["place"] in clf.places and seen["time"] in clf.times and seen["features"].shape == (5, clf.feature_size)
    clf.save_pretrained(tmp_path / "fc")
    loaded = FrameClassifier.from_pretrained(tmp_path / "fc")
    assert FrameClassifier.find(tmp_path) is None and FrameClassifier.find(tmp_path / "fc") == tmp_path / "fc"
    assert torch.equal(loaded.read_shot(shot, 2)["features"], seen["features"])
    meta = json.loads((tmp_path / "fc" / "frame_classifier.json").read_text())
    meta["format_version"] = 99
    (tmp_path / "fc" / "frame_classifier.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="expected animegamer-frame-classifier v1"):
        FrameClassifier.from_pretrained(tmp_path / "fc")


def test_read_picture_grades_against_the_turn(shot):
    torch.manual_seed(0)
    clf = FrameClassifier(BACKBONES["tiny"], *world_labels(), (48, 64)).eval()
    row = {"characters": ["Qiqi"], "place": "town", "time": "day"}
    m = read_picture(clf, shot, shot, row)
    assert {m["char_id"], m["place_id"], m["time_id"]} <= {0.0, 1.0} and m["sharp"] == m["sharp_true"] > 0
    summary = picture_summary([m, m])
    assert summary["sharpness"] == pytest.approx(1.0) and summary["fd"] == pytest.approx(0.0, abs=1e-3)
    assert picture_summary([{"char_id": None}])["fd"] is None


def test_frames_module_learns_a_fixed_batch():
    """The three losses fall on a fixed batch of two shots (tiny backbone, a few steps)."""
    shots = [render_action(Action(("Qiqi",), "walk", "slowly", "town", "day"), seed=1, height=48, width=72, n_frames=5),
             render_action(Action(("Mika",), "sit", "calmly", "beach", "night"), seed=2, height=48, width=72,
                           n_frames=5)]
    rows = [{"motion_text": "x", "caption": "x", "motion_level": 1, "characters": list(c), "place": p, "motion": v,
             "time": t} for c, p, v, t in ((("Qiqi",), "town", "walk", "day"), (("Mika",), "beach", "sit", "night"))]
    batch = collate_shots([{"frames": torch.from_numpy(s), "row": r} for s, r in zip(shots, rows)])
    assert batch.characters == [["Qiqi"], ["Mika"]] and batch.time == ["day", "night"]
    torch.manual_seed(0)
    module = build_module("tiny", 48, 72)
    assert isinstance(module, FramesModule) and module.model.size == (48, 72)
    opt = torch.optim.Adam(module.parameters(), lr=3e-3)
    module.eval()  # no augmentation: the same frames every step
    first = None
    for _ in range(15):
        loss, logs = module(batch)
        first = first if first is not None else float(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < 0.7 * first and {"character_acc", "place_acc", "time_acc"} <= set(logs)
    assert PRESETS["default"].train.steps > PRESETS["tiny"].train.steps


def test_train_frames_cli_end_to_end(tmp_path, capsys):
    from animegamer.cli import main
    from animegamer.world.dataset import RenderConfig, render_dataset

    world = tmp_path / "world"
    # the evaluator's data: some verbs of one done by two side by side
    render_dataset(RenderConfig(sessions=20, turns=1, height=48, width=72, workers=1, groups=0.5), world,
                   progress=False)
    out = tmp_path / "frames"
    assert main(["train", "frames", "--preset", "tiny", "--data", str(world), "--out", str(out), "--no-progress"]) == 0
    m = json.loads((out / "final" / "metrics.json").read_text())["eval"]
    assert m["heldout_shots"] > 0 and all(0 <= m[k] <= 1 for k in ("character", "place", "time"))
    assert sum(c["shots"] for c in m["character_by_cast"].values()) == m["heldout_shots"]
    assert FrameClassifier.find(out) == out / "final" / "frame_classifier"

    # --init fine-tunes a classifier: it starts from its weights, and one of other classes is refused
    first = FrameClassifier.from_pretrained(FrameClassifier.find(out))
    again = tmp_path / "again"
    assert main(["train", "frames", "--preset", "tiny", "--data", str(world), "--out", str(again), "--no-progress",
                 "--init", str(FrameClassifier.find(out)), "--steps", "1", "--lr", "1e-12", "--warmup-steps", "0"]) == 0
    tuned = FrameClassifier.from_pretrained(FrameClassifier.find(again))
    tuned_params = dict(tuned.named_parameters())  # the parameters (a step moves BatchNorm's running statistics)
    for k, v in first.named_parameters():
        assert torch.allclose(v.float(), tuned_params[k].float(), rtol=2e-3, atol=1e-3), k
    other = FrameClassifier(first.backbone_config, first.characters[:-1], first.places, first.times, first.size)
    other.save_pretrained(tmp_path / "other")
    capsys.readouterr()
    assert main(["train", "frames", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "bad"),
                 "--no-progress", "--init", str(tmp_path / "other")]) == 2
    assert "its classes, size or backbone are not this run's" in capsys.readouterr().err
