"""Every training phase's shipped `default` preset runs from the command line (one step on a small world
at the model's 96 x 144): the sizes the recipe trains at build and save. The engine's default loads the
real SmolLM2 (tests/test_engine.py, ANIMEGAMER_SLOW=1)."""
from __future__ import annotations

import pytest
import torch

from animegamer.cli import main
from animegamer.world.dataset import RenderConfig, render_dataset

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("default_presets")
    render_dataset(RenderConfig(sessions=20, turns=2, seed=5, workers=1), root / "world", progress=False)
    return root


def _train(root, phase: str, *extra: str) -> None:
    assert main(["train", phase, "--preset", "default", "--data", str(root / "world"), "--out", str(root / phase),
                 "--steps", "1", "--batch-size", "2", "--no-progress", *extra]) == 0
    assert (root / phase / ("joint" if phase == "decoder" else "") / "final").is_dir()


@pytest.mark.parametrize("phase,extra", [
    ("vae", ()), ("clip", ("--eval-shots", "4")), ("frames", ()), ("action", ()),
])
def test_default_preset_trains_a_step(world, phase, extra):
    _train(world, phase, *extra)


def test_default_decoder_trains_a_step(world):
    if not (world / "vae" / "final").is_dir():
        _train(world, "vae")
    _train(world, "decoder", "--vae", str(world / "vae"), "--limit", "8", "--samples", "0", "--eval-shots", "2")
