"""The diffusion process around ``DecoderNet``: the training loss and the samplers.

- ``Denoiser`` owns the loss: v-prediction (as CogVideoX and the paper) under a DDPM noise schedule
  from diffusers, with 5% condition dropout to the null branch E_a(zeros) so the same network
  serves classifier-free guidance. ``forward(batch) -> (loss, logs)`` for the generic loop.
- ``sample`` is a plain function taking a ``torch.Generator``: a few-step DPM-Solver++ (diffusers'
  ``DPMSolverMultistepScheduler``; ``sampler="ddim"`` for DDIM) with classifier-free guidance, the
  conditional and unconditional branches batched in one forward, optionally dynamic CFG.

The schedule defaults follow CogVideoX (scaled-linear betas 0.00085..0.012, 1000 steps,
zero-terminal-SNR rescaling, "trailing" spacing) because zero terminal SNR + v-prediction +
trailing timesteps is what makes few-step sampling start from pure noise correctly.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler
from torch import nn

from animegamer.decoder.network import DecoderNet

SAMPLERS = ("dpmpp", "ddim")
MAX_MOTION_SCALE = 4.0  # sampling_motion_scale_by_level: beyond this a shot is noise, not motion


@dataclass
class DiffusionConfig:
    num_train_timesteps: int = 1000
    beta_schedule: str = "scaled_linear"
    beta_start: float = 0.00085
    beta_end: float = 0.012
    rescale_betas_zero_snr: bool = True
    cond_dropout: float = 0.05  # paper: 5% of samples train the unconditional (null) branch
    # the autoencoder's latents are normalised to ~unit variance before diffusion: x = (z - shift) * scale
    latent_shift: float = 0.0
    latent_scale: float = 1.0
    # sampling defaults (a measured speed / quality trade-off; see evaluation/bench/decoder.py)
    steps: int = 6
    guidance: float = 3.0
    # CFG scale for the part of the guidance direction that differs between a shot's video frames
    # (its motion), apart from the part all frames share (the picture): None = ``guidance`` for both,
    # plain CFG. Guidance that sharpens the picture also amplifies frame-to-frame differences, which
    # the flow reads as motion; 1 leaves the motion to the conditional model alone while the picture
    # is still guided (see ``guided_velocity``).
    motion_guidance: float | None = None
    dynamic_cfg: bool = False
    sampler: str = "dpmpp"
    autocast: bool = False  # bf16 autocast while sampling (CPU AMX / GPU); fp32 when False
    # Mixed noise prior (PYoCo, Ge et al. 2023): this fraction of the noise variance is ONE draw shared
    # by every frame of a shot, the rest independent per frame, in training and sampling alike. The
    # motion level is measured by optical flow, which reads independent per-frame errors as motion.
    shared_noise: float = 0.0
    # Level-matched noise prior: the shared fraction per motion level 1..5 (5 values, replacing
    # shared_noise for samples whose level is known). Calm shots' frames are nearly the same picture
    # and wild shots' are not, so the prior's frame correlation follows the level the shot is drawn
    # for, in training and sampling alike. None = shared_noise for every level.
    shared_noise_by_level: list[float] | None = None
    # The same fractions for SAMPLING only (training keeps shared_noise_by_level): a calibration chosen
    # per level on held-out shots so that the flow of the decoded pixels reads the level asked for
    # (`animegamer calibrate-levels`, evaluation/level_calibration.py). Each level's fraction acts only
    # on shots drawn for that level. None = sample from the training prior.
    sampling_shared_noise_by_level: list[float] | None = None
    # SAMPLING only, per motion level 1..5: the sampled latents' frame-to-frame part (each video frame
    # minus the shot's mean frame, ``frame_mean``) is scaled by this before the autoencoder. The
    # network flickers at every level (docs/results/frame_diff.md): its level-1 shots have a mean
    # flow of 0.12-0.13 whatever the noise prior, over twice level 1's bound (0.054), so the flow
    # reads level 2 (docs/results/motion_scale.md). A scale < 1 for level 1 damps that flicker toward
    # the shot's mean picture; chosen on held-out shots like the fractions (`calibrate-levels sweep
    # --knob motion-scale`). None = 1 everywhere.
    sampling_motion_scale_by_level: list[float] | None = None
    # how many video frames each latent frame packs in its channels (the kl2d autoencoder's temporal
    # ratio; 1 for an autoencoder that compresses time itself): the shared draw is per video frame
    noise_frame_groups: int = 1
    # Temporal-difference loss (training only; 0 = off, the plain v-loss): adds this weight times the
    # MSE of the frame-to-frame differences of the v prediction, per video frame. Uncorrelated
    # per-frame errors (the flicker the flow reads as motion) pay it in full, an error shared by all
    # frames pays nothing, so it teaches the network to be consistently wrong rather than to flicker.
    frame_diff_loss: float = 0.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not 0.0 <= self.cond_dropout < 1.0:
            raise ValueError(f"DiffusionConfig.cond_dropout must be in [0, 1), got {self.cond_dropout}")
        if self.latent_scale <= 0:
            raise ValueError(f"DiffusionConfig.latent_scale must be > 0, got {self.latent_scale}")
        if self.steps < 1:
            raise ValueError(f"DiffusionConfig.steps must be >= 1, got {self.steps}")
        if self.guidance < 0:
            raise ValueError(f"DiffusionConfig.guidance must be >= 0, got {self.guidance}")
        if self.motion_guidance is not None and self.motion_guidance < 0:
            raise ValueError(f"DiffusionConfig.motion_guidance must be >= 0 or None, got {self.motion_guidance}")
        if not 0.0 <= self.shared_noise < 1.0:
            raise ValueError(f"DiffusionConfig.shared_noise must be in [0, 1), got {self.shared_noise}")
        for name in ("shared_noise_by_level", "sampling_shared_noise_by_level"):
            value = getattr(self, name)
            if value is not None:
                value = [float(r) for r in value]
                if len(value) != 5 or not all(0.0 <= r < 1.0 for r in value):
                    raise ValueError(f"DiffusionConfig.{name} must be 5 values in [0, 1) (levels 1..5), got {value}")
                setattr(self, name, value)
        if self.sampling_motion_scale_by_level is not None:
            value = [float(r) for r in self.sampling_motion_scale_by_level]
            if len(value) != 5 or not all(0.0 <= r <= MAX_MOTION_SCALE for r in value):
                raise ValueError("DiffusionConfig.sampling_motion_scale_by_level must be 5 values in "
                                 f"[0, {MAX_MOTION_SCALE:g}] (levels 1..5), got {value}")
            self.sampling_motion_scale_by_level = value
        if self.frame_diff_loss < 0:
            raise ValueError(f"DiffusionConfig.frame_diff_loss must be >= 0, got {self.frame_diff_loss}")
        if self.noise_frame_groups < 1:
            raise ValueError(f"DiffusionConfig.noise_frame_groups must be >= 1, got {self.noise_frame_groups}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"DiffusionConfig.sampler must be one of {SAMPLERS}, got {self.sampler!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DiffusionConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"DiffusionConfig got unknown fields {sorted(unknown)}")
        return cls(**d)

    def sampling_prior(self) -> "DiffusionConfig":
        """The config whose noise prior ``sample`` draws from: this one, with the sampling fractions
        in place of the training ones when they are set."""
        if self.sampling_shared_noise_by_level is None:
            return self
        return replace(self, shared_noise_by_level=self.sampling_shared_noise_by_level)

    def schedule_kwargs(self) -> dict[str, Any]:
        return dict(
            num_train_timesteps=self.num_train_timesteps,
            beta_schedule=self.beta_schedule,
            beta_start=self.beta_start,
            beta_end=self.beta_end,
            rescale_betas_zero_snr=self.rescale_betas_zero_snr,
            prediction_type="v_prediction",
        )


@dataclass
class DecoderBatch:
    """One training batch of the decoder, read from the precomputed cache (frozen encoders ran once)."""

    latents: torch.Tensor  # (B, F, C', h, w) raw autoencoder latents of the shot
    f_md: torch.Tensor  # (B, n_text, d_t) motion-description token states, padding zeroed
    f_v: torch.Tensor  # (B, n_visual, d_v) vision-tower patch tokens of the FIRST frame
    motion_level: torch.Tensor  # (B,) int64 in 1..5
    # phase c: the engine's PREDICTED s_a (B, N, D), used instead of E_a(f_md, f_v) when given
    s_a: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> "DecoderBatch":
        return DecoderBatch(*(t.to(device) for t in (self.latents, self.f_md, self.f_v, self.motion_level)),
                            s_a=None if self.s_a is None else self.s_a.to(device))

    def __len__(self) -> int:
        return self.latents.shape[0]


def collate_decoder(items: list[dict[str, torch.Tensor]]) -> DecoderBatch:
    return DecoderBatch(
        latents=torch.stack([it["latents"] for it in items]),
        f_md=torch.stack([it["f_md"] for it in items]),
        f_v=torch.stack([it["f_v"] for it in items]),
        motion_level=torch.stack([torch.as_tensor(it["motion_level"]).long() for it in items]),
        s_a=torch.stack([it["s_a"] for it in items]) if "s_a" in items[0] else None,
    )


def _parse_per_level(text: str, option: str, field: str, allowed: str) -> list[float]:
    """"V1,...,V5" -> five per-level values for DiffusionConfig ``field``, checked by its rule. Raises
    ValueError naming ``option`` (a CLI flag) and the ``allowed`` range when the text is not that."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{option} takes 5 comma-separated numbers in {allowed}, got {text!r}") from None
    try:
        DiffusionConfig(**{field: values})
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None
    return values


