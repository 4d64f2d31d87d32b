"""Engine time per turn and memory: ``benchmark_engine("default", windows=(1, 5))``.

Plays synthetic sessions through ``GameEngine.predict`` feeding back its own s_a (as the game
does) and reports the median seconds per turn with and without KV reuse, split into turns whose
cache could be reused and turns where the window slid (full recompute), plus peak RSS.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from animegamer.core.resources import peak_rss_mb
from animegamer.engine.data import synthetic_sessions
from animegamer.engine.model import GameEngine, engine_config, load_engine
from animegamer.engine.sequence import TurnRecord


def benchmark_engine(preset: str = "default", windows: tuple[int, ...] = (1, 5), turns: int = 10,
                     slides: tuple[int, ...] = (1,), bf16: bool = False, engine_dir: str | None = None,
                     merge: bool = False, threads: int | None = None, **overrides: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    if engine_dir:
        engine = load_engine(engine_dir, autocast_bf16=bf16)
    else:
        engine = GameEngine(engine_config(preset, autocast_bf16=bf16, **overrides)).eval()
    if threads:
        torch.set_num_threads(threads)
    if merge:
        engine.merge_lora(True)
    out: dict[str, Any] = {"build_s": time.perf_counter() - t0, "preset": preset, "bf16": bf16, "merged": merge,
                           "threads": torch.get_num_threads(),
                           "rep_tokens": engine.cfg.rep_tokens, "rep_dim": engine.cfg.rep_dim, "runs": []}
    s = synthetic_sessions(1, turns, engine.cfg.rep_tokens, engine.cfg.rep_dim, seed=0)[0]
    for window in windows:
        for slide in slides:
            if slide > max(window, 1):
                continue
            engine.cfg.window, engine.cfg.slide = window, slide
            for use_cache in (True, False):
                engine.reset_cache()
                hist: list[TurnRecord] = []
                reuse_t, full_t, tokens, computed, cpu = [], [], [], [], []
                for d in s:
                    c0 = time.process_time()  # CPU seconds: robust on a shared, oversubscribed machine
                    p = engine.predict(hist, d["instruction"], d["states"], use_cache=use_cache)
                    c1 = time.process_time()
                    hist.append(TurnRecord(d["instruction"], p.s_a, p.motion_level, p.deltas))
                    if p.timings["history_turns"] == 0:
                        continue  # first turn: nothing to reuse either way
                    (reuse_t if p.timings["reused_tokens"] > 0 else full_t).append(p.timings["total_s"])
                    tokens.append(p.timings["computed_tokens"] + p.timings["reused_tokens"])
                    computed.append(p.timings["computed_tokens"])
                    cpu.append(c1 - c0)
                allt = reuse_t + full_t
                med = lambda v: statistics.median(v) if v else None
                out["runs"].append({
                    "window": window, "slide": slide, "kv_reuse": use_cache,
                    "median_s_per_turn": med(allt), "median_cpu_s_per_turn": med(cpu),
                    "median_s_reused_turns": med(reuse_t), "median_s_recomputed_turns": med(full_t),
                    "median_computed_tokens": med(computed), "max_context_tokens": max(tokens) if tokens else 0,
                })
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of `animegamer bench-engine`."""
    ap.add_argument("--preset", default="default")
    ap.add_argument("--engine", default=None, help="a trained engine directory instead of a fresh preset")
    ap.add_argument("--windows", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--slides", type=int, nargs="+", default=[1])
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("--bf16", action="store_true")


def run(a: argparse.Namespace) -> int:
    """`animegamer bench-engine`: the engine's seconds per turn as JSON."""
    print(json.dumps(benchmark_engine(a.preset, tuple(a.windows), a.turns, tuple(a.slides), a.bf16, a.engine,
                                      a.merge, a.threads), indent=1))
    return 0
