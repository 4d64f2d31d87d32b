"""One generic training loop for every phase (clip, vae, decoder, engine, adapt).

A phase hands `train` a module whose `forward(batch) -> (loss, logs)` owns its loss, a torch
Dataset, a collate function and a `TrainConfig`. The loop owns everything else: AdamW on the
trainable parameters, warmup + cosine/linear LR, gradient clipping, EMA, bf16 autocast,
progress bar, JSONL log + loss plot, exact-resume checkpoints and the final export.

Built on Hugging Face Accelerate: one process by default; the same code runs data-parallel under
`accelerate launch` / torchrun (each rank reads its own slice of the same seeded permutation;
tests/test_distributed.py runs 2 CPU processes over gloo, docs/SCALING.md). DeepSpeed / FSDP shard
model and optimizer state, so there the model/optimizer part of a checkpoint goes through
`accelerator.save_state` instead of our safetensors files (not run on this machine: no GPU).

Exact resume: a checkpoint holds the trainable weights (+ persistent buffers), EMA, AdamW state,
scheduler, step, the RNG states (python, numpy, torch, cuda) and the data position, and the
data order is a pure function of (seed, step). Training N steps in one go and N/2 + resume +
N/2 give bit-identical losses and weights (tests/test_training_loop.py). Requirement on the
dataset: `dataset[i]` must be a function of i (per-item randomness seeded by i), since DataLoader
worker RNG is not checkpointed.

Checkpoint layout (`out_dir/checkpoints/step_00000500/`, committed by one directory rename):
  model.safetensors      trainable params + persistent buffers
  ema.safetensors        EMA shadow of trainable params (if ema_decay > 0)
  optimizer.safetensors  AdamW state tensors, keys "<param index>.<name>"
  rng.safetensors        torch CPU (+CUDA) generator states, one file per rank (rng_<rank>...)
  state.json             step, configs, scheduler, data position, python/numpy RNG, log window
`out_dir/checkpoints/latest.json` points at the newest complete one. `out_dir/final/` holds the
export: `model.safetensors` (EMA weights if EMA is on) + `config.json`, plus whatever the
module's optional `export_pretrained(dir)` writes (e.g. the fp16 shipped weights).
"""
from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor
from tqdm.auto import tqdm

from animegamer.core.checkpoint import (
    FORMAT_VERSION,
    TMP_PREFIX,
    atomic_dir,
    commit_dir,
    gathered,
    load_json,
    load_safetensors,
    remove_stale_temps,
    save_json_atomic,
    save_safetensors_atomic,
)
from animegamer.core.devices import cpu_kind, native_bf16, resolve_device
from animegamer.training.memory import enable_gradient_checkpointing, memory_estimate

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.json"
LOG_NAME = "log.jsonl"
PLOT_NAME = "loss.png"
FINAL_DIR = "final"


@runtime_checkable
class TrainableModule(Protocol):
    """What the loop needs from a phase's model.

    forward(batch) -> (scalar loss tensor, {name: float} extra logs)
    Optional: trainable_parameters() -> iterable of the parameters to optimise (default: all
    with requires_grad); export_pretrained(dir) -> writes the shipped artefacts (called with
    the EMA weights in place); config_dict() -> JSON-able model config for final/config.json.
    """

    def forward(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]: ...


TRAIN_DEVICES = ("auto", "cpu", "cuda")


