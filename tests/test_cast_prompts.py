"""`eval-cast`: characters asked together in a place, played and read by the frame classifier it is given."""
import json

import pytest

from animegamer.cli import main
from animegamer.evaluation.cast_prompts import TRUTH
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.models.frame_classifier import FrameClassifier


def test_eval_cast_reads_with_the_evaluator_it_is_given(tmp_path):
    out = tmp_path / "cast.json"
    assert main(["eval-cast", "--n", "2", "--size", "2", "--seed", "0", "--no-progress", "--out", str(out),
                 "--evaluator", str(DEFAULT_EVALUATOR)]) == 0
    report = json.loads(out.read_text())
    frames_dir = FrameClassifier.find(DEFAULT_EVALUATOR)
    assert report["frame_classifier"]["weights_blake2b"] == FrameClassifier.weights_hash(frames_dir)
    for name in ("with stage", "without stage", TRUTH):  # the world's own shots of the prompts: the reference
        assert len(report["turns"][name]) == 2
        assert all(0 <= report["systems"][name][c]["mean"] <= 1 for c in ("characters", "place", "time", "all"))


def test_eval_cast_refuses_a_folder_without_a_frame_classifier(tmp_path):
    with pytest.raises(SystemExit, match="no frame classifier"):
        main(["eval-cast", "--n", "2", "--evaluator", str(tmp_path)])
