"""The residual sampler's denoiser: its training, sampling and checks (docs/layers.md, "A residual sampler over the
drawing"); experiments/residual_sampler.py makes its data (``cache``, ``carry``) and reads the level of its samples
(``measure``); a lent GPU runs this file alone (scripts/gpu_residual_sampler.sh):

    .venv/bin/python experiments/residual_net.py train --cache RUNS/res_train.npz --net unet2d --steps 2000 --out RUN
    .venv/bin/python experiments/residual_net.py train --cache .gpu/res_train.npz.xz --decoder .gpu/decoder \
        --animator .gpu/init --net st --device cuda --max-seconds 420 --out RUN
    .venv/bin/python experiments/residual_net.py denoise --cache RUNS/res_9100.npz --run RUN
    .venv/bin/python experiments/residual_net.py sample --cache RUNS/res_9100.npz --run RUN --steps 12 --out S
    .venv/bin/python experiments/residual_net.py export --run RUN --out DIR   # the EMA weights as fp16 shards

The denoiser draws the residual truth - drawing of a shot's 17 frames (EDM preconditioning, Karras et al. 2022), given
the shipped animator's drawing in place and the level. Two networks: ``unet2d``, diffusers' UNet2DModel with the 17
frames stacked as channels and the level as a class (the forty-first session's; it cannot carry its own input
through); ``st``, diffusers' UNetSpatioTemporalConditionModel (Stable Video Diffusion's U-Net, small): the frames are
its batch with weights shared over time, temporal convolutions and attention across frames, s_a as its cross-attention
context and the level as an added time id (where SVD gives its motion bucket).
A cache is an ``.npz`` holding the drawing (``residual_sampler.py cache``) or an ``.npz.xz`` without it
(``residual_sampler.py carry``, sized for a device call): then ``--animator`` redraws it and ``--decoder`` (the folder
scripts/gpu_payload.py writes: E_a and its text table) rebuilds s_a from the texts and f_v.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import lzma
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import UNet2DModel, UNetSpatioTemporalConditionModel
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from animegamer.decoder.sprite_animator import SpriteAnimator, to_unit
from animegamer.training.action_parts import TEXT_TABLE, ActionParts

FRAMES, CH, SIZE = 17, 4, 80
S2D = 2  # space-to-depth: 80 x 80 -> 40 x 40
LEVEL_ID = 16.0  # the level's added time id is level x this: SVD's motion bucket spans 0-255


@dataclass
class NetSpec:
    kind: str = "st"
    width: tuple[int, ...] = (64, 128, 128)  # 13.5 M parameters: 27 MB of fp16 shards come back from a device call
    heads: tuple[int, ...] = (2, 4, 4)  # st only
    context: int = 256  # st only: s_a's width (E_a's d_model)


UNET2D_V1 = NetSpec("unet2d", (64, 96, 128), (), 0)  # the forty-first session's checkpoints, which carry no spec


def build(spec: NetSpec) -> torch.nn.Module:
    n = len(spec.width)
    if spec.kind == "unet2d":
        return UNet2DModel(sample_size=SIZE // S2D, in_channels=2 * FRAMES * CH * S2D ** 2,
                           out_channels=FRAMES * CH * S2D ** 2, block_out_channels=spec.width, layers_per_block=1,
                           down_block_types=("DownBlock2D",) * (n - 1) + ("AttnDownBlock2D",),
                           up_block_types=("AttnUpBlock2D",) + ("UpBlock2D",) * (n - 1), norm_num_groups=32,
                           num_class_embeds=6)
    if spec.kind == "st":
        return UNetSpatioTemporalConditionModel(
            sample_size=SIZE // S2D, in_channels=2 * CH * S2D ** 2, out_channels=CH * S2D ** 2,
            down_block_types=("DownBlockSpatioTemporal",) + ("CrossAttnDownBlockSpatioTemporal",) * (n - 1),
            up_block_types=("CrossAttnUpBlockSpatioTemporal",) * (n - 1) + ("UpBlockSpatioTemporal",),
            block_out_channels=spec.width, addition_time_embed_dim=32, projection_class_embeddings_input_dim=96,
            layers_per_block=1, cross_attention_dim=spec.context, num_attention_heads=spec.heads, num_frames=FRAMES)
    raise ValueError(f"net kind {spec.kind!r}: unet2d or st")


def frames_in(x: torch.Tensor) -> torch.Tensor:
    """(B, T, H, W, C) -> (B, T, C*S2D^2, H/S2D, W/S2D): the frames as a batch (st); flattened over T and its
    channels, the frames stacked as channels (unet2d)."""
    b, t, h, w, c = x.shape
    y = F.pixel_unshuffle(x.permute(0, 1, 4, 2, 3).reshape(b * t, c, h, w), S2D)
    return y.reshape(b, t, *y.shape[1:])


def frames_out(y: torch.Tensor) -> torch.Tensor:
    b, t = y.shape[:2]
    x = F.pixel_shuffle(y.flatten(0, 1), S2D)
    return x.reshape(b, t, *x.shape[1:]).permute(0, 1, 3, 4, 2)


class Denoiser(torch.nn.Module):
    """EDM preconditioning of the residual given the drawing, the level and (st) s_a."""

    def __init__(self, spec: NetSpec, sigma_data: float) -> None:
        super().__init__()
        self.spec, self.net, self.sigma_data = spec, build(spec), sigma_data

    def forward(self, noisy: torch.Tensor, sigma: torch.Tensor, drawn: torch.Tensor, level: torch.Tensor,
                s_a: torch.Tensor | None) -> torch.Tensor:
        sd, s = self.sigma_data, sigma.view(-1, 1, 1, 1, 1)
        c_in, c_skip = 1 / torch.sqrt(s ** 2 + sd ** 2), sd ** 2 / (s ** 2 + sd ** 2)
        c_out = s * sd / torch.sqrt(s ** 2 + sd ** 2)
        c_noise = torch.log(sigma) / 4
        if self.spec.kind == "unet2d":
            x = torch.cat([frames_in(noisy * c_in).flatten(1, 2), frames_in(drawn * 2 - 1).flatten(1, 2)], dim=1)
            out = frames_out(self.net(x, c_noise, class_labels=level).sample.float().unflatten(1, (FRAMES, -1)))
        else:
            x = torch.cat([frames_in(noisy * c_in), frames_in(drawn * 2 - 1)], dim=2)
            ids = torch.stack([level.float() * LEVEL_ID, torch.zeros_like(sigma), torch.zeros_like(sigma)], dim=-1)
            out = frames_out(self.net(x, c_noise, encoder_hidden_states=s_a, added_time_ids=ids).sample.float())
        return c_skip * noisy + c_out * out


@dataclass
class Shots:
    """A cache's shots: the drawing and the truth (N, T, H, W, 4) uint8 premultiplied, the level (N,), s_a (N, n, D)
    fp16 (None in a cache made before s_a was kept), and the rest of its arrays (verb, place, ...)."""
    drawn: np.ndarray
    truth: np.ndarray
    level: np.ndarray
    s_a: torch.Tensor | None
    meta: dict[str, np.ndarray] = field(default_factory=dict)


def read_npz(path: str) -> dict[str, np.ndarray]:
    """An .npz, or an .npz.xz (a carry: the npz lzma-compressed)."""
    src = io.BytesIO(lzma.decompress(Path(path).read_bytes())) if path.endswith(".xz") else path
    with np.load(src) as z:
        return {k: z[k] for k in z.files}


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Atomically: an .npz, or lzma-compressed for a path ending .xz."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = lzma.compress(buf.getvalue(), preset=6) if path.endswith(".xz") else buf.getvalue()
    tmp = Path(path + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


@torch.no_grad()
def rebuild_s_a(z: dict[str, np.ndarray], decoder: str, device: str) -> torch.Tensor:
    """s_a from its two halves: E_a's text tokens (the table in ``decoder``) and E_a's visual tokens of f_v."""
    parts = ActionParts(decoder, device, Path(decoder) / TEXT_TABLE)
    texts = [str(t) for t in z["texts"][z["text"]]]
    out = []
    for i in range(0, len(texts), 256):
        f_v = torch.from_numpy(z["f_v"][i:i + 256]).float().to(parts.device)
        out.append(torch.cat([parts.text_part(texts[i:i + 256]), parts.encoder.visual(f_v)], dim=1).half().cpu())
    return torch.cat(out)


@torch.no_grad()
def redraw(animator: SpriteAnimator, cutouts: np.ndarray, s_a: torch.Tensor, level: np.ndarray,
           chunk: int = 8) -> np.ndarray:
    """The shipped animator's drawing of each shot from standing (frames 0-16 in one pass, as a scene starts in play;
    as drawn_change.draw_from_standing): cut-outs (N, H, W, 4) uint8 -> (N, T, H, W, 4) uint8."""
    dev = next(animator.parameters()).device
    out = []
    for i in tqdm(range(0, len(cutouts), chunk), desc="redraw"):
        ref = to_unit(torch.from_numpy(cutouts[i:i + chunk]).to(dev))
        lv = torch.from_numpy(level[i:i + chunk]).to(dev)
        drawn, _ = animator.draw(ref, ref, s_a[i:i + chunk].to(dev), lv, torch.zeros_like(lv), start=0)
        out.append((drawn.permute(0, 1, 3, 4, 2).clamp(0, 1) * 255).round().byte().cpu().numpy())
    return np.concatenate(out)


def load_cache(path: str, decoder: str | None = None, animator: str | None = None, device: str = "cpu") -> Shots:
    z = read_npz(path)
    s_a = torch.from_numpy(z.pop("s_a")) if "s_a" in z else None
    if s_a is None and "f_v" in z:
        if decoder is None:
            raise SystemExit(f"{path} keeps s_a as texts and f_v: give --decoder (the folder gpu_payload.py writes)")
        s_a = rebuild_s_a(z, decoder, device)
    if "drawn" not in z:
        if animator is None or s_a is None:
            raise SystemExit(f"{path} holds no drawing: give --animator (and --decoder) to redraw it")
        anim = SpriteAnimator.from_pretrained(animator).to(device).float().eval()
        z["drawn"] = redraw(anim, z["cutouts"][z["who"]], s_a, z["level"])
    drawn, truth, level = z.pop("drawn"), z.pop("truth"), z.pop("level")
    return Shots(drawn, truth, level, s_a, z)


def residual_std(shots: Shots, chunk: int = 128) -> float:
    """The residual's standard deviation over the cache (EDM's sigma_data), in chunks."""
    n, s, s2 = 0, 0.0, 0.0
    for i in range(0, len(shots.drawn), chunk):
        r = shots.truth[i:i + chunk].astype(np.float64) / 255 - shots.drawn[i:i + chunk].astype(np.float64) / 255
        n, s, s2 = n + r.size, s + r.sum(), s2 + (r ** 2).sum()
    return float(math.sqrt(s2 / n - (s / n) ** 2))


def save_ckpt(run: Path, state: dict) -> None:
    tmp = run / "ckpt.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(run / "ckpt.pt")


def train(shots: Shots, spec: NetSpec, out: str, steps: int, batch: int, lr: float, device: str,
          max_seconds: float, resume: bool) -> None:
    """EDM training (sigma log-normal, P_mean -1.2 at sigma_data 0.5 scaled to ours), EMA 0.995, bf16 autocast on a
    GPU; resumable; stops at ``steps`` or after ``max_seconds`` (then saves)."""
    dev = torch.device(device)
    if spec.kind == "st" and shots.s_a is None:
        raise SystemExit("the st net reads s_a: make the cache with residual_sampler.py cache or carry")
    run = Path(out)
    run.mkdir(parents=True, exist_ok=True)
    drawn, truth = torch.from_numpy(shots.drawn).to(dev), torch.from_numpy(shots.truth).to(dev)
    level = torch.from_numpy(shots.level).long().to(dev)
    s_a = None if shots.s_a is None else shots.s_a.to(dev)
    sigma_data = residual_std(shots)
    model = Denoiser(spec, sigma_data).to(dev)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    step, log = 0, []
    if resume and (run / "ckpt.pt").exists():
        ck = torch.load(run / "ckpt.pt", map_location=dev, weights_only=False)
        model.load_state_dict(ck["model"]); ema.load_state_dict(ck["ema"]); opt.load_state_dict(ck["opt"])
        step, log = ck["step"], ck["log"]
    print(f"{len(drawn)} shots, sigma_data {sigma_data:.4f}, {spec}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, {dev}", flush=True)
    rng, start = np.random.default_rng(step), time.monotonic()
    bar = tqdm(range(step, steps), initial=step, total=steps, desc="residual", mininterval=10)
    for step in bar:
        i = torch.from_numpy(rng.integers(0, len(drawn), batch)).to(dev)
        d = drawn[i].float() / 255
        r = truth[i].float() / 255 - d
        sigma = torch.exp(torch.randn(batch, device=dev) * 1.2 - 1.2) * sigma_data / 0.5
        noisy = r + sigma.view(-1, 1, 1, 1, 1) * torch.randn_like(r)
        with torch.autocast(dev.type, torch.bfloat16, enabled=dev.type == "cuda"):
            pred = model(noisy, sigma, d, level[i], None if s_a is None else s_a[i].float())
        w = (sigma ** 2 + sigma_data ** 2) / (sigma * sigma_data) ** 2
        loss = (w.view(-1, 1, 1, 1, 1) * (pred.float() - r) ** 2).mean()
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100)
        with torch.no_grad():
            for p, q in zip(ema.parameters(), model.parameters()):
                p.lerp_(q, 1 - 0.995)
        log.append(loss.item())
        bar.set_postfix(loss=f"{np.mean(log[-50:]):.3f}")
        done = step + 1 == steps or time.monotonic() - start > max_seconds
        if (step + 1) % 250 == 0 or done:
            save_ckpt(run, {"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                            "step": step + 1, "log": log, "sigma_data": sigma_data, "spec": asdict(spec)})
        if done:
            break
    print(f"stopped at step {step + 1} after {time.monotonic() - start:.0f} s; loss over the last 200 steps "
          f"{np.mean(log[-200:]):.3f} (over the first 200: {np.mean(log[:200]):.3f})", flush=True)


def load(run: str, device: str = "cpu") -> Denoiser:
    """A run folder (its latest checkpoint), a checkpoint file or an ``export`` folder -> its EMA denoiser."""
    p = Path(run)
    if (p / "spec.json").is_file():
        meta = json.loads((p / "spec.json").read_text())
        state = {k: v.float() for f in sorted(p.glob("ema-*.safetensors")) for k, v in load_file(f).items()}
    else:
        meta = torch.load(p if p.is_file() else p / "ckpt.pt", map_location="cpu", weights_only=False)
        state = meta["ema"]
    spec = NetSpec(**{**meta["spec"], "width": tuple(meta["spec"]["width"]), "heads": tuple(meta["spec"]["heads"])}) \
        if "spec" in meta else UNET2D_V1
    model = Denoiser(spec, meta["sigma_data"])
    model.load_state_dict(state)
    return model.to(device).eval()


def export(run: str, out: str, shard_bytes: float = 14e6) -> None:
    """The EMA weights as fp16 shards of at most ``shard_bytes`` (what comes back from a lent machine is limited per
    file) and spec.json; ``load`` reads the folder."""
    ck = torch.load(Path(run) / "ckpt.pt", map_location="cpu", weights_only=False)
    dst = Path(out)
    dst.mkdir(parents=True, exist_ok=True)
    shard, size, n = {}, 0, 0
    for k in sorted(ck["ema"]):
        shard[k] = ck["ema"][k].half().contiguous()
        size += shard[k].numel() * 2
        if size > shard_bytes:
            save_file(shard, dst / f"ema-{n}.safetensors"); shard, size, n = {}, 0, n + 1
    if shard:
        save_file(shard, dst / f"ema-{n}.safetensors")
    (dst / "spec.json").write_text(json.dumps({"spec": ck["spec"], "sigma_data": ck["sigma_data"],
                                               "step": ck["step"], "loss_last_200": float(np.mean(ck["log"][-200:]))}))
    print(f"exported step {ck['step']} to {dst}")


@torch.no_grad()
def sample(model: Denoiser, drawn: torch.Tensor, level: torch.Tensor, s_a: torch.Tensor | None, steps: int,
           gen: torch.Generator) -> torch.Tensor:
    """Heun's sampler over Karras' sigmas (EDM): drawn (B, T, H, W, 4) in [0, 1] -> the sampled shot, clamped,
    premultiplied."""
    sd, dev = model.sigma_data, drawn.device
    smax, smin, rho = 20 * sd, 0.002, 7.0
    t = torch.linspace(0, 1, steps, device=dev)
    sigmas = torch.cat([(smax ** (1 / rho) + t * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho,
                        torch.zeros(1, device=dev)])
    den = lambda x, s: model(x, s.repeat(len(x)), drawn, level, s_a)  # noqa: E731
    x = torch.randn(drawn.shape, generator=gen, device=dev) * sigmas[0]
    for i in range(steps):
        s, s_next = sigmas[i], sigmas[i + 1]
        d = (x - den(x, s)) / s
        x_next = x + (s_next - s) * d
        if s_next > 0:
            x_next = x + (s_next - s) * (d + (x_next - den(x_next, s_next)) / s_next) / 2
        x = x_next
    shot = (drawn + x).clamp(0, 1)
    return torch.cat([torch.minimum(shot[..., :3], shot[..., 3:]), shot[..., 3:]], dim=-1)


def shot_tensors(shots: Shots, idx: np.ndarray, dev: torch.device) -> tuple:
    d = torch.from_numpy(shots.drawn[idx]).to(dev).float() / 255
    r = torch.from_numpy(shots.truth[idx]).to(dev).float() / 255 - d
    s_a = None if shots.s_a is None else shots.s_a[idx].to(dev).float()
    return d, r, torch.from_numpy(shots.level[idx]).long().to(dev), s_a


@torch.no_grad()
def sample_shots(shots: Shots, model: Denoiser, steps: int, seeds: int, out: str, batch: int = 8,
                 per_file: int = 40) -> None:
    """Every shot sampled ``seeds`` times (seed s of a batch: generator 1000 * s + its first shot) -> npz files
    ``out``-0.npz, -1, ... of ``per_file`` shots each (a file that comes back from a device call is at most 16 MiB):
    ``sampled`` (n, seeds, T, H, W, 4) uint8 and ``first``, the index of its first shot; residual_sampler.py measure
    reads them."""
    dev = next(model.parameters()).device
    n = len(shots.drawn)
    for f0 in tqdm(range(0, n, per_file), desc="sample"):
        part = np.zeros((min(per_file, n - f0), seeds, *shots.drawn.shape[1:]), np.uint8)
        for i in range(f0, f0 + len(part), batch):
            idx = np.arange(i, min(i + batch, f0 + len(part)))
            d, _, lv, s_a = shot_tensors(shots, idx, dev)
            for s in range(seeds):
                gen = torch.Generator(dev).manual_seed(1000 * s + i)
                with torch.autocast(dev.type, torch.bfloat16, enabled=dev.type == "cuda"):
                    x = sample(model, d, lv, s_a, steps, gen)
                part[idx - f0, s] = (x.float() * 255).round().byte().cpu().numpy()
        np.savez_compressed(f"{out}-{f0 // per_file}.npz", sampled=part, first=np.array(f0), steps=np.array(steps))
    print(f"{n} shots x {seeds} -> {out}-*.npz")


def read_samples(paths: list[str]) -> np.ndarray:
    """``sample_shots``' files (any order) -> ``sampled`` of all their shots in order."""
    parts = sorted((read_npz(p) for p in paths), key=lambda z: int(z["first"]))
    return np.concatenate([z["sampled"] for z in parts])


