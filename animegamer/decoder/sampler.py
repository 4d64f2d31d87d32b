"""Sampling a shot from s_a: the sampler's own settings and a plain function taking a generator.

A few-step DPM-Solver++ (diffusers' ``DPMSolverMultistepScheduler``) with classifier-free guidance,
the conditional and unconditional branches batched in one forward. Its settings (``SamplerConfig``)
travel with the decoder; the noise schedule and the training prior stay in ``DiffusionConfig``.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from diffusers import DPMSolverMultistepScheduler

from animegamer.decoder.diffusion import DiffusionConfig, draw_noise
from animegamer.decoder.network import DecoderNet

# Sampler fields of earlier versions, for the picture decoder's fixes that the layered decoder superseded
# (docs/history.md, "The slid stack"): a saved decoder that still names them loads without them.
RETIRED_FIELDS = ("motion_guidance", "shared_noise_by_level", "motion_scale_by_level", "motion_control_max_scale",
                  "source_detail", "flow_motion")


@dataclass
class SamplerConfig:
    """How the picture decoder samples a shot; the defaults are the shipped decoder's, but ``autocast``, which
    ``Game.load`` sets per processor (bf16 only where the hardware has it)."""

    steps: int = 6
    guidance: float = 2.0
    autocast: bool = False  # bf16 autocast while sampling (CPU AMX / GPU); fp32 when False
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SamplerConfig":
        d = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"SamplerConfig got unknown fields {sorted(unknown)}")
        return cls(**d)


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

    Guidance <= 1 skips the unconditional branch: one forward per step
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
    x = draw_noise((b, *net.config.latent_shape), diffusion, generator,
                   motion_level=motion_level if net.config.use_motion_level else None)
    x = (x * sched.init_noise_sigma).to(device)  # (B, F, C', h, w)
    guidance = sampler.guidance
    dynamic = sampler.guidance_schedule != "constant"
    use_cfg = guidance > 1.0 or (dynamic and guidance > 0)
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
            v = v_u + g * (v_c - v_u)  # (B, F, C', h, w)
        x = sched.step(v, t, x, generator=generator).prev_sample  # the SDE solver draws its noise from it
    return x / diffusion.latent_scale + diffusion.latent_shift  # (B, F, C', h, w)


# The sampler's command-line options, one declaration for every command that sets them (`model pack`
# stores them with a model; `eval-decoder` samples with them): field -> (flags, type, metavar, help).
SAMPLER_OPTIONS: dict[str, tuple[tuple[str, ...], type, str | None, str]] = {
    "guidance": (("--guidance",), float, None, "CFG scale"),
    "steps": (("--sample-steps", "--steps"), int, None, "sampler steps"),
}


def add_sampler_arguments(parser: argparse.ArgumentParser, fields: tuple[str, ...] = tuple(SAMPLER_OPTIONS),
                          default: str = "the decoder's own") -> None:
    """Declare the sampler options ``fields`` on ``parser``; each defaults to ``default``."""
    for name in fields:
        flags, kind, metavar, doc = SAMPLER_OPTIONS[name]
        parser.add_argument(*flags, dest=f"sampler_{name}", type=kind, default=None, metavar=metavar,
                            help=f"{doc} (default: {default})")


def sampler_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The SamplerConfig fields the sampler options on the command line set."""
    return {name: value for name in SAMPLER_OPTIONS
            if (value := getattr(args, f"sampler_{name}", None)) is not None}
