"""How fast a ShotDecoder turns s_a into frames on this machine (recorded by phase a, shown by bench)."""
from __future__ import annotations

import statistics
import time

import torch

from animegamer.core.resources import peak_rss_mb
from animegamer.decoder.pipeline import ShotDecoder, frames_to_uint8


@torch.no_grad()
def bench_decode(
    decoder: ShotDecoder,
    steps: int | None = None,
    guidance: float | None = None,
    n: int = 5,
    autocast: bool | None = None,
    warmup: int = 1,
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds per shot (batch 1) for sampling, autoencoder decode and total; peak RSS (MB)."""
    cfg = decoder.config
    steps = steps or decoder.sampler.steps
    guidance = decoder.sampler.guidance if guidance is None else guidance
    g = torch.Generator().manual_seed(seed)
    s_a = torch.randn(1, cfg.n_tokens, cfg.d_cond, generator=g)
    t_sample, t_decode, t_total = [], [], []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        lat = decoder.sample_latents(s_a, 3, g, steps=steps, guidance=guidance, autocast=autocast)
        t1 = time.perf_counter()
        frames_to_uint8(decoder.decode_latents(lat, autocast=autocast))
        t2 = time.perf_counter()
        if i >= warmup:
            t_sample.append(t1 - t0)
            t_decode.append(t2 - t1)
            t_total.append(t2 - t0)
    return {
        "steps": steps,
        "guidance": guidance,
        "autocast_bf16": bool(decoder.sampler.autocast if autocast is None else autocast),
        "threads": torch.get_num_threads(),
        "sample_s": statistics.median(t_sample),
        "decode_s": statistics.median(t_decode),
        "total_s": statistics.median(t_total),
        "total_min_s": min(t_total),
        "peak_rss_mb": peak_rss_mb(),
    }
