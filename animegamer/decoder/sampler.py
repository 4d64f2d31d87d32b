"""Sampling a shot from s_a: the sampler's own settings and a plain function taking a generator.

A few-step DPM-Solver++ (diffusers' ``DPMSolverMultistepScheduler``) with classifier-free guidance,
the conditional and unconditional branches batched in one forward. Its settings (``SamplerConfig``)
are chosen after training, on held-out shots (``animegamer calibrate-levels``), and travel with the
decoder; the noise schedule and the training prior stay in ``DiffusionConfig``.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
from diffusers import DPMSolverMultistepScheduler

from animegamer.decoder.diffusion import DiffusionConfig, draw_noise, frame_mean, level_fractions
from animegamer.decoder.network import DecoderNet

MAX_MOTION_SCALE = 4.0  # motion_scale_by_level: beyond this a shot is noise, not motion


@dataclass
class SamplerConfig:
    steps: int = 6
    guidance: float = 3.0
    # CFG scale for the part of the guidance direction that differs between a shot's video frames (its
    # motion), apart from the part all frames share (the picture): None = ``guidance`` for both, plain
    # CFG. Guidance that sharpens the picture also amplifies frame-to-frame differences, which the flow
    # reads as motion; 1 leaves the motion to the conditional model alone (``guided_velocity``).
    motion_guidance: float | None = None
    autocast: bool = False  # bf16 autocast while sampling (CPU AMX / GPU); fp32 when False
    # The noise prior to sample each motion level from: the shared-noise fraction per level 1..5, chosen
    # on held-out shots so that the flow of the decoded pixels reads the level asked for. None = the
    # prior the decoder was trained with (DiffusionConfig).
    shared_noise_by_level: list[float] | None = None
    # Per motion level 1..5, the sampled latents' frame-to-frame part (each video frame minus the shot's
    # mean frame) is scaled by this before the autoencoder: < 1 damps a calm level's flicker toward the
    # shot's mean picture, which no noise prior achieves. None = 1 everywhere.
    motion_scale_by_level: list[float] | None = None
    # Per-shot motion control (decoder/motion_control.py): a decoded shot whose flow reads another level
    # than asked is decoded again at a corrected motion scale, never above this total scale. None = off.
    motion_control_max_scale: float | None = None
    # Source detail (decoder/source_detail.py): a shot drawn from a real picture (a visual anchor, a
    # player's character) starts from that picture and carries its detail along the decoded shot's
    # flow, past what the autoencoder can draw. False = the decoded pixels alone.
    source_detail: bool = False
    # Flow motion (decoder/flow_motion.py): a shot drawn from a real picture is that picture moved along
    # the flows the decoder's motion network draws from s_a and the level, instead of the picture decoder's
    # pixels. Needs a motion network (``model pack --flow-motion``). False = the picture decoder draws.
    flow_motion: bool = False
    # "dpmsolver++" (deterministic) | "sde-dpmsolver++" (stochastic, its noise from the shot's generator: the
    # published release's VPSDEDPMPP2MSampler)
    solver: str = "dpmsolver++"
    # the CFG scale per step: "constant" = ``guidance``; "cosine" = 1 + guidance (1 - cos(pi (i / steps) ** exp)) / 2
    # at step i = 0.. (from 1 to 1 + guidance); "release" = that formula at i = steps - t, t the step's DDPM
    # timestep, as the release's DynamicCFG is called (its scale then jumps between 1 and 1 + guidance)
    guidance_schedule: str = "constant"
    guidance_exp: float = 5.0

    def __post_init__(self) -> None:
        if self.solver not in ("dpmsolver++", "sde-dpmsolver++"):
            raise ValueError(f"SamplerConfig.solver must be 'dpmsolver++' or 'sde-dpmsolver++', got {self.solver!r}")
        if self.guidance_schedule not in ("constant", "cosine", "release"):
            raise ValueError("SamplerConfig.guidance_schedule must be 'constant', 'cosine' or 'release', "
                             f"got {self.guidance_schedule!r}")
        if self.steps < 1:
            raise ValueError(f"SamplerConfig.steps must be >= 1, got {self.steps}")
        if self.guidance < 0:
            raise ValueError(f"SamplerConfig.guidance must be >= 0, got {self.guidance}")
        if self.motion_guidance is not None and self.motion_guidance < 0:
            raise ValueError(f"SamplerConfig.motion_guidance must be >= 0 or None, got {self.motion_guidance}")
        if self.shared_noise_by_level is not None:
            self.shared_noise_by_level = level_fractions(self.shared_noise_by_level,
                                                         "SamplerConfig.shared_noise_by_level")
        if self.motion_scale_by_level is not None:
            value = [float(r) for r in self.motion_scale_by_level]
            if len(value) != 5 or not all(0.0 <= r <= MAX_MOTION_SCALE for r in value):
                raise ValueError("SamplerConfig.motion_scale_by_level must be 5 values in "
                                 f"[0, {MAX_MOTION_SCALE:g}] (levels 1..5), got {value}")
            self.motion_scale_by_level = value
        m = self.motion_control_max_scale
        if m is not None and not 0.0 < float(m) <= MAX_MOTION_SCALE:
            raise ValueError(f"SamplerConfig.motion_control_max_scale must be in (0, {MAX_MOTION_SCALE:g}] or None, "
                             f"got {m}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SamplerConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"SamplerConfig got unknown fields {sorted(unknown)}")
        return cls(**d)

    def prior(self, diffusion: DiffusionConfig) -> DiffusionConfig:
        """The noise prior ``sample`` draws from: the training one, or this sampler's per-level one."""
        if self.shared_noise_by_level is None:
            return diffusion
        return replace(diffusion, shared_noise_by_level=self.shared_noise_by_level)


