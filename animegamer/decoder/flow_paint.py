"""FlowPaint: a decoder that draws each frame after the first as the first frame moved along a flow the network
draws, plus a change it paints (latent-flow diffusion's layout, LFDM, without the diffusion). Not shipped:
measured in docs/framenet.md, where it does not yet draw the character's own motion.

Why this shape (measured, docs/framenet.md): FrameNet, a pixel-space EDM denoiser, needs about 100 x the
training this project's CPU gives in a session before it reads its input, and its one-step estimate is blurred
where the character moves. The true first frame moved along the true flow already names the action in 0.86
of shots against 0.94 for the true shot (docs/results.md), so most of an animated shot is its first picture
rearranged: a flow the network draws keeps every pixel sharp. What the shipped motion network lacks is
the picture: it draws coarse flows from s_a alone (the first frame reaches it only as tokens), smoothed by a
Gaussian, so it cannot know where a leg or an arm is and moves the whole character. Here the first frame is
the network's input, in place; the flow is the camera's move (one vector a frame) plus each 4 x 4 cell's own
(or each pixel's: ``flow_on_grid``), unsmoothed, so a limb can move on its own; the painted change, at full
resolution, draws what no rearrangement of the first picture holds (a hand in front of the face, a page that
opens).

One frame a forward: the frame's index (1..16) is in the embedding with the motion level and the first
frame's noise-augmentation level, s_a in cross-attention at the coarse levels and its mean token in the
embedding, with a small motion latent z. Trained as a conditional VAE (``FlowPaint.forward``), not by
denoising: the flow's target is each true shot's chained DIS flow back to frame 0
(``flow_motion.flows_to_first``), split into the camera's move (the frame's median) and each cell's own, the
picture's target the true frame, so every step teaches every pixel; z is read from the true flows by a small
encoder in training and drawn from N(0, 1) in play. Why z: a plain regression draws the average of what the
inputs allow, and a limb swinging with a phase the network cannot read from the first frame averages to
standing still; that is what the regression learned (docs/framenet.md, FlowPaint).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from animegamer.core.checkpoint import load_json, load_safetensors, run_dir, save_model_dir
from animegamer.decoder.flow_motion import flows_to_first
from animegamer.decoder.frame_net import CrossAttention, ResBlock, fourier, norm

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT = "animegamer-flow-paint"
PAINT_CHANNELS = 3  # the painted change (r, g, b), one per pixel


@dataclass
class FlowPaintConfig:
    frames: int = 17  # frames of a shot, the first one given
    height: int = 96
    width: int = 144
    stem: int = 4  # space-to-depth factor: 96 x 144 -> 24 x 36, lossless
    channels: tuple[int, ...] = (64, 128, 192)  # U-Net widths, one per level (each level halves the grid)
    blocks: int = 2
    attention_from: int = 1  # cross-attention to s_a at levels >= this
    heads: int = 4
    emb_dim: int = 256
    cond_dim: int = 256  # s_a's width (the shipped E_a's)
    levels: int = 5
    flow_scale: float = 8.0  # pixels per unit of the flow output: a wild run moves ~10 px a frame
    # one flow vector per stem x stem cell, upsampled bilinearly (True), or one per pixel (False). The true first
    # frame moved along the true flow sampled at this grid names the action as often as at full resolution
    # (docs/results.md), and a cell's target is the mean of 16 pixels' DIS flow, far less noisy than one pixel's
    flow_on_grid: bool = True
    huber: float = 1.0  # pixels: the flow loss is quadratic below it (mean-seeking), linear above
    cells_floor: float = 0.05  # the cells' loss of a frame is divided by its standing-still loss plus this
    # the motion latent: which of the motions the inputs allow this shot makes (where in its cycle a limb swings,
    # which way the camera pans). Training reads it from the true shot's flows (a small encoder, as a
    # conditional VAE); play draws it from N(0, 1) with the turn's seed. Without it a regression draws the
    # average motion, and a periodic motion of unknown phase averages to standing still (measured:
    # docs/framenet.md, FlowPaint)
    z_dim: int = 8
    kl_weight: float = 1e-3
    # training: share of each loss; the painted change is pulled towards zero so the flow explains what it can
    flow_weight: float = 1.0
    picture_weight: float = 1.0
    paint_weight: float = 0.1
    moving_weight: float = 4.0  # extra weight on pixels that differ from the first frame (the action is there)
    aug_max: float = 0.1  # first-frame noise augmentation: in play a continuing scene starts from a drawn frame
    frames_per_shot: int = 4  # frames drawn per shot and training step

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        unit = self.stem * 2 ** (len(self.channels) - 1)
        if self.frames < 2 or self.height % unit or self.width % unit:
            raise ValueError(f"FlowPaintConfig: frames >= 2 and height, width multiples of {unit}, got "
                             f"{self.frames}, {self.height}x{self.width}")
        if any(c % self.heads or c % 8 for c in self.channels) or self.blocks < 1:
            raise ValueError(f"FlowPaintConfig: channels must be multiples of 8 and of heads, blocks >= 1, got "
                             f"{self.channels}, {self.heads}, {self.blocks}")
        if not 1 <= self.frames_per_shot <= self.frames - 1 or self.flow_scale <= 0:
            raise ValueError(f"FlowPaintConfig: frames_per_shot in 1..{self.frames - 1} and flow_scale > 0, got "
                             f"{self.frames_per_shot}, {self.flow_scale}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"channels": list(self.channels)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FlowPaintConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"FlowPaintConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


FLOW_PAINT_PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tiny": dict(frames=5, height=16, width=16, stem=2, channels=(16, 32), blocks=1, heads=2, emb_dim=32,
                 cond_dim=16, frames_per_shot=2),
}


def flow_paint_preset(name: str, **overrides: Any) -> FlowPaintConfig:
    if name not in FLOW_PAINT_PRESETS:
        raise ValueError(f"unknown FlowPaint preset {name!r}; choose from {sorted(FLOW_PAINT_PRESETS)}")
    return FlowPaintConfig(**{**FLOW_PAINT_PRESETS[name], **overrides})


class Stage(nn.Module):
    """Residual blocks of one U-Net level, each followed by cross-attention to s_a where ``cross``."""

    def __init__(self, c_in: int, c: int, cfg: FlowPaintConfig, cross: bool, n: int) -> None:
        super().__init__()
        self.res = nn.ModuleList(ResBlock(c_in if i == 0 else c, c, cfg.emb_dim) for i in range(n))
        self.cross = nn.ModuleList(CrossAttention(c, cfg.cond_dim, cfg.heads) for _ in range(n)) if cross else None

    def forward(self, x: torch.Tensor, emb: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        for i, res in enumerate(self.res):
            x = res(x, emb)
            if self.cross is not None:
                x = self.cross[i](x, cond)
        return x


class FlowPaintNet(nn.Module):
    """forward(first, s_a, level, index, aug) -> (camera, flow, paint): the flow of frame ``index`` back to the
    first frame as the camera's move (one vector) plus each cell's (or pixel's) own, in flow_scale pixels, and the
    change painted over the moved picture (M, 3, H, W)."""

    def __init__(self, config: FlowPaintConfig) -> None:
        super().__init__()
        self.config = cfg = config
        e, s = cfg.emb_dim, cfg.stem
        self.aug_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.level_emb = nn.Embedding(cfg.levels + 1, e)  # index 0 unused: levels are 1..5
        self.index_emb = nn.Embedding(cfg.frames, e)  # index 0 unused: frame 0 is given
        self.cond_proj = nn.Sequential(nn.LayerNorm(cfg.cond_dim), nn.Linear(cfg.cond_dim, e))
        self.cond_norm = nn.LayerNorm(cfg.cond_dim)
        self.z_proj = nn.Linear(cfg.z_dim, e)
        c0 = cfg.channels[0]
        self.conv_in = nn.Conv2d(3 * s * s, c0, 3, padding=1)
        self.down, self.downsample, self.up, self.up_conv = (nn.ModuleList() for _ in range(4))
        c_prev = c0
        for i, c in enumerate(cfg.channels):
            self.down.append(Stage(c_prev, c, cfg, i >= cfg.attention_from, cfg.blocks))
            last = i == len(cfg.channels) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(c, c, 3, stride=2, padding=1))
            c_prev = c
        self.mid = Stage(c_prev, c_prev, cfg, True, 1)
        for i in reversed(range(len(cfg.channels))):
            c = cfg.channels[i]
            self.up_conv.append(nn.Conv2d(c_prev, c_prev, 3, padding=1))
            self.up.append(Stage(c_prev + c, c, cfg, i >= cfg.attention_from, cfg.blocks))
            c_prev = c
        # the camera's move: one vector per frame from the coarsest features, added to every cell's flow. A pan's
        # direction is a guess from the first frame (which way the character faces, where it stands); kept out
        # of the cells' flow, it does not drown the character's own motion, which is ten times smaller
        self.camera = nn.Linear(cfg.channels[-1], 2)
        nn.init.zeros_(self.camera.weight)
        nn.init.zeros_(self.camera.bias)
        self.norm_out = norm(c0)
        self.flow_channels = 2 if cfg.flow_on_grid else 2 * s * s
        self.conv_out = nn.Conv2d(c0, self.flow_channels + PAINT_CHANNELS * s * s, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)  # starts as the first frame held still
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, first: torch.Tensor, s_a: torch.Tensor, level: torch.Tensor, index: torch.Tensor,
                aug: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.config
        emb = (self.aug_mlp(fourier(aug, cfg.emb_dim)) + self.level_emb(level) + self.index_emb(index)
               + self.cond_proj(s_a.mean(dim=1)) + self.z_proj(z))
        emb = F.silu(emb)  # (M, E)
        cond = self.cond_norm(s_a)  # (M, N, D)
        x = self.conv_in(F.pixel_unshuffle(first, cfg.stem))  # (M, C0, h, w)
        skips = []
        for stage, down in zip(self.down, self.downsample):
            x = stage(x, emb, cond)
            skips.append(x)
            x = down(x)
        x = self.mid(x, emb, cond)
        camera = self.camera(x.mean(dim=(2, 3)))  # (M, 2)
        for stage, conv in zip(self.up, self.up_conv):
            skip = skips.pop()
            if x.shape[-2:] != skip.shape[-2:]:
                x = conv(F.interpolate(x, size=skip.shape[-2:], mode="nearest"))
            x = stage(torch.cat([x, skip], dim=1), emb, cond)
        x = self.conv_out(F.silu(self.norm_out(x)))  # (M, flow + 3 s^2, h, w)
        flow, paint = x[:, :self.flow_channels], F.pixel_shuffle(x[:, self.flow_channels:], cfg.stem)
        if not cfg.flow_on_grid:
            flow = F.pixel_shuffle(flow, cfg.stem)
        return camera, flow, paint  # (M, 2); (M, 2, h, w) or (M, 2, H, W), in flow_scale pixels; (M, 3, H, W)


def flow_targets(frames: np.ndarray, cell: int) -> np.ndarray:
    """uint8 shot (T, H, W, 3) -> fp16 (T-1, H/cell, W/cell, 2): each frame's chained DIS flow back to frame 0
    (``flow_motion.flows_to_first``), the mean over each cell x cell block (cell 1: every pixel's)."""
    flows = flows_to_first(frames)[1:]
    t, h, w, _ = flows.shape
    return flows.reshape(t, h // cell, cell, w // cell, cell, 2).mean(axis=(2, 4)).astype(np.float16)


class MotionEncoder(nn.Module):
    """The posterior of the motion latent in training: a shot's true flows (B, T-1, H, W, 2), averaged over the
    stem's cells -> the mean and log-variance of z (B, z_dim) each. Not used in play."""

    def __init__(self, cfg: FlowPaintConfig, width: int = 64) -> None:
        super().__init__()
        self.cfg = cfg
        c_in = 2 * (cfg.frames - 1)
        self.net = nn.Sequential(nn.Conv2d(c_in, width, 3, padding=1), nn.SiLU(),
                                 nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.SiLU(),
                                 nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.SiLU())
        self.out = nn.Linear(2 * width, 2 * cfg.z_dim)

    def forward(self, flows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = flows.shape[0]
        x = flows.float().permute(0, 1, 4, 2, 3).reshape(b, -1, *flows.shape[2:4]) / self.cfg.flow_scale
        grid = (self.cfg.height // self.cfg.stem, self.cfg.width // self.cfg.stem)
        x = self.net(F.adaptive_avg_pool2d(x, grid)).mean(dim=(2, 3))  # (B, 2 width)
        mean, logvar = self.out(x).chunk(2, dim=1)
        return mean, logvar.clamp(-8, 4)


def warp(picture: torch.Tensor, flow: torch.Tensor, mode: str = "bilinear") -> torch.Tensor:
    """picture (M, 3, H, W) sampled where flow (M, 2, H, W) points (pixels, (dx, dy)): each output pixel
    comes from ``picture`` at its own position plus the flow; sources outside take the nearest edge."""
    m, _, h, w = picture.shape
    ys, xs = torch.meshgrid(torch.arange(h, device=flow.device, dtype=flow.dtype),
                            torch.arange(w, device=flow.device, dtype=flow.dtype), indexing="ij")
    gx = (xs + flow[:, 0]) * (2 / max(w - 1, 1)) - 1  # align_corners=True coordinates in [-1, 1]
    gy = (ys + flow[:, 1]) * (2 / max(h - 1, 1)) - 1
    return F.grid_sample(picture, torch.stack([gx, gy], dim=-1), mode=mode, padding_mode="border",
                         align_corners=True)


class FlowPaint(nn.Module):
    """FlowPaintNet with its training loss (``forward``) and its drawing (``draw``)."""

    def __init__(self, net: FlowPaintNet) -> None:
        super().__init__()
        self.net = net
        self.config = net.config
        self.motion_encoder = MotionEncoder(net.config)  # training only: z from the true flows

    def config_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "net": self.config.to_dict()}

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = torch.float16) -> Path:
        return save_model_dir(directory, self.state_dict(), {"model_config": self.config_dict()}, dtype,
                              WEIGHTS_NAME, CONFIG_NAME)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu") -> "FlowPaint":
        """From a directory with config.json + model.safetensors: a `train flowpaint` run, its final/, or a
        packed decoder's flowpaint/."""
        d = run_dir(path, "FlowPaint", CONFIG_NAME)
        meta = load_json(d / CONFIG_NAME).get("model_config", {})
        if meta.get("format") != FORMAT:
            raise ValueError(f"{d}: not a FlowPaint decoder (format {meta.get('format')!r})")
        model = cls(FlowPaintNet(FlowPaintConfig.from_dict(meta["net"])))
        model.load_state_dict({k: v.float() for k, v in load_safetensors(d / WEIGHTS_NAME).items()})
        return model.to(device).eval()

    def frame(self, first: torch.Tensor, first_seen: torch.Tensor, s_a: torch.Tensor, level: torch.Tensor,
              index: torch.Tensor, aug: torch.Tensor, z: torch.Tensor,
              mode: str = "bilinear") -> tuple[torch.Tensor, ...]:
        """-> (frame, camera move (M, 2) and local flow (grid or full) in pixels, painted change): frame = first moved
        along camera + local flow (upsampled bilinearly to every pixel) + change, in [-1, 1]."""
        camera, flow, change = self.net(first_seen, s_a, level, index, aug, z)
        camera, flow = camera.float() * self.config.flow_scale, flow.float() * self.config.flow_scale
        full = flow if flow.shape[-2:] == first.shape[-2:] else F.interpolate(
            flow, size=first.shape[-2:], mode="bilinear", align_corners=False)
        moved = warp(first, full + camera[:, :, None, None], mode)
        return (moved + change.float()).clamp(-1, 1), (camera, flow), change.float()

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """batch: frames uint8 (B, T, H, W, 3), flows (B, T-1, h, w, 2) to frame 0 in pixels (fp16; at full size,
        or each stem cell's mean: ``flow_targets``), s_a (B, N, D), motion_level (B,). ``frames_per_shot`` random
        frames of each shot are drawn and graded."""
        cfg = self.config
        frames, flows = batch["frames"], batch["flows"]
        b, dev = frames.shape[0], frames.device
        k = cfg.frames_per_shot
        index = torch.stack([torch.randperm(cfg.frames - 1, device=dev)[:k] + 1 for _ in range(b)])  # (B, K)
        shot = torch.arange(b, device=dev)[:, None].expand(b, k)
        target = frames[shot, index].permute(0, 1, 4, 2, 3).float().div(127.5).sub(1).flatten(0, 1)  # (BK, 3, H, W)
        flow_true = flows[shot, index - 1].float().permute(0, 1, 4, 2, 3).flatten(0, 1)  # (BK, 2, H, W)
        first = frames[:, 0].permute(0, 3, 1, 2).float().div(127.5).sub(1)  # (B, 3, H, W)
        aug = torch.rand(b, device=dev) * cfg.aug_max
        seen = first + aug[:, None, None, None] * torch.randn_like(first)
        mean, logvar = self.motion_encoder(flows)  # (B, z_dim) each: which motion this shot makes
        z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
        kl = 0.5 * (mean ** 2 + logvar.exp() - 1 - logvar).sum(dim=1).mean()
        rep = lambda x: x.repeat_interleave(k, dim=0)  # noqa: E731  per shot -> per drawn frame
        drawn, (camera, flow), change = self.frame(rep(first), rep(seen), rep(batch["s_a"].float()),
                                                   rep(batch["motion_level"].long()), index.flatten(), rep(aug), rep(z))
        moving = ((target - rep(first)).abs().amax(dim=1, keepdim=True) > 0.1).float()  # (BK, 1, H, W)
        weight = 1 + cfg.moving_weight * moving
        weight = weight / weight.mean(dim=(1, 2, 3), keepdim=True)
        camera_true = flow_true.flatten(2).median(dim=2).values  # (BK, 2): most of a frame is scenery
        flow_true = flow_true - camera_true[:, :, None, None]
        if flow.shape[-2:] != flow_true.shape[-2:]:  # the target at the drawn flow's grid: each cell's mean
            flow_true = F.adaptive_avg_pool2d(flow_true, flow.shape[-2:])
        flow_weight = F.adaptive_avg_pool2d(weight, flow.shape[-2:])

        def cells_error(f: torch.Tensor) -> torch.Tensor:  # (BK,) Huber in pixels, in flow_scale units
            return (F.huber_loss(f, flow_true, reduction="none", delta=cfg.huber) * flow_weight).mean(dim=(1, 2, 3))

        def flow_error(c: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
            # each frame's cells count by how much better than standing still they are drawn, not by how far
            # its pixels travel: a pan's scenery moves ten times as far as a character's limbs, and counted
            # in pixels it held every step (measured: docs/framenet.md, FlowPaint)
            local = (cells_error(f) / (still + cfg.cells_floor)).mean() * (still + cfg.cells_floor).mean()
            return (local + F.huber_loss(c, camera_true, delta=cfg.huber)) / cfg.flow_scale
        still = cells_error(torch.zeros_like(flow)).detach()  # (BK,)
        flow_loss = flow_error(camera, flow)
        picture_loss = ((drawn - target).abs() * weight).mean()
        paint_loss = change.abs().mean()
        loss = (cfg.flow_weight * flow_loss + cfg.picture_weight * picture_loss + cfg.paint_weight * paint_loss
                + cfg.kl_weight * kl)
        # what drawing no motion at all would cost on the same frames: learning shows as the gap
        return loss, {"loss": float(loss.detach()), "flow": float(flow_loss.detach()), "kl": float(kl.detach()),
                      "flow_still": float(flow_error(torch.zeros_like(camera), torch.zeros_like(flow)).detach()),
                      "picture": float(picture_loss.detach()), "paint": float(paint_loss.detach())}

    @torch.no_grad()
    def draw(self, first: torch.Tensor, s_a: torch.Tensor, level: torch.Tensor,
             generator: torch.Generator | None = None, aug: float = 0.0, mode: str = "bicubic",
             chunk: int = 16) -> torch.Tensor:
        """first (B, 3, H, W) in [-1, 1], s_a (B, N, D), level (B,) -> frames 1..T-1 (B, T-1, 3, H, W) in [-1, 1].
        The motion latent is drawn from N(0, 1) on the CPU from ``generator`` (the only randomness: a seed gives
        the same shot on any device); bicubic in play (a moved picture keeps more of its edges than bilinear)."""
        cfg = self.config
        b, t = first.shape[0], cfg.frames - 1
        z = torch.randn((b, cfg.z_dim), generator=generator).to(first.device)
        index = torch.arange(1, cfg.frames, device=first.device).repeat(b)  # (B*T',)
        rep = lambda x: x.repeat_interleave(t, dim=0)  # noqa: E731
        first_r, s_a_r, level_r, z_r = rep(first), rep(s_a.float()), rep(level.long()), rep(z)
        aug_r = torch.full((b * t,), float(aug), device=first.device)
        out = [self.frame(first_r[i:i + chunk], first_r[i:i + chunk], s_a_r[i:i + chunk], level_r[i:i + chunk],
                          index[i:i + chunk], aug_r[i:i + chunk], z_r[i:i + chunk], mode)[0]
               for i in range(0, b * t, chunk)]
        return torch.cat(out).reshape(b, t, 3, *first.shape[-2:])
