"""Data-parallel training on this CPU: two processes started by torchrun (what `accelerate launch
--multi_gpu` runs on GPUs; on CPU, accelerate's own launcher wants mpirun) with ACCELERATE_USE_CPU=1,
so Accelerate joins them over gloo. The training loop and a real phase run; ranks read different
items; 2 processes follow 1 process's loss curve at the same global batch; a 2-process run
checkpoints and resumes exactly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import FullyShardedDataParallelPlugin
from accelerate.utils.launch import prepare_multi_gpu_env

from animegamer.core.checkpoint import load_safetensors
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.training.loop import read_log

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "helpers" / "distributed_toy.py"
FSDP_ON_CPU = ROOT / "tests" / "helpers" / "fsdp_on_cpu.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"


def launch(processes: int, *args: str, module: bool = False, timeout: int = 240, env: dict | None = None) -> None:
    cmd = [str(TORCHRUN), "--nproc_per_node", str(processes), "--master_port", str(29500 + os.getpid() % 1000)]
    cmd += ["-m", *args] if module else [*args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1", **(env or {})}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def losses(run: Path) -> list[float]:
    return [row["loss"] for row in read_log(run)]


def test_two_processes_split_the_data_and_follow_one_process(tmp_path):
    launch(1, str(TOY), str(tmp_path / "one"), "12", "4")
    launch(2, str(TOY), str(tmp_path / "two"), "12", "2")  # the same global batch of 4
    seen = [json.loads((tmp_path / "two" / f"seen_rank{r}_to12.json").read_text()) for r in (0, 1)]
    assert len(seen[0]) == len(seen[1]) == 24
    one = json.loads((tmp_path / "one" / "seen_rank0_to12.json").read_text())
    for k in range(12):  # each step the two ranks read disjoint halves of what one process read
        half = [seen[0][2 * k:2 * k + 2], seen[1][2 * k:2 * k + 2]]
        assert not set(half[0]) & set(half[1]) and sorted(half[0] + half[1]) == sorted(one[4 * k:4 * k + 4])
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(a) == len(b) == 12 and sum(a[-3:]) < 0.5 * sum(a[:3])  # it learns
    assert b == pytest.approx(a, rel=1e-4, abs=1e-6)  # the same curve: DDP averages the two halves


def test_two_processes_resume_exactly(tmp_path):
    launch(2, str(TOY), str(tmp_path / "straight"), "8", "2")
    launch(2, str(TOY), str(tmp_path / "resumed"), "4", "2")
    launch(2, str(TOY), str(tmp_path / "resumed"), "8", "2", "--resume")
    assert losses(tmp_path / "resumed") == pytest.approx(losses(tmp_path / "straight"), rel=1e-6, abs=1e-9)
    straight = json.loads((tmp_path / "straight" / "seen_rank1_to8.json").read_text())
    first = json.loads((tmp_path / "resumed" / "seen_rank1_to4.json").read_text())
    second = json.loads((tmp_path / "resumed" / "seen_rank1_to8.json").read_text())
    assert first + second == straight  # rank 1 continued its own slice where it stopped


def test_a_phase_through_the_cli_on_two_processes(tmp_path):
    launch(1, "animegamer", "world", "render", "--sessions", "8", "--turns", "2", "--height", "48", "--width", "72",
           "--workers", "1", "--seed", "5", "--out", str(tmp_path / "w"), module=True)
    launch(2, "animegamer", "train", "vae", "--preset", "tiny", "--data", str(tmp_path / "w"), "--out",
           str(tmp_path / "vae"), "--steps", "3", "--batch-size", "2", "--save-every", "2", "--no-progress",
           "--log-every", "1", module=True)
    assert (tmp_path / "vae" / "final").is_dir() and len(losses(tmp_path / "vae")) == 3


CONFIGS = ROOT / "configs" / "accelerate"


def _launch_args(config: Path):
    parser = launch_command_parser()
    args, _, _ = _validate_launch_command(parser.parse_args(["--config_file", str(config), "train.py"]))
    return args


@pytest.mark.parametrize("name,kind", [("multi_gpu", "MULTI_GPU"), ("multi_node", "MULTI_GPU"),
                                       ("deepspeed_zero2", "DEEPSPEED"), ("deepspeed_zero3", "DEEPSPEED"),
                                       ("fsdp", "FSDP")])
def test_shipped_launch_configs_load(name, kind):
    """The configs accelerate launch reads, as it reads them (no GPU here to run them)."""
    config = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
    assert config.distributed_type.name == kind and config.mixed_precision == "bf16" and not config.use_cpu
    args = _launch_args(CONFIGS / f"{name}.yaml")
    assert args.num_processes == config.num_processes and args.num_machines == config.num_machines
    if kind == "DEEPSPEED":
        assert args.use_deepspeed and args.zero_stage == config.deepspeed_config["zero_stage"]
    if kind == "FSDP":  # the plugin the Accelerator builds from the launcher's environment
        env = prepare_multi_gpu_env(args)
        with pytest.MonkeyPatch.context() as m:
            for k, v in env.items():
                if k.startswith("FSDP_") or k == "ACCELERATE_USE_FSDP":
                    m.setenv(k, v)
            plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.state_dict_type.name == "SHARDED_STATE_DICT"


def test_a_phase_trains_and_resumes_under_the_shipped_fsdp_config(tmp_path):
    """The decoder (both its stages) on 2 processes with configs/accelerate/fsdp.yaml's FSDP 2 settings,
    on CPU through tests/helpers/fsdp_on_cpu.py: the run is sharded, checkpoints through Accelerate,
    resumes bit for bit, and ends where plain data parallel ends."""
    env = {k: v for k, v in prepare_multi_gpu_env(_launch_args(CONFIGS / "fsdp.yaml")).items()
           if k.startswith("FSDP_") or k == "ACCELERATE_USE_FSDP"}
    launch(1, "animegamer", "world", "render", "--sessions", "8", "--turns", "2", "--height", "48", "--width", "72",
           "--workers", "1", "--seed", "5", "--out", str(tmp_path / "w"), module=True)
    launch(1, "animegamer", "train", "vae", "--preset", "tiny", "--data", str(tmp_path / "w"), "--out",
           str(tmp_path / "vae"), "--steps", "3", "--batch-size", "2", "--no-progress", module=True)
    decoder = [str(FSDP_ON_CPU), "train", "decoder", "--preset", "tiny", "--data", str(tmp_path / "w"), "--vae",
               str(tmp_path / "vae"), "--batch-size", "2", "--samples", "0", "--eval-shots", "2", "--no-progress",
               "--save-every", "2", "--log-every", "1", "--set", "visual_reference=latent", "--set", "reference_patch=4"]
    launch(2, *decoder, "--out", str(tmp_path / "fsdp"), "--steps", "4", env=env)
    launch(2, *decoder, "--out", str(tmp_path / "resumed"), "--steps", "2", env=env)
    launch(2, *decoder, "--out", str(tmp_path / "resumed"), "--steps", "4", "--resume", env=env)
    launch(2, *decoder, "--out", str(tmp_path / "ddp"), "--steps", "4")
    for stage in ("warmup", "joint"):
        run = json.loads((tmp_path / "fsdp" / stage / "run_config.json").read_text())["launch"]
        assert run["distributed_type"] == "FSDP" and run["processes"] == 2
        assert (tmp_path / "fsdp" / stage / "checkpoints" / "step_00000004" / "accelerate").is_dir()
    assert json.loads((tmp_path / "ddp" / "joint" / "run_config.json").read_text())["launch"]["distributed_type"] \
        == "MULTI_CPU"
    assert losses(tmp_path / "resumed" / "joint") == losses(tmp_path / "fsdp" / "joint")
    weights = {name: load_safetensors(tmp_path / name / "joint" / "final" / "model.safetensors")
               for name in ("fsdp", "resumed", "ddp")}
    assert all(torch.equal(weights["fsdp"][k], weights["resumed"][k]) for k in weights["fsdp"])
    assert weights["fsdp"].keys() == weights["ddp"].keys()
    assert all(torch.allclose(weights["fsdp"][k], weights["ddp"][k], atol=1e-4) for k in weights["fsdp"])
    ShotDecoder.from_pretrained(tmp_path / "fsdp" / "joint" / "final" / "shot_decoder")  # the export is whole
