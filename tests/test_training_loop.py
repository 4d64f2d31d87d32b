"""The generic training loop: learning, exact resume, atomic checkpoints."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from animegamer.core import checkpoint as ckpt_mod
from animegamer.core.devices import DeviceError
from animegamer.training.loop import TrainConfig, latest_checkpoint, read_log, train

torch.set_num_threads(1)


class Regress(nn.Module):
    """Tiny model that uses the global RNG (dropout + input noise) so RNG restore matters."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.1), nn.ReLU(), nn.Linear(16, 1))
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, batch):
        x, y = batch
        self.calls += 1
        x = self.frozen(x) + 0.01 * torch.randn_like(x)
        loss = (self.net(x).squeeze(-1) - y).pow(2).mean()
        return loss, {"loss_mse": loss.item()}

    def config_dict(self):
        return {"kind": "regress"}


class Data(torch.utils.data.Dataset):
    def __init__(self, n: int = 40) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0])

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def make(seed: int = 0) -> Regress:
    torch.manual_seed(seed)
    return Regress()


def cfg(**kw) -> TrainConfig:
    base = dict(steps=12, batch_size=4, lr=1e-2, warmup_steps=3, log_every=1, save_every=3, ema_decay=0.9,
                seed=7, progress=False, keep_checkpoints=2)
    base.update(kw)
    return TrainConfig(**base)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="TrainConfig.lr"):
        TrainConfig(lr=0)
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainConfig(mixed_precision="fp16")