@dataclass
class TrainConfig:
    steps: int = 1000  # total optimiser steps (a resumed run continues up to this)
    batch_size: int = 8  # per process
    lr: float = 3e-4
    weight_decay: float = 0.01  # AdamW, on >= 2-D weights only (not biases, norms, embeddings' scale)
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 100  # linear warmup from 0
    schedule: str = "cosine"  # "cosine" | "linear" | "constant" after warmup
    min_lr_ratio: float = 0.1  # final lr = lr * min_lr_ratio (cosine / linear)
    grad_clip: float = 1.0  # max grad norm; 0 = off
    ema_decay: float = 0.0  # 0 = off; e.g. 0.999
    mixed_precision: str = "no"  # "no" | "bf16" (autocast; weights and optimizer stay fp32)
    # "auto": what Accelerate finds (each process's GPU under a launcher, else the one GPU, else the CPU);
    # "cpu" even where there is a GPU; "cuda" a GPU or a clear error (CUDA_VISIBLE_DEVICES picks which)
    device: str = "auto"
    log_every: int = 10
    save_every: int = 500  # 0 = only at the end
    keep_checkpoints: int = 2
    seed: int = 0
    num_workers: int = 0
    progress: bool = True  # tqdm bar
    # recompute activations in the backward pass where the model's library supports it (training/memory.py)
    gradient_checkpointing: bool = False
    # stop (saving a checkpoint, then exporting) once this many seconds of training have passed in this
    # process, even before `steps`: a run that must fit a lent machine's time or a session (0 = no limit)
    max_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)  # type: ignore[assignment]

        def bad(name: str, rule: str) -> ValueError:
            return ValueError(f"TrainConfig.{name} must be {rule}, got {getattr(self, name)!r}")

        for name in ("steps", "batch_size", "log_every", "keep_checkpoints"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, "an int >= 1")
        for name in ("warmup_steps", "save_every", "num_workers", "seed"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise bad(name, "an int >= 0")
        if not self.lr > 0:
            raise bad("lr", "> 0")
        if self.weight_decay < 0:
            raise bad("weight_decay", ">= 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise bad("betas", "two floats in [0, 1)")
        if self.schedule not in ("cosine", "linear", "constant"):
            raise bad("schedule", "'cosine', 'linear' or 'constant'")
        if not 0 <= self.min_lr_ratio <= 1:
            raise bad("min_lr_ratio", "in [0, 1]")
        if self.grad_clip < 0:
            raise bad("grad_clip", ">= 0 (0 = off)")
        if self.max_seconds < 0:
            raise bad("max_seconds", ">= 0 (0 = no limit)")
        if not 0 <= self.ema_decay < 1:
            raise bad("ema_decay", "in [0, 1) (0 = off)")
        if self.mixed_precision not in ("no", "bf16"):
            raise bad("mixed_precision", "'no' or 'bf16'")
        if self.device not in TRAIN_DEVICES:
            raise bad("device", " or ".join(f"'{d}'" for d in TRAIN_DEVICES))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"TrainConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


# -- LR schedule -----------------------------------------------------------------------------------
def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr for the update that follows `step` completed steps."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "linear":
        decay = 1.0 - progress
    else:
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay


# -- EMA -------------------------------------------------------------------------------------------
class EMA:
    """Exponential moving average of named parameters, kept in fp32.

    decay ramps as min(decay, (1 + n) / (10 + n)) so early weights (random init) fade fast.
    """

    def __init__(self, named_params: dict[str, nn.Parameter], decay: float) -> None:
        self.decay = decay
        self.params = named_params
        self.shadow = {k: p.detach().float().clone() for k, p in named_params.items()}
        self.num_updates = 0

    @torch.no_grad()
    def update(self) -> None:
        self.num_updates += 1
        d = min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))
        for k, p in self.params.items():
            self.shadow[k].lerp_(p.detach().float(), 1.0 - d)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.shadow)

    def load_state_dict(self, sd: dict[str, torch.Tensor], num_updates: int) -> None:
        missing = set(self.shadow) - set(sd)
        if missing:
            raise KeyError(f"EMA checkpoint lacks {sorted(missing)[:5]}")
        for k, dst in self.shadow.items():
            src = sd[k]
            if isinstance(dst, DTensor):  # sharded (FSDP): keep this rank's part of the whole tensor
                src = distribute_tensor(src.to(dst.device), dst.device_mesh, dst.placements)
            dst.copy_(src)
        self.num_updates = num_updates

    @torch.no_grad()
    def swap(self) -> None:
        """Exchange live weights and shadow (call twice to undo)."""
        for k, p in self.params.items():
            live = p.detach().clone()
            p.copy_(self.shadow[k].to(p.dtype))
            self.shadow[k].copy_(live.float())