def _parse_per_level(text: str, option: str, field: str, allowed: str) -> list[float]:
    """"V1,...,V5" -> five per-level values for SamplerConfig ``field``, checked by its rule. Raises
    ValueError naming ``option`` (a CLI flag) and the ``allowed`` range when the text is not that."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{option} takes 5 comma-separated numbers in {allowed}, got {text!r}") from None
    try:
        SamplerConfig(**{field: values})
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None
    return values


def parse_motion_scales(text: str, option: str) -> list[float]:
    """"S1,S2,S3,S4,S5" -> five per-level motion scales (``motion_scale_by_level``)."""
    return _parse_per_level(text, option, "motion_scale_by_level", f"[0, {MAX_MOTION_SCALE:g}]")


def parse_level_fractions(text: str, option: str) -> list[float]:
    """"R1,R2,R3,R4,R5" -> five shared-noise fractions (levels 1..5)."""
    return _parse_per_level(text, option, "shared_noise_by_level", "[0, 1)")


def make_scheduler(config: DiffusionConfig, solver: str = "dpmsolver++") -> DPMSolverMultistepScheduler:
    return DPMSolverMultistepScheduler(
        **config.schedule_kwargs(), algorithm_type=solver, solver_order=2, timestep_spacing="trailing",
        final_sigmas_type="zero", lower_order_final=True,
    )


def guidance_at(sampler: SamplerConfig, step: int, timestep: float) -> float:
    """The CFG scale of sampling step ``step`` (0-based) at DDPM timestep ``timestep`` (SamplerConfig doc)."""
    if sampler.guidance_schedule == "constant":
        return sampler.guidance
    i = step if sampler.guidance_schedule == "cosine" else sampler.steps - float(timestep)
    ratio = i / sampler.steps
    # a negative ratio (the release's form, early steps) keeps its sign through the odd power, as in Python
    power = math.copysign(abs(ratio) ** sampler.guidance_exp, ratio)
    return 1.0 + sampler.guidance * (1.0 - math.cos(math.pi * power)) / 2.0


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


def scale_motion(x: torch.Tensor, scale: torch.Tensor, frame_groups: int = 1) -> torch.Tensor:
    """Latents (B, F, C', h, w) with their frame-to-frame part (``x - frame_mean(x)``) scaled by
    ``scale`` (B,) per shot: 1 keeps ``x`` exactly, 0 gives every video frame the shot's mean frame."""
    mean = frame_mean(x, frame_groups)
    scale = scale.to(x).reshape(-1, 1, 1, 1, 1)  # (B, 1, 1, 1, 1)
    return torch.where(scale == 1, x, mean + scale * (x - mean))


@torch.no_grad()
def sample(
    net: DecoderNet,
    s_a: torch.Tensor,
    motion_level: torch.Tensor | None,
    generator: torch.Generator | None,
    diffusion: DiffusionConfig,
    sampler: SamplerConfig,
) -> torch.Tensor:
    """Draw latents for s_a (B, N, D): returns RAW autoencoder latents (B, F, C', h, w).

    Guidance <= 1 (and motion guidance <= 1) skips the unconditional branch: one forward per step
    instead of a batch of 2. The initial noise is drawn on the CPU from ``generator`` so results
    match across devices.
    """
    device = s_a.device
    b = s_a.shape[0]
    sched = make_scheduler(diffusion, sampler.solver)
    sched.set_timesteps(sampler.steps)
    if motion_level is not None:
        motion_level = torch.as_tensor(motion_level, device=device).reshape(-1).expand(b)  # (B,)
    elif diffusion.shared_noise_by_level is not None and net.config.use_motion_level:
        # its noise prior is per level: without one the shot would come from a prior it never saw
        raise ValueError("this decoder draws its noise per motion level (shared_noise_by_level): pass a motion level")
    x = draw_noise((b, *net.config.latent_shape), sampler.prior(diffusion), generator,
                   motion_level=motion_level if net.config.use_motion_level else None)
    x = (x * sched.init_noise_sigma).to(device)  # (B, F, C', h, w)
    guidance, motion_guidance = sampler.guidance, sampler.motion_guidance
    dynamic = sampler.guidance_schedule != "constant"
    use_cfg = guidance > 1.0 or (motion_guidance is not None and motion_guidance > 1.0) or (dynamic and guidance > 0)
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
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=sampler.autocast):
            v = net(x_in, ts, cond, motion_level).float()  # (B or 2B, F, C', h, w)
        if use_cfg:
            v_c, v_u = v.chunk(2)
            g = guidance_at(sampler, i, float(t)) if dynamic else guidance
            v = guided_velocity(v_c, v_u, g, motion_guidance, diffusion.noise_frame_groups)  # (B, F, C', h, w)
        x = sched.step(v, t, x, generator=generator).prev_sample  # the SDE solver draws its noise from it
    if sampler.motion_scale_by_level is not None and motion_level is not None:
        scale = torch.tensor(sampler.motion_scale_by_level, device=device)[motion_level[:b] - 1]  # (B,)
        x = scale_motion(x, scale, diffusion.noise_frame_groups)
    return x / diffusion.latent_scale + diffusion.latent_shift  # (B, F, C', h, w)