def parse_motion_scales(text: str, option: str) -> list[float]:
    """"S1,S2,S3,S4,S5" -> five per-level motion scales (``sampling_motion_scale_by_level``)."""
    return _parse_per_level(text, option, "sampling_motion_scale_by_level", f"[0, {MAX_MOTION_SCALE:g}]")


def parse_level_fractions(text: str, option: str) -> list[float]:
    """"R1,R2,R3,R4,R5" -> five shared-noise fractions (levels 1..5), checked by DiffusionConfig's rule."""
    return _parse_per_level(text, option, "shared_noise_by_level", "[0, 1)")


def draw_noise(shape: tuple[int, ...], config: DiffusionConfig, generator: torch.Generator | None = None,
               device: torch.device | str = "cpu", motion_level: torch.Tensor | None = None) -> torch.Tensor:
    """Unit-variance Gaussian noise for latents (B, F, C', h, w) under ``config.shared_noise``, or
    ``config.shared_noise_by_level`` when it is set and ``motion_level`` (B,) in 1..5 is given.

    Drawn on the CPU (from ``generator`` when given) so a seed gives the same shot on every device.
    With shared_noise = 0 this is exactly ``torch.randn(shape, generator=generator)``.
    """
    x = torch.randn(shape, generator=generator, dtype=torch.float32)  # (B, F, C', h, w)
    b, f, c, h, w = shape
    by_level = config.shared_noise_by_level is not None and motion_level is not None
    rho = config.shared_noise
    if by_level:
        levels = torch.as_tensor(motion_level).reshape(-1).expand(b).long().cpu()  # (B,)
        if bool(((levels < 1) | (levels > 5)).any()):
            raise ValueError(f"motion levels must be in 1..5, got {levels.tolist()}")
        rho_b = torch.tensor(config.shared_noise_by_level, dtype=torch.float32)[levels - 1]  # (B,)
    if by_level or rho > 0:
        g = config.noise_frame_groups
        if c % g:
            raise ValueError(f"latent channels {c} not divisible by noise_frame_groups {g}")
        shared = torch.randn((b, 1, c // g, h, w), generator=generator, dtype=torch.float32).repeat(1, f, g, 1, 1)
        if by_level:
            r = rho_b.reshape(b, 1, 1, 1, 1)
            x = (1 - r).sqrt() * x + r.sqrt() * shared  # (B, F, C', h, w)
        else:
            x = math.sqrt(1 - rho) * x + math.sqrt(rho) * shared  # (B, F, C', h, w)
    return x.to(device)


def video_frames(x: torch.Tensor, frame_groups: int = 1) -> torch.Tensor:
    """Latents (B, F, g*C, h, w) packing g video frames each -> one latent per VIDEO frame
    (B, F*g, C, h, w), a view in the packing order of autoencoder.pack_time (channel = j*C + c)."""
    b, f, gc, h, w = x.shape
    if gc % frame_groups:
        raise ValueError(f"latent channels {gc} not divisible by frame_groups {frame_groups}")
    return x.reshape(b, f * frame_groups, gc // frame_groups, h, w)


def frame_differences(x: torch.Tensor, frame_groups: int = 1) -> torch.Tensor:
    """Differences between consecutive VIDEO frames of latents (B, F, g*C, h, w) packing g frames each.

    Returns (B, F*g - 1, C, h, w). The kl2d autoencoder's first latent frame holds g copies of video
    frame 0 (autoencoder.pack_time), so their differences are the copies' disagreement.
    """
    frames = video_frames(x, frame_groups)
    return frames[:, 1:] - frames[:, :-1]


def frame_mean(x: torch.Tensor, frame_groups: int = 1) -> torch.Tensor:
    """The mean over VIDEO frames of latents (B, F, g*C, h, w) packing g frames each, repeated on every
    frame (same shape): the part of ``x`` that all frames share. ``x - frame_mean(x)`` is what differs
    from frame to frame."""
    frames = video_frames(x, frame_groups)
    return frames.mean(1, keepdim=True).expand_as(frames).reshape(x.shape)


def guided_velocity(v_c: torch.Tensor, v_u: torch.Tensor, guidance: float, motion_guidance: float | None,
                    frame_groups: int = 1) -> torch.Tensor:
    """Classifier-free guidance of predictions (B, F, C', h, w): v_u + guidance * (v_c - v_u) when
    ``motion_guidance`` is None. Otherwise the guidance direction is split into its mean over video
    frames, scaled by ``guidance``, and its frame-to-frame remainder, scaled by ``motion_guidance``
    (with 1 that remainder is exactly the conditional prediction's own)."""
    d = v_c - v_u
    if motion_guidance is None:
        return v_u + guidance * d
    shared = frame_mean(d, frame_groups)
    return v_u + guidance * shared + motion_guidance * (d - shared)


def v_target(x0: torch.Tensor, noise: torch.Tensor, alphas_cumprod_t: torch.Tensor) -> torch.Tensor:
    """v = sqrt(a) * eps - sqrt(1 - a) * x0 (Salimans & Ho 2022), a = alpha_bar_t per sample (B,)."""
    a = alphas_cumprod_t.reshape(-1, *([1] * (x0.dim() - 1))).to(x0.dtype)
    return a.sqrt() * noise - (1 - a).sqrt() * x0


class Denoiser(nn.Module):
    """Owns the loss: ``forward(batch) -> (loss, logs)`` with v-prediction and condition dropout."""

    def __init__(self, net: DecoderNet, config: DiffusionConfig | None = None) -> None:
        super().__init__()
        self.net = net
        self.config = config or DiffusionConfig()
        self.noise_schedule = DDPMScheduler(**self.config.schedule_kwargs())

    def normalize(self, latents: torch.Tensor) -> torch.Tensor:
        return (latents - self.config.latent_shift) * self.config.latent_scale

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.config.latent_scale + self.config.latent_shift

    def condition(self, batch: DecoderBatch, dropout: float) -> tuple[torch.Tensor, torch.Tensor]:
        """s_a for the batch, with a ``dropout`` fraction of rows replaced by the null branch."""
        ea = self.net.action_encoder
        s_a = batch.s_a if batch.s_a is not None else ea(batch.f_md, batch.f_v)  # (B, N, D)
        drop = torch.rand(len(batch), device=s_a.device) < dropout  # (B,)
        if dropout > 0 and bool(drop.any()):
            s_a = torch.where(drop[:, None, None], ea.null(len(batch)), s_a)  # (B, N, D)
        return s_a, drop

    def noise_for(self, batch: DecoderBatch, generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise this decoder trains on for ``batch`` (B, F, C', h, w): its own prior, level-matched
        where the level conditions the net (not in the w/o-level ablation). Held-out losses use it too."""
        level = batch.motion_level if self.net.config.use_motion_level else None
        return draw_noise(tuple(batch.latents.shape), self.config, generator, device=batch.latents.device,
                          motion_level=level)

    def forward(
        self, batch: DecoderBatch, timesteps: torch.Tensor | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        x0 = self.normalize(batch.latents.float())  # (B, F, C', h, w)
        b = x0.shape[0]
        if timesteps is None:
            timesteps = torch.randint(0, self.config.num_train_timesteps, (b,), device=x0.device)  # (B,)
        if noise is None:
            noise = self.noise_for(batch)  # (B, F, C', h, w)
        acp = self.noise_schedule.alphas_cumprod.to(x0.device)[timesteps]  # (B,)
        a = acp.reshape(b, 1, 1, 1, 1)
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise  # (B, F, C', h, w)
        target = v_target(x0, noise, acp)  # (B, F, C', h, w)
        s_a, drop = self.condition(batch, self.config.cond_dropout if self.training else 0.0)
        pred = self.net(x_t, timesteps, s_a, batch.motion_level).float()  # (B, F, C', h, w)
        v_loss = F.mse_loss(pred, target.float())
        g = self.config.noise_frame_groups
        diff_loss = F.mse_loss(frame_differences(pred, g), frame_differences(target.float(), g))
        loss = v_loss + self.config.frame_diff_loss * diff_loss if self.config.frame_diff_loss > 0 else v_loss
        logs = {"loss": float(loss.detach()), "v_loss": float(v_loss.detach()),
                "frame_diff_loss": float(diff_loss.detach()), "cond_drop": float(drop.float().mean())}
        return loss, logs


def make_scheduler(config: DiffusionConfig, sampler: str | None = None):
    sampler = sampler or config.sampler
    kw = config.schedule_kwargs()
    if sampler == "dpmpp":
        return DPMSolverMultistepScheduler(
            **kw, algorithm_type="dpmsolver++", solver_order=2, timestep_spacing="trailing",
            final_sigmas_type="zero", lower_order_final=True,
        )
    if sampler == "ddim":
        return DDIMScheduler(**kw, timestep_spacing="trailing", clip_sample=False, set_alpha_to_one=True)
    raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")


def guidance_at(step: int, num_steps: int, guidance: float, dynamic: bool) -> float:
    """CFG weight at sampler step ``step`` (0 = noisiest).

    Dynamic CFG as CogVideoX: a cosine ramp (1 - cos(pi * p^5)) / 2 in the progress p, starting at
    1 (no guidance, where structure forms from noise) and reaching ``guidance`` at the last step.
    (diffusers' CogVideoX pipeline feeds the raw timestep into p; we use the step fraction.)
    """
    if not dynamic or num_steps <= 1:
        return guidance
    p = step / (num_steps - 1)
    return 1.0 + (guidance - 1.0) * (1 - math.cos(math.pi * p**5.0)) / 2


@torch.no_grad()
def sample(
    net: DecoderNet,
    s_a: torch.Tensor,
    motion_level: torch.Tensor | None,
    generator: torch.Generator | None,
    config: DiffusionConfig,
    steps: int | None = None,
    guidance: float | None = None,
    dynamic_cfg: bool | None = None,
    sampler: str | None = None,
    autocast: bool = False,
    motion_guidance: float | None = None,
) -> torch.Tensor:
    """Draw latents for s_a (B, N, D): returns RAW autoencoder latents (B, F, C', h, w).

    ``motion_guidance`` (default: the config's) scales the frame-to-frame part of the guidance
    apart from ``guidance`` (``guided_velocity``). Both <= 1 skip the unconditional branch (one
    forward per step instead of a batch of 2).
    The initial noise is drawn on the CPU from ``generator`` so results match across devices.
    """
    steps = steps or config.steps
    guidance = config.guidance if guidance is None else guidance
    dynamic_cfg = config.dynamic_cfg if dynamic_cfg is None else dynamic_cfg
    motion_guidance = config.motion_guidance if motion_guidance is None else motion_guidance
    device = s_a.device
    b = s_a.shape[0]
    sched = make_scheduler(config, sampler)
    sched.set_timesteps(steps)
    if motion_level is not None:
        motion_level = torch.as_tensor(motion_level, device=device).reshape(-1).expand(b)  # (B,)
    elif config.shared_noise_by_level is not None and net.config.use_motion_level:
        # its noise prior is per level: without one the shot would come from a prior it never saw
        raise ValueError("this decoder draws its noise per motion level (shared_noise_by_level): pass a motion level")
    x = draw_noise((b, *net.config.latent_shape), config.sampling_prior(), generator,
                   motion_level=motion_level if net.config.use_motion_level else None)
    x = (x * sched.init_noise_sigma).to(device)  # (B, F, C', h, w)
    use_cfg = guidance > 1.0 or dynamic_cfg or (motion_guidance is not None and motion_guidance > 1.0)
    cond = s_a
    # The motion level enters BOTH branches (it is part of the timestep embedding, not of s_a):
    # guidance extrapolates s_a only, the null branch is E_a(zeros) as in the paper.
    if use_cfg:
        cond = torch.cat([s_a, net.action_encoder.null(b).to(s_a)])  # (2B, N, D)
        if motion_level is not None:
            motion_level = torch.cat([motion_level, motion_level])  # (2B,)
    for i, t in enumerate(sched.timesteps):
        x_in = sched.scale_model_input(x, t)  # (B, F, C', h, w)
        if use_cfg:
            x_in = torch.cat([x_in, x_in])  # (2B, F, C', h, w)
        ts = t.reshape(1).expand(x_in.shape[0]).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            v = net(x_in, ts, cond, motion_level).float()  # (B or 2B, F, C', h, w)
        if use_cfg:
            v_c, v_u = v.chunk(2)
            w = guidance_at(i, steps, guidance, dynamic_cfg)
            v = guided_velocity(v_c, v_u, w, motion_guidance, config.noise_frame_groups)  # (B, F, C', h, w)
        x = sched.step(v, t, x).prev_sample
    if config.sampling_motion_scale_by_level is not None and motion_level is not None:
        scale = torch.tensor(config.sampling_motion_scale_by_level, device=device)[motion_level[:b] - 1]  # (B,)
        x = scale_motion(x, scale, config.noise_frame_groups)
    return x / config.latent_scale + config.latent_shift  # (B, F, C', h, w)


def scale_motion(x: torch.Tensor, scale: torch.Tensor, frame_groups: int = 1) -> torch.Tensor:
    """Latents (B, F, C', h, w) with their frame-to-frame part (``x - frame_mean(x)``) scaled by
    ``scale`` (B,) per shot: 1 keeps ``x`` exactly, 0 gives every video frame the shot's mean frame."""
    mean = frame_mean(x, frame_groups)
    scale = scale.to(x).reshape(-1, 1, 1, 1, 1)  # (B, 1, 1, 1, 1)
    return torch.where(scale == 1, x, mean + scale * (x - mean))