# -- data order ------------------------------------------------------------------------------------
class ResumableBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Infinite stream of batches; the order is a pure function of (seed, global batch index).

    Epoch e is `randperm(n)` from a generator seeded with (seed, e); each global batch takes the
    next batch_size * world_size indices and rank r keeps its slice. Incomplete tail batches are
    dropped. Starting at `start` (= steps already done) resumes the exact order.
    """

    def __init__(self, n: int, batch_size: int, seed: int, start: int = 0, rank: int = 0, world: int = 1,
                 shuffle: bool = True) -> None:
        self.n, self.batch_size, self.seed, self.start = n, batch_size, seed, start
        self.rank, self.world, self.shuffle = rank, world, shuffle
        self.per_epoch = n // (batch_size * world)
        if self.per_epoch < 1:
            raise ValueError(f"dataset of {n} items is smaller than one global batch "
                             f"({batch_size} x {world} processes)")

    def position(self, step: int) -> dict[str, int]:
        return {"epoch": step // self.per_epoch, "batch_in_epoch": step % self.per_epoch}

    def _perm(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % (2 ** 63))
        return torch.randperm(self.n, generator=g)

    def __iter__(self) -> Iterator[list[int]]:
        epoch, b = divmod(self.start, self.per_epoch)
        gb = self.batch_size * self.world
        while True:
            perm = self._perm(epoch)
            for i in range(b, self.per_epoch):
                chunk = perm[i * gb:(i + 1) * gb]
                yield chunk[self.rank * self.batch_size:(self.rank + 1) * self.batch_size].tolist()
            epoch, b = epoch + 1, 0

    def __len__(self) -> int:  # infinite; DataLoader only needs this for len(loader)
        return 2 ** 62


def _to_device(batch: Any, device: torch.device) -> Any:
    if hasattr(batch, "to"):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


# -- RNG state -------------------------------------------------------------------------------------
def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    py = random.getstate()
    np_state = np.random.get_state()
    js = {"python": [py[0], list(py[1]), py[2]],
          "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])]}
    return tensors, js


def _set_rng_state(tensors: dict[str, torch.Tensor], js: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("torch_cuda_"))]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    v, st, g = js["python"]
    random.setstate((v, tuple(st), g))
    name, keys, pos, has_gauss, cached = js["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


# -- optimizer state <-> safetensors + JSON --------------------------------------------------------
def _optimizer_to_files(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in sd["state"].items():
        for name, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{idx}.{name}"] = v
            else:
                scalars.setdefault(str(idx), {})[name] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _optimizer_from_files(tensors: dict[str, torch.Tensor], js: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, v in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = v
    for idx, sc in js["scalars"].items():
        state.setdefault(int(idx), {}).update(sc)
    groups = js["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    return {"state": state, "param_groups": groups}


# -- checkpoints -----------------------------------------------------------------------------------
def _step_dir(ckpt_dir: Path, step: int) -> Path:
    return ckpt_dir / f"step_{step:08d}"


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """Newest complete checkpoint dir of a run (via latest.json, else the highest step_* with state.json)."""
    ckpt_dir = Path(out_dir) / CHECKPOINT_DIR
    pointer = ckpt_dir / LATEST
    if pointer.is_file():
        d = ckpt_dir / load_json(pointer)["dir"]
        if (d / "state.json").is_file():
            return d
    done = sorted(p for p in ckpt_dir.glob("step_*") if (p / "state.json").is_file())
    return done[-1] if done else None


class _Trainer:
    """State of one training run; `train()` below is the public entry point."""

    def __init__(self, module: nn.Module, dataset, collate_fn: Callable | None, cfg: TrainConfig,
                 out_dir: Path) -> None:
        # Several runs in one process (a phase's stages, tests) each get a fresh state. The process-level
        # part is reset too: FSDP marks it, and a state rebuilt over a marked one has no FSDP plugin.
        AcceleratorState._reset_state(reset_partial_state=True)
        precision = cfg.mixed_precision
        if precision == "bf16" and (cfg.device == "cpu" or not torch.cuda.is_available()) and not native_bf16():
            # measured: the engine's step 30-80 s in emulated bf16 against 2 s in fp32 on an AVX2 EPYC
            print(f"[train] this CPU ({cpu_kind()}) emulates bfloat16, many times slower than fp32: training in fp32")
            precision = "no"
        self.acc = Accelerator(mixed_precision=precision, cpu=cfg.device == "cpu")
        self.cfg, self.out_dir, self.dataset, self.collate_fn = cfg, out_dir, dataset, collate_fn
        self.ckpt_dir = out_dir / CHECKPOINT_DIR
        self.raw = module
        if hasattr(module, "trainable_parameters"):
            wanted = {id(p) for p in module.trainable_parameters()}
        else:
            wanted = {id(p) for p in module.parameters() if p.requires_grad}
        self.named = {n: p for n, p in module.named_parameters() if id(p) in wanted}
        if not self.named:
            raise ValueError("the module has no trainable parameters")
        persistent = set(module.state_dict().keys())
        self.buffer_names = [n for n, _ in module.named_buffers() if n in persistent]
        decay = [p for n, p in self.named.items() if p.ndim >= 2]
        no_decay = [p for n, p in self.named.items() if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=cfg.betas)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, cfg))
        # The scheduler is stepped by hand once per optimiser step (an Accelerate-prepared one
        # steps num_processes times per call, which would change the schedule with world size).
        self.checkpointed = enable_gradient_checkpointing(module) if cfg.gradient_checkpointing else []
        self.memory = memory_estimate(module, wanted, ema=cfg.ema_decay > 0)
        self.model, self.optimizer = self.acc.prepare(module, self.optimizer)
        self.sharded = self.acc.distributed_type.value in ("DEEPSPEED", "FSDP")
        if self.acc.distributed_type.value == "FSDP":
            # FSDP 2 shards in place and replaces each parameter by a sharded one (a DTensor): clipping
            # and EMA must follow the new objects, under the same names
            self.named = {n: p for n, p in module.named_parameters() if n in self.named}
        self.ema = EMA(self.named, cfg.ema_decay) if cfg.ema_decay > 0 else None
        self.step = 0
        self.window: dict[str, list[float]] = {}  # log values since the last log line

    # -- state of the module that a checkpoint must hold -----------------------------------------
    def model_state(self) -> dict[str, torch.Tensor]:
        sd = self.raw.state_dict()
        keep = set(self.named) | set(self.buffer_names)
        return {k: v for k, v in sd.items() if k in keep}

    def load_model_state(self, sd: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.raw.load_state_dict(sd, strict=False)
        frozen = {n for n, _ in self.raw.named_parameters()} - set(self.named)
        bad_missing = [k for k in missing if k not in frozen and k in set(self.named) | set(self.buffer_names)]
        if unexpected or bad_missing:
            raise KeyError(f"checkpoint does not match the module: missing {bad_missing[:5]}, "
                           f"unexpected {list(unexpected)[:5]}")

    def save(self) -> Path:
        acc, step = self.acc, self.step
        final = _step_dir(self.ckpt_dir, step)
        tmp = self.ckpt_dir / f"{TMP_PREFIX}{final.name}"
        if acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        acc.wait_for_everyone()
        rng_t, rng_js = _rng_state()
        save_safetensors_atomic(rng_t, tmp / f"rng_{acc.process_index}.safetensors")
        save_json_atomic(rng_js, tmp / f"rng_{acc.process_index}.json")
        sharded = self.sharded
        if sharded:  # model + optimizer state live sharded across ranks: let Accelerate write them
            acc.save_state(str(tmp / "accelerate"))
        ema = gathered(self.ema.state_dict()) if self.ema is not None else None  # collective when sharded
        acc.wait_for_everyone()
        if acc.is_main_process:
            if not sharded:
                save_safetensors_atomic(self.model_state(), tmp / "model.safetensors")
                opt_t, opt_js = _optimizer_to_files(self.optimizer.optimizer if hasattr(self.optimizer, "optimizer")
                                                    else self.optimizer)
                save_safetensors_atomic(opt_t, tmp / "optimizer.safetensors")
                save_json_atomic(opt_js, tmp / "optimizer.json")
            if ema is not None:
                save_safetensors_atomic(ema, tmp / "ema.safetensors")
            sampler = self.sampler
            state = {
                "format_version": FORMAT_VERSION, "step": step, "train_config": self.cfg.to_dict(),
                "scheduler": self.scheduler.state_dict(), "ema_updates": self.ema.num_updates if self.ema else 0,
                "data": {"seed": self.cfg.seed, "batch_size": self.cfg.batch_size, "world_size": acc.num_processes,
                         "dataset_len": len(self.dataset), **sampler.position(step)},
                "log_window": self.window, "world_size": acc.num_processes,
            }
            state["scheduler"].pop("lr_lambdas", None)
            save_json_atomic(state, tmp / "state.json")  # written last: marks the dir complete
            commit_dir(tmp, final)
            save_json_atomic({"dir": final.name, "step": step}, self.ckpt_dir / LATEST)
            for old in sorted(self.ckpt_dir.glob("step_*"))[:-self.cfg.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()
        return final

    def load(self, ckpt: Path) -> None:
        state = load_json(ckpt / "state.json")
        if state.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{ckpt}: checkpoint format {state.get('format_version')} != {FORMAT_VERSION}")
        if (ckpt / "accelerate").is_dir():
            self.acc.load_state(str(ckpt / "accelerate"))
        else:
            self.load_model_state(load_safetensors(ckpt / "model.safetensors"))
            opt = self.optimizer.optimizer if hasattr(self.optimizer, "optimizer") else self.optimizer
            opt.load_state_dict(_optimizer_from_files(load_safetensors(ckpt / "optimizer.safetensors"),
                                                      load_json(ckpt / "optimizer.json")))
        sched = self.scheduler.state_dict()
        sched.update(state["scheduler"])
        self.scheduler.load_state_dict(sched)
        # The next update follows this run's schedule: a resume that extends --steps has a longer
        # schedule than the one whose learning rate the checkpoint holds (the same one otherwise).
        for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
            group["lr"] = base * lr_factor(int(state["step"]), self.cfg)
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        if self.ema is not None:
            if (ckpt / "ema.safetensors").is_file():
                self.ema.load_state_dict(load_safetensors(ckpt / "ema.safetensors"), state["ema_updates"])
            else:
                print(f"[train] {ckpt} has no EMA; starting EMA from the resumed weights")
        rank = self.acc.process_index
        rng_file = ckpt / f"rng_{rank}.safetensors"
        if rng_file.is_file():
            _set_rng_state(load_safetensors(rng_file), load_json(ckpt / f"rng_{rank}.json"))
        else:
            print(f"[train] {ckpt} has no RNG state for rank {rank} (world size changed?): reseeding")
        data = state["data"]
        if (data["seed"], data["batch_size"], data["world_size"], data["dataset_len"]) != (
                self.cfg.seed, self.cfg.batch_size, self.acc.num_processes, len(self.dataset)):
            print(f"[train] data order differs from the checkpoint's ({data}); resuming at step "
                  f"{state['step']} with the new order")
        self.window = {k: list(v) for k, v in state.get("log_window", {}).items()}
        self.step = int(state["step"])


def _truncate_log(path: Path, step: int) -> None:
    """Drop log lines past `step` (written after the checkpoint we resume from)."""
    if not path.is_file():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    tmp = path.with_name(TMP_PREFIX + path.name)
    tmp.write_text("".join(ln + "\n" for ln in keep))
    tmp.replace(path)


def read_log(out_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(out_dir) / LOG_NAME
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def plot_losses(out_dir: str | Path) -> Path | None:
    """Plot every logged value whose name starts with 'loss' against step -> out_dir/loss.png."""
    rows = read_log(out_dir)
    if not rows:
        return None

    matplotlib.use("Agg")

    keys = sorted({k for r in rows for k in r if k.startswith("loss")})
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in keys:
        pts = [(r["step"], r[k]) for r in rows if k in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=k)
    ax.set_xlabel("step")
    ax.set_yscale("log" if all(r.get("loss", 1) > 0 for r in rows) else "linear")
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(Path(out_dir).name)
    fig.tight_layout()
    path = Path(out_dir) / PLOT_NAME
    tmp = path.with_name(TMP_PREFIX + path.name)
    fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    tmp.replace(path)
    return path


def train(module: nn.Module, dataset, collate_fn: Callable | None, cfg: TrainConfig, out_dir: str | Path,
          resume: bool = False) -> dict[str, Any]:
    """Train `module` on `dataset` for cfg.steps optimiser steps; see the module docstring.

    resume=True continues from the newest checkpoint in out_dir (or starts fresh if there is
    none). resume=False refuses an out_dir that already holds checkpoints.
    Returns {"step", "loss" (last logged), "out_dir", "final_dir", "log", "plot", "seconds"}.
    """
    if cfg.device != "auto":
        resolve_device(cfg.device)  # a clear error, before anything is written, for a GPU that is not here
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t = _Trainer(module, dataset, collate_fn, cfg, out_dir)
    acc = t.acc
    if acc.is_main_process:
        remove_stale_temps(t.ckpt_dir)
    acc.wait_for_everyone()
    ckpt = latest_checkpoint(out_dir)
    log_path = out_dir / LOG_NAME
    if ckpt is not None and not resume:
        raise FileExistsError(f"{out_dir} already holds checkpoints (newest {ckpt.name}); pass resume=True "
                              f"(--resume) to continue or choose a new output directory")
    seed = cfg.seed + acc.process_index  # per-rank noise / dropout streams
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    if ckpt is not None:
        t.load(ckpt)
        if acc.is_main_process:
            _truncate_log(log_path, t.step)
            print(f"[train] resumed from {ckpt} at step {t.step}")
    elif acc.is_main_process and log_path.exists():
        log_path.unlink()
    t.sampler = ResumableBatchSampler(len(dataset), cfg.batch_size, cfg.seed, start=t.step,
                                      rank=acc.process_index, world=acc.num_processes)
    if acc.is_main_process:
        launch = {"device": str(acc.device), "distributed_type": acc.distributed_type.value,
                  "processes": acc.num_processes, "mixed_precision": acc.mixed_precision}
        save_json_atomic({"train_config": cfg.to_dict(), **_module_config(module), "memory": t.memory,
                          "gradient_checkpointing": t.checkpointed, "launch": launch}, out_dir / "run_config.json")
        print(f"[train] memory per process (weights, gradients, AdamW{', EMA' if t.ema else ''}): {t.memory['text']}"
              + (f"; gradient checkpointing in {', '.join(t.checkpointed)}" if t.checkpointed else ""))

    t0 = time.perf_counter()
    last: dict[str, float] = {}
    if t.step < cfg.steps:
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=t.sampler, collate_fn=collate_fn, num_workers=cfg.num_workers,
            # own generator: creating the iterator must not consume the global torch RNG
            generator=torch.Generator().manual_seed(cfg.seed), persistent_workers=cfg.num_workers > 0,
        )
        batches = iter(loader)

        bar = tqdm(total=cfg.steps, initial=t.step, disable=not (cfg.progress and acc.is_main_process),
                   desc=out_dir.name, dynamic_ncols=True)
        t.model.train()
        step_t0 = time.perf_counter()
        while t.step < cfg.steps:
            batch = _to_device(next(batches), acc.device)
            loss, logs = t.model(batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {loss.item()} at step {t.step}")
            acc.backward(loss)
            grad_norm = None
            if cfg.grad_clip > 0:
                grad_norm = acc.clip_grad_norm_(list(t.named.values()), cfg.grad_clip)
            lr = t.scheduler.get_last_lr()[0]
            t.optimizer.step()
            t.scheduler.step()
            t.optimizer.zero_grad(set_to_none=True)
            if t.ema is not None:
                t.ema.update()
            t.step += 1
            loss_v = acc.reduce(loss.detach(), "mean").item() if acc.num_processes > 1 else loss.item()
            vals = {"loss": loss_v, **{k: float(v) for k, v in logs.items()}}
            if grad_norm is not None:
                vals["grad_norm"] = float(grad_norm)
            for k, v in vals.items():
                t.window.setdefault(k, []).append(v)
            bar.update(1)
            if t.step % cfg.log_every == 0 or t.step == cfg.steps:
                last = {k: sum(v) / len(v) for k, v in t.window.items()}
                bar.set_postfix(loss=f"{last['loss']:.4g}", lr=f"{lr:.2e}")
                if acc.is_main_process:
                    row = {"step": t.step, **last, "lr": lr,
                           "sec_per_step": (time.perf_counter() - step_t0) / len(t.window["loss"])}
                    with open(log_path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(row) + "\n")
                t.window = {}
                step_t0 = time.perf_counter()
            out_of_time = bool(cfg.max_seconds) and time.perf_counter() - t0 > cfg.max_seconds
            if (cfg.save_every and t.step % cfg.save_every == 0) or t.step == cfg.steps or out_of_time:
                t.save()
            if out_of_time:
                if acc.is_main_process:
                    print(f"[train] stopped at step {t.step} after {cfg.max_seconds:.0f} s (max_seconds); "
                          "--resume continues")
                break
        bar.close()
    final_dir = export(t, module)
    plot = plot_losses(out_dir) if acc.is_main_process else None
    acc.unwrap_model(t.model, keep_fp32_wrapper=False)  # restores module.forward (drops the autocast wrapper)
    if not last:
        rows = read_log(out_dir)
        last = rows[-1] if rows else {}
    return {"step": t.step, "loss": last.get("loss"), "out_dir": str(out_dir), "final_dir": str(final_dir),
            "log": str(log_path), "plot": str(plot) if plot else None, "seconds": time.perf_counter() - t0}


def is_sharded(module: nn.Module) -> bool:
    """Whether FSDP has sharded this module's parameters in place (a run under FSDP did)."""
    return any(isinstance(p, DTensor) for p in module.parameters())