# The sampler's command-line options, one declaration for every command that sets them (`model pack`
# stores them with a model; `eval-decoder` and `calibrate-levels` sample with them):
# field -> (flags, type, metavar, help).
SAMPLER_OPTIONS: dict[str, tuple[tuple[str, ...], type, str | None, str]] = {
    "guidance": (("--guidance",), float, None, "CFG scale"),
    "motion_guidance": (("--motion-guidance",), float, None, "CFG scale of the frame-to-frame part of the guidance, "
                                                             "apart from --guidance (none = plain CFG)"),
    "steps": (("--sample-steps", "--steps"), int, None, "sampler steps"),
    "shared_noise_by_level": (("--sample-shared-noise",), str, "R1,...,R5",
                              "per-level shared-noise fractions to sample with (`animegamer calibrate-levels sweep`)"),
    "motion_scale_by_level": (("--sample-motion-scale",), str, "S1,...,S5",
                              "per-level scale of the sampled latents' frame-to-frame part (`calibrate-levels sweep "
                              "--knob motion-scale`)"),
    "motion_control_max_scale": (("--motion-control",), float, "MAX_SCALE",
                                 "correct each decoded shot's motion scale (at most MAX_SCALE in all) until its "
                                 "flow reads the level asked for (decoder/motion_control.py; none = off)"),
    "source_detail": (("--source-detail",), str, "on|off",
                      "start a shot drawn from a real picture (a visual anchor, a player's character) from that "
                      "picture, its detail carried along the decoded flow (decoder/source_detail.py)"),
    "flow_motion": (("--flow-motion",), str, "on|off",
                    "draw a shot that starts from a real picture as that picture moved along the flows of the "
                    "decoder's motion network (decoder/flow_motion.py; needs one)"),
}


def add_sampler_arguments(parser: argparse.ArgumentParser, fields: tuple[str, ...] = tuple(SAMPLER_OPTIONS),
                          default: str = "the decoder's own") -> None:
    """Declare the sampler options ``fields`` on ``parser``; each defaults to ``default``."""
    for name in fields:
        flags, kind, metavar, doc = SAMPLER_OPTIONS[name]
        parser.add_argument(*flags, dest=f"sampler_{name}", type=kind, default=None, metavar=metavar,
                            help=f"{doc} (default: {default})")


def sampler_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The SamplerConfig fields the sampler options on the command line set. A malformed per-level
    list raises ValueError naming its option; the values are checked where they are applied."""
    out: dict[str, Any] = {}
    for name, (flags, *_) in SAMPLER_OPTIONS.items():
        value = getattr(args, f"sampler_{name}", None)
        if value is None:
            continue
        if name == "shared_noise_by_level":
            value = parse_level_fractions(value, flags[0])
        elif name == "motion_scale_by_level":
            value = parse_motion_scales(value, flags[0])
        elif name in ("source_detail", "flow_motion"):
            if value not in ("on", "off"):
                raise ValueError(f"{flags[0]} must be 'on' or 'off', got {value!r}")
            value = value == "on"
        out[name] = value
    return out
