"""The evaluation's video action classifier (`animegamer train action`): a tiny training run on a
tiny world, exact reload, deterministic predictions, and the evaluator picking it up."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset

    root = tmp_path_factory.mktemp("world")
    render_dataset(RenderConfig(sessions=20, turns=2, height=48, width=64, frames=9, workers=1), root, progress=False)
    return WorldDataset(root)


def test_train_action_classifier_end_to_end(world, tmp_path):
    from animegamer.models.action_classifier import ACTION_DIR, ActionClassifier
    from animegamer.training import fit_action_classifier as phase
    from animegamer.training.loop import read_log
    from animegamer.world.dataset import ShotDataset

    parser = argparse.ArgumentParser()
    phase.add_arguments(parser)
    out = tmp_path / "run"
    args = parser.parse_args(["--preset", "tiny", "--data", str(world.root), "--out", str(out), "--no-progress"])
    assert phase.run(args) == 0
    log = read_log(out)
    assert log[-1]["step"] == 6 and all(np.isfinite(r["loss"]) for r in log)
    metrics = json.loads((out / "final" / "metrics.json").read_text())["eval"]
    held = len(world.split_rows("val")) + len(world.split_rows("test"))
    assert metrics["heldout_shots"] == held and 0 <= metrics["accuracy"] <= 1
    assert set(metrics["per_verb"]) <= set(phase.world_verbs())
    # every verb of the catalogue is a class, the shipped format is fp16 and reloads to the same answers
    found = ActionClassifier.find(out)
    assert found == out / "final" / ACTION_DIR
    clf = ActionClassifier.load(found)
    assert clf.labels == phase.world_verbs() and clf.size == (48, 64)
    shot = ShotDataset(world.root, "val")[0]["frames"].numpy()
    again = ActionClassifier.load(found)
    assert torch.equal(clf.logits(shot), again.logits(shot)) and clf.predict(shot) in clf.labels
    bigger = np.repeat(np.repeat(shot, 2, axis=1), 2, axis=2)  # other sizes are resized to the trained size
    assert clf.logits(bigger).shape == (len(clf.labels),)
    from safetensors import safe_open

    with safe_open(found / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys() if f.get_tensor(k).is_floating_point()} == {torch.float16}


def test_evaluator_finds_the_action_classifier(world, tmp_path):
    from animegamer.models.action_classifier import ACTION_DIR, build_classifier, classifier_config
    from animegamer.evaluation.evaluator import Evaluator
    from animegamer.models.vision_tower import VisionTower, vision_tower_config
    from animegamer.training.fit_action_classifier import world_verbs

    VisionTower(vision_tower_config("tiny")).save_pretrained(tmp_path / "ev" / "vision_tower")
    assert Evaluator.load(tmp_path / "ev").actions is None  # none beside the tower: no action column
    model = build_classifier("tiny", world_verbs(), 48, 64)
    model.save_pretrained(tmp_path / "elsewhere" / ACTION_DIR)
    ev = Evaluator.load(tmp_path / "ev", actions=tmp_path / "elsewhere")
    assert ev.actions is not None and ev.info()["action_classifier"]["weights_blake2b"] == ev.actions.weights_hash
    model.save_pretrained(tmp_path / "ev" / ACTION_DIR)
    assert Evaluator.load(tmp_path / "ev").actions is not None
    # the shipped layout: the tower's files and action_classifier/ in one directory
    VisionTower(vision_tower_config("tiny")).save_pretrained(tmp_path / "flat")
    model.save_pretrained(tmp_path / "flat" / ACTION_DIR)
    assert Evaluator.load(tmp_path / "flat").actions is not None
    with pytest.raises(FileNotFoundError, match="no action classifier"):
        Evaluator.load(tmp_path / "ev", actions=tmp_path / "missing")
    with pytest.raises(ValueError, match="multiple of the patch size"):
        classifier_config("videomae-tiny", world_verbs(), 48, 72)
    with pytest.raises(ValueError, match="preset must be one of"):
        classifier_config("huge", world_verbs(), 48, 64)


@pytest.mark.parametrize("preset", ["tiny", "videomae-tiny"])
def test_both_kinds_grade_a_shot_and_reload(world, tmp_path, preset):
    """The stacked ResNet (the default) and the VideoMAE (the classifier shipped before) load by their
    config's model type and grade a shot of any length and size."""
    from animegamer.models.action_classifier import ACTION_DIR, ActionClassifier, build_classifier
    from animegamer.training.fit_action_classifier import world_verbs
    from animegamer.world.dataset import ShotDataset

    torch.manual_seed(0)
    build_classifier(preset, world_verbs(), 48, 64).save_pretrained(tmp_path / ACTION_DIR)
    clf = ActionClassifier.load(ActionClassifier.find(tmp_path))
    shot = ShotDataset(world.root, "val")[0]["frames"].numpy()  # 9 frames
    assert clf.logits(shot).shape == (len(world_verbs()),) and clf.predict(shot[:5]) in clf.labels
    assert torch.equal(clf.logits(shot), ActionClassifier.load(tmp_path / ACTION_DIR).logits(shot))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="this config.json says 'bert'"):
        ActionClassifier.load(tmp_path / "other")