def _module_config(module: nn.Module) -> dict[str, Any]:
    if hasattr(module, "config_dict"):
        return {"model_config": module.config_dict()}
    return {"model_class": type(module).__name__}


def export(t: _Trainer, module: nn.Module) -> Path:
    """Write out_dir/final: EMA (or live) weights + config, then the module's own export."""
    final_dir = t.out_dir / FINAL_DIR
    if not t.acc.is_main_process and not t.sharded:
        t.acc.wait_for_everyone()
        return final_dir
    if t.ema is not None:
        t.ema.swap()
    try:
        # Sharded weights are gathered whole as they are written, which every rank must join: then
        # every rank runs the export and only the main process's files are kept.
        target = atomic_dir(final_dir) if t.acc.is_main_process else tempfile.TemporaryDirectory(prefix="export-")
        with target as tmp:
            tmp = Path(tmp)
            save_safetensors_atomic(t.model_state(), tmp / "model.safetensors",
                                    metadata={"ema": str(t.ema is not None), "step": str(t.step)})
            save_json_atomic({"format_version": FORMAT_VERSION, "step": t.step, "ema": t.ema is not None,
                              "train_config": t.cfg.to_dict(), **_module_config(module)}, tmp / "config.json")
            if hasattr(module, "export_pretrained"):
                module.export_pretrained(tmp)
    finally:
        if t.ema is not None:
            t.ema.swap()
    t.acc.wait_for_everyone()
    return final_dir
