"""Where the models run and at what precision: one resolver for every command's --device / --precision.

``device``: "cpu", "cuda", "cuda:N" or "auto" (CUDA when torch sees a GPU, else the CPU).
``precision``: "fp32" (weights and arithmetic in float32), "bf16" (float32 weights, bfloat16 autocast:
what the engine and the sampler support), or None (as the model was saved).
"""
from __future__ import annotations

import argparse

import torch

from animegamer.core.errors import UserFacingError

PRECISIONS = ("fp32", "bf16")
QUANTIZE = ("8bit", "4bit")


class DeviceError(ValueError, UserFacingError):
    """A device that is not here or a precision that does not exist."""


def resolve_device(name: str | torch.device | None = "cpu") -> torch.device:
    if isinstance(name, torch.device):
        return name
    name = (name or "cpu").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceError(f"unknown device {name!r}: use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"--device {name}: torch sees no CUDA GPU on this machine (use cpu or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    elif device.type != "cpu":
        raise DeviceError(f"--device {name}: only cpu and cuda are supported")
    return device


def check_precision(precision: str | None) -> str | None:
    if precision is not None and precision not in PRECISIONS:
        raise DeviceError(f"unknown precision {precision!r}: use {' or '.join(PRECISIONS)}")
    return precision


def add_device_arguments(parser: argparse.ArgumentParser, quantize: bool = False) -> None:
    """--device and --precision, the same for every command that plays the models; with ``quantize``
    also --quantize (a local engine backbone loaded in 8 or 4 bits)."""
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: %(default)s)")
    parser.add_argument("--precision", default=None, choices=PRECISIONS,
                        help="fp32, or bf16 autocast (default: as the model was saved)")
    if quantize:
        parser.add_argument("--quantize", default=None, choices=QUANTIZE,
                            help="load the engine's local (paper) backbone quantized by bitsandbytes "
                                 "(default: as it was trained)")
