"""On a CUDA GPU (skipped where torch sees none): the shipped model plays there, in fp32 and bf16, and
draws the turns the CPU draws; a game played there reopens and goes on on the CPU; a phase trains there
through the command line; the shipped FSDP launch config trains and resumes a phase on one GPU.

Set ANIMEGAMER_CUDA_REPORT=FILE.json to keep the measured CPU / GPU differences (docs/SCALING.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, T5Config, T5EncoderModel

from animegamer.cli import main
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.game.session import Game
from animegamer.models.text_encoder import minilm_path
from animegamer.world.dataset import RenderConfig, render_dataset

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

ROOT = Path(__file__).resolve().parents[1]
# f_v from the autoencoder's first-frame latent: the tiny decoder then needs no vision-tower run
LATENT_REFERENCE = ("--set", "visual_reference=latent", "--set", "reference_patch=4")
SCRIPT = ("Qiqi walks slowly through the town square",
          "Qiqi suddenly sprints as fast as she can toward the forest",
          "Qiqi sits down and eats an apple")


def _report(key: str, value: object) -> None:
    path = os.environ.get("ANIMEGAMER_CUDA_REPORT")
    if not path:
        return
    p = Path(path)
    data = json.loads(p.read_text()) if p.is_file() else {}
    data[key] = value
    p.write_text(json.dumps(data, indent=1))


def _play(game: Game) -> list:
    session = game.new_session(["Qiqi"], seed=3)
    return [session.step(text) for text in SCRIPT]


def test_the_shipped_model_plays_on_the_gpu_as_on_the_cpu(tmp_path):
    cpu = _play(Game.load(store=tmp_path / "cpu"))
    rows = {}
    for precision in ("fp32", "bf16"):
        game = Game.load(store=tmp_path / precision, device="cuda", precision=precision)
        assert next(game.engine.parameters()).device.type == "cuda"
        assert next(game.decoder.parameters()).device.type == "cuda"
        gpu = _play(game)
        diff = [float(np.abs(a.frames.astype(np.float32) - b.frames.astype(np.float32)).mean())
                for a, b in zip(cpu, gpu)]
        rows[precision] = {
            "levels_cpu": [t.motion_level for t in cpu], "levels_gpu": [t.motion_level for t in gpu],
            "states_equal": [a.states == b.states for a, b in zip(cpu, gpu)],
            "s_a_max_abs_diff": [float((a.s_a - b.s_a).abs().max()) for a, b in zip(cpu, gpu)],
            "frames_mean_abs_diff_of_255": diff,
        }
        _report(f"play_{precision}", rows[precision])
        for t in gpu:
            assert t.frames.shape == cpu[0].frames.shape and t.frames.dtype == np.uint8
            assert 1 <= t.motion_level <= 5
    # fp32 on the GPU is the CPU's arithmetic up to summation order: the same levels and states, and
    # (the noise comes from a CPU generator) the same shots but for rounding
    fp32 = rows["fp32"]
    assert fp32["levels_gpu"] == fp32["levels_cpu"] and all(fp32["states_equal"])
    assert max(fp32["s_a_max_abs_diff"]) < 1e-2
    assert max(fp32["frames_mean_abs_diff_of_255"]) < 4.0
    # bf16 autocast rounds more, so only the game's decisions are held to the CPU's
    assert sum(a == b for a, b in zip(rows["bf16"]["levels_gpu"], rows["bf16"]["levels_cpu"])) >= 2


def test_a_game_played_on_the_gpu_goes_on_on_the_cpu(tmp_path):
    gpu = Game.load(store=tmp_path / "saves", device="cuda", precision="bf16")
    session = gpu.new_session(["Qiqi"], seed=5)
    for text in SCRIPT[:2]:
        session.step(text)
    cpu = Game.load(store=tmp_path / "saves")
    reopened = cpu.open_session(session.id)
    assert [t.instruction for t in reopened.history()] == list(SCRIPT[:2])
    assert reopened.states == session.states
    turn = reopened.step(SCRIPT[2])
    assert turn.index == 2 and turn.frames.shape[-1] == 3


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda_world")
    torch.manual_seed(0)  # a tiny T5 as the decoder's text encoder: no pretrained weights needed
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    T5EncoderModel(T5Config(vocab_size=tokenizer.vocab_size, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                            num_heads=2)).save_pretrained(root / "t5")
    tokenizer.save_pretrained(root / "t5")
    render_dataset(RenderConfig(sessions=12, turns=2, height=48, width=72, workers=1, seed=5), root / "w",
                   progress=False)
    assert main(["train", "vae", "--preset", "tiny", "--data", str(root / "w"), "--out", str(root / "vae"),
                 "--steps", "3", "--batch-size", "2", "--no-progress"]) == 0
    return root


def test_a_phase_trains_on_the_gpu(world):
    """Accelerate puts a one-process run on the GPU by itself; the run says where it trained."""
    launch = json.loads((world / "vae" / "run_config.json").read_text())["launch"]
    assert launch["device"].startswith("cuda") and launch["processes"] == 1
    assert main(["train", "decoder", "--preset", "tiny", "--data", str(world / "w"), "--vae", str(world / "vae"),
                 "--out", str(world / "dec"), "--steps", "3", "--batch-size", "2", "--samples", "0",
                 "--eval-shots", "2", "--no-progress", *LATENT_REFERENCE, "--text-encoder", str(world / "t5")]) == 0
    assert json.loads(next((world / "dec").glob("**/run_config.json")).read_text())["launch"]["device"].startswith("cuda")


def _accelerate(config: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs" / "accelerate" / config),
           "--num_processes", "1", "--main_process_port", str(29500 + os.getpid() % 1000), "-m", "animegamer", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_the_fsdp_config_trains_and_resumes_on_one_gpu(world):
    argv = ["train", "decoder", "--preset", "tiny", "--data", str(world / "w"), "--vae", str(world / "vae"),
            "--out", str(world / "fsdp"), "--batch-size", "2", "--samples", "0", "--eval-shots", "2",
            "--no-progress", "--save-every", "2", "--log-every", "1", *LATENT_REFERENCE, "--text-encoder",
            str(world / "t5")]
    r = _accelerate("fsdp.yaml", *argv, "--steps", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = json.loads(next((world / "fsdp").glob("**/run_config.json")).read_text())["launch"]
    _report("fsdp_launch", run)
    assert run["distributed_type"] == "FSDP" and run["device"].startswith("cuda")
    assert any((world / "fsdp").glob("**/checkpoints/step_*/accelerate"))  # sharded state through save_state
    r = _accelerate("fsdp.yaml", *argv, "--steps", "4", "--resume")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "resumed from" in r.stdout
    final = next((world / "fsdp").glob("**/final/shot_decoder"))
    assert ShotDecoder.from_pretrained(final) is not None
