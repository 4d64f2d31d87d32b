"""Where the models run and at what precision: one resolver for every command's --device / --precision.

``device``: "cpu", "cuda", "cuda:N" or "auto" (CUDA when torch sees a GPU, else the CPU).
``precision``: "fp32" (weights and arithmetic in float32), "bf16" (float32 weights, bfloat16 autocast:
what the engine and the sampler support), or None (as the model was saved, except on a processor that
has no bfloat16 arithmetic of its own: there torch emulates it, slower than float32, so fp32;
``default_precision``).
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


BF16_KINDS = {"_is_amx_tile_supported": "AMX", "_is_avx512_bf16_supported": "AVX512-BF16"}  # torch's probes


def cpu_kind() -> str:
    """The processor as the speed figures name it: "AMX", "AVX512-BF16" (bfloat16 in hardware), else torch's
    vector capability ("AVX512", "AVX2", ...), which then emulates bfloat16. torch's probes are private
    functions; a torch without them is taken as without."""
    return next((kind for probe, kind in BF16_KINDS.items() if getattr(torch.cpu, probe, lambda: False)()),
                torch.backends.cpu.get_cpu_capability())


def native_bf16() -> bool:
    """Whether this CPU does bfloat16 arithmetic in hardware (AMX tiles or AVX512-BF16)."""
    return cpu_kind() in BF16_KINDS.values()


def default_precision(device: torch.device, precision: str | None) -> str | None:
    """The precision to play at: the one asked for; else on a CPU without native bfloat16, fp32 (its emulated
    bf16 is slower than fp32); else None (as the model was saved)."""
    if precision is not None or device.type != "cpu" or native_bf16():
        return precision
    return "fp32"


def add_device_arguments(parser: argparse.ArgumentParser, quantize: bool = False) -> None:
    """--device and --precision, the same for every command that plays the models; with ``quantize``
    also --quantize (a local engine backbone loaded in 8 or 4 bits)."""
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: %(default)s)")
    parser.add_argument("--precision", default=None, choices=PRECISIONS,
                        help="fp32, or bf16 autocast (default: as the model was saved; fp32 on a CPU without "
                             "native bf16)")
    if quantize:
        parser.add_argument("--quantize", default=None, choices=QUANTIZE,
                            help="load the engine's local (paper) backbone quantized by bitsandbytes "
                                 "(default: as it was trained)")