@torch.no_grad()
def denoise(shots: Shots, model: Denoiser, every: int, out: str | None) -> None:
    """Can it denoise at all? Every ``every``-th shot's TRUE residual noised at sigma, denoised once: L1 to the residual,
    against the noisy input and against drawing no residual (the regressor alone)."""
    dev = next(model.parameters()).device
    idx = np.arange(0, len(shots.drawn), every)
    d, r, lv, s_a = shot_tensors(shots, idx, dev)
    gen = torch.Generator(dev).manual_seed(0)
    rows = {"shots": len(idx), "no_residual": float(r.abs().mean())}
    print(f"{len(idx)} shots; L1 of no residual (the regressor) {rows['no_residual']:.4f}")
    for s in (0.01, 0.03, 0.1, 0.3, 1.0):
        noisy = r + s * torch.randn(r.shape, generator=gen, device=dev)
        den = torch.cat([model(noisy[i:i + 4], torch.full((len(noisy[i:i + 4]),), s, device=dev), d[i:i + 4],
                               lv[i:i + 4], None if s_a is None else s_a[i:i + 4]) for i in range(0, len(noisy), 4)])
        rows[str(s)] = {"denoised": float((den - r).abs().mean()), "noisy": float((noisy - r).abs().mean())}
        print(f"sigma {s}: L1 denoised {rows[str(s)]['denoised']:.4f}, noisy {rows[str(s)]['noisy']:.4f}")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache", required=True)
    common.add_argument("--decoder", default=None, help="for a carry: E_a and its text table (gpu_payload.py)")
    common.add_argument("--animator", default=None, help="for a carry: the animator that redraws the drawing")
    common.add_argument("--device", default="cpu")
    common.add_argument("--threads", type=int, default=1)
    t = sub.add_parser("train", parents=[common])
    t.add_argument("--net", choices=["st", "unet2d"], default="st")
    t.add_argument("--width", default=None, help="comma-separated block widths (default: the net's)")
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=2e-4)
    t.add_argument("--max-seconds", type=float, default=float("inf"))
    t.add_argument("--out", required=True)
    t.add_argument("--resume", action="store_true")
    for name in ("denoise", "sample"):
        p = sub.add_parser(name, parents=[common])
        p.add_argument("--run", required=True)
        p.add_argument("--out", default=None)
        p.add_argument("--every", type=int, default=8, help="denoise: every n-th shot")
        p.add_argument("--steps", type=int, default=12, help="sample: Heun steps")
        p.add_argument("--seeds", type=int, default=1, help="sample: samples a shot")
    e = sub.add_parser("export")
    e.add_argument("--run", required=True)
    e.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "export":
        export(a.run, a.out)
        return
    torch.set_num_threads(a.threads)
    shots = load_cache(a.cache, a.decoder, a.animator, a.device)
    if a.cmd == "train":
        spec = NetSpec() if a.net == "st" else copy.copy(UNET2D_V1)
        if shots.s_a is not None:
            spec.context = int(shots.s_a.shape[-1])
        if a.width:
            spec.width = tuple(int(w) for w in a.width.split(","))
            spec.heads = tuple(max(1, w // 48) for w in spec.width)  # heads of 48 channels, as the default's
        train(shots, spec, a.out, a.steps, a.batch, a.lr, a.device, a.max_seconds, a.resume)
    elif a.cmd == "denoise":
        denoise(shots, load(a.run, a.device), a.every, a.out)
    else:
        if not a.out:
            ap.error("sample needs --out (the prefix of its files)")
        sample_shots(shots, load(a.run, a.device), a.steps, a.seeds, a.out)


if __name__ == "__main__":
    main()
