"""What a training run holds in memory, and the switch that trades compute for activations.

``memory_estimate`` counts the bytes of a phase's state from its parameters, as the loop trains them
(fp32 weights, gradients and AdamW's two moments for the trained parameters, an fp32 EMA copy where
EMA is on, the frozen ones at their own dtype). Activations are not counted: they depend on the batch
and the shot size, and ``enable_gradient_checkpointing`` is what bounds them at paper scale. Both are
printed at the start of a run and kept in its run_config.json (docs/SCALING.md).
"""
from __future__ import annotations

from typing import Any

from torch import nn

# per trained parameter: fp32 weight 4 + fp32 gradient 4 + AdamW exp_avg 4 + exp_avg_sq 4
TRAINED_BYTES = 16
EMA_BYTES = 4


def memory_estimate(module: nn.Module, trained: set[int], ema: bool = False) -> dict[str, Any]:
    """Bytes of weights, gradients, optimizer state and EMA of ``module`` on each process (data
    parallel: every rank holds all of it). ``trained``: the ids of the parameters the optimizer
    updates; the others are frozen."""
    seen: set[int] = set()
    n_trained = n_frozen = frozen_bytes = 0
    for p in module.parameters():
        if id(p) in seen:  # tied weights count once
            continue
        seen.add(id(p))
        if id(p) in trained:
            n_trained += p.numel()
        else:
            n_frozen += p.numel()
            frozen_bytes += p.numel() * p.element_size()
    per_trained = TRAINED_BYTES + (EMA_BYTES if ema else 0)
    total = n_trained * per_trained + frozen_bytes
    return {"trained_params": n_trained, "frozen_params": n_frozen, "bytes_per_trained_param": per_trained,
            "frozen_bytes": frozen_bytes, "total_bytes": total,
            "text": f"{total / 1e9:.2f} GB = {n_trained / 1e6:.1f} M trained x {per_trained} B + "
                    f"{n_frozen / 1e6:.1f} M frozen ({frozen_bytes / 1e9:.2f} GB); activations not counted"}


def enable_gradient_checkpointing(module: nn.Module) -> list[str]:
    """Switch on gradient checkpointing in every part of ``module`` whose library supports it (diffusers'
    models: the CogVideoX transformer, the autoencoders; transformers' models: the LLM, the text and
    vision encoders). Activations inside those blocks are recomputed in the backward pass instead of
    kept. Returns the names of the parts switched on; a ValueError when there is none, since the flag
    would then change nothing."""
    done: list[str] = []
    for name, m in module.named_modules():
        if getattr(m, "_supports_gradient_checkpointing", False) and hasattr(m, "enable_gradient_checkpointing"):
            m.enable_gradient_checkpointing()  # diffusers ModelMixin
            done.append(name or type(m).__name__)
        elif getattr(m, "supports_gradient_checkpointing", False) and hasattr(m, "gradient_checkpointing_enable"):
            # non-reentrant: a frozen backbone under LoRA has inputs that need no grad
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            done.append(name or type(m).__name__)
    if not done:
        raise ValueError(f"gradient checkpointing: no part of {type(module).__name__} supports it")
    return done