def test_steps_lower_the_loss_on_a_fixed_batch(tmp_path):
    class One(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return Data()[i]

    out = train(make(), One(), None, cfg(steps=30, lr=5e-2, schedule="constant", save_every=0, warmup_steps=0, ema_decay=0.0), tmp_path)
    losses = [r["loss"] for r in read_log(tmp_path)]
    assert losses[-1] < 0.5 * losses[0]
    assert (tmp_path / "loss.png").is_file() and (tmp_path / "final" / "model.safetensors").is_file()
    assert out["step"] == 30


def perturbed() -> Regress:
    """Same frozen part (it comes from the model's source, not the checkpoint), other trainable weights."""
    m = make()
    with torch.no_grad():
        for p in m.net.parameters():
            p.add_(1.0)
    return m


def test_exact_resume(tmp_path):
    """N steps in one go == crash after checkpoint N/2, resume, finish: bit-exact log and weights."""
    a, c = tmp_path / "a", tmp_path / "c"
    ma = make()
    train(ma, Data(), None, cfg(), a)
    mc = make()

    class Stop(Exception):
        pass

    class Interrupting(Data):
        def __getitem__(self, i):
            if self.count == 4 * 7:  # 7th batch (step 7) never arrives: crash after the step-6 checkpoint
                raise Stop
            self.count += 1
            return super().__getitem__(i)

    d = Interrupting()
    d.count = 0
    with pytest.raises(Stop):
        train(mc, d, None, cfg(), c)
    assert latest_checkpoint(c).name == "step_00000006"
    mc2 = perturbed()
    train(mc2, Data(), None, cfg(), c, resume=True)
    la = [(r["step"], r["loss"], r["loss_mse"], r["lr"]) for r in read_log(a)]
    lc = [(r["step"], r["loss"], r["loss_mse"], r["lr"]) for r in read_log(c)]
    assert la == lc  # bit-exact losses and lrs, each step once
    for (k, va), (_, vc) in zip(ma.state_dict().items(), mc2.state_dict().items()):
        assert torch.equal(va, vc), k
    fa = ckpt_mod.load_safetensors(a / "final" / "model.safetensors")
    fc = ckpt_mod.load_safetensors(c / "final" / "model.safetensors")
    assert fa.keys() == fc.keys() and all(torch.equal(fa[k], fc[k]) for k in fa)
    assert not any(k.startswith("frozen") for k in fa)  # frozen params are not checkpointed


def test_a_resume_that_extends_the_run_follows_the_longer_schedule(tmp_path):
    """6 steps, then resumed to 12: from step 7 on, the learning rates of a straight 12-step run."""
    straight, extended = tmp_path / "straight", tmp_path / "extended"
    train(make(), Data(), None, cfg(), straight)
    train(make(), Data(), None, cfg(steps=6), extended)
    train(make(), Data(), None, cfg(), extended, resume=True)
    a = [(r["step"], r["lr"]) for r in read_log(straight)]
    b = [(r["step"], r["lr"]) for r in read_log(extended)]
    assert [s for s, _ in b] == list(range(1, 13))
    assert b[6:] == a[6:]  # the checkpoint's rate came from the 6-step schedule; the next update's does not
    assert b[5][1] < a[5][1]  # (the short run had decayed further by its end)


def test_the_run_trains_where_it_is_told(tmp_path):
    """device="cpu" stays on the CPU even where there is a GPU; "cuda" without one is a clear error."""
    train(make(), Data(), None, cfg(steps=2, device="cpu"), tmp_path / "cpu")
    launch = json.loads((tmp_path / "cpu" / "run_config.json").read_text())["launch"]
    assert launch["device"] == "cpu" and launch["processes"] == 1
    with pytest.raises(ValueError, match="TrainConfig.device must be 'auto' or 'cpu' or 'cuda'"):
        cfg(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA GPU"):
            train(make(), Data(), None, cfg(steps=2, device="cuda"), tmp_path / "cuda")
        assert not (tmp_path / "cuda").exists()  # nothing written


def test_bf16_on_a_cpu_that_emulates_it_trains_in_fp32(tmp_path, monkeypatch, capsys):
    """Emulated bfloat16 is many times slower than fp32 (an AVX2 CPU): the run says so and trains in fp32; a CPU
    with bf16 in hardware keeps the autocast."""
    from animegamer.training import loop

    for native, want in ((False, "no"), (True, "bf16")):
        monkeypatch.setattr(loop, "native_bf16", lambda native=native: native)
        train(make(), Data(), None, cfg(steps=1, device="cpu", mixed_precision="bf16"), tmp_path / str(native))
        launch = json.loads((tmp_path / str(native) / "run_config.json").read_text())["launch"]
        assert launch["mixed_precision"] == want
    assert "emulates bfloat16" in capsys.readouterr().out


def test_crash_mid_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    real = ckpt_mod.save_safetensors_atomic
    calls = {"n": 0}

    def flaky(tensors, path, metadata=None):
        if path.name == "optimizer.safetensors":
            calls["n"] += 1
            if calls["n"] == 2:  # second checkpoint dies half-written
                raise OSError("disk full")
        return real(tensors, path, metadata)

    import animegamer.training.loop as loop

    monkeypatch.setattr(loop, "save_safetensors_atomic", flaky)
    with pytest.raises(OSError):
        train(make(), Data(), None, cfg(), tmp_path)
    good = latest_checkpoint(tmp_path)
    assert good.name == "step_00000003"
    assert json.loads((tmp_path / "checkpoints" / "latest.json").read_text())["step"] == 3
    assert not (tmp_path / "checkpoints" / "step_00000006").exists()
    monkeypatch.setattr(loop, "save_safetensors_atomic", real)
    out = train(perturbed(), Data(), None, cfg(), tmp_path, resume=True)  # stale temp dir is cleaned up
    assert out["step"] == 12
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "checkpoints").iterdir())
    assert [r["step"] for r in read_log(tmp_path)] == list(range(1, 13))


def test_refuses_to_overwrite_without_resume(tmp_path):
    train(make(), Data(), None, cfg(steps=3), tmp_path)
    with pytest.raises(FileExistsError):
        train(make(), Data(), None, cfg(steps=3), tmp_path)


def test_max_seconds_stops_in_time_with_a_checkpoint_and_resume_finishes(tmp_path):
    """A run given a time budget stops early, saves where it stopped, exports, and a resume continues."""
    out = train(make(), Data(), None, cfg(steps=50, save_every=0, max_seconds=1e-9), tmp_path)
    assert out["step"] == 1  # the budget is spent after the first step
    assert latest_checkpoint(tmp_path).name == "step_00000001"
    assert (tmp_path / "final" / "model.safetensors").is_file()
    done = train(make(), Data(), None, cfg(steps=50, save_every=0), tmp_path, resume=True)
    assert done["step"] == 50
    with pytest.raises(ValueError, match="max_seconds"):
        TrainConfig(max_seconds=-1)
