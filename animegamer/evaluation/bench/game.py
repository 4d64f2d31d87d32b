"""`animegamer bench`: where a turn's time goes on this machine, through the real game loop.

    result = bench_game("animegamer/weights/default", turns=6, windows=(1, 5))
    print(format_table(result))

Loads a Game, plays one warm-up turn (first-call allocations), then for each engine history
window and with / without KV reuse a fresh session of ``turns`` turns of a fixed instruction
script, into a temporary store. Per turn it records the stages of ``GameSession.step``:
engine predict, diffusion sampling (or the network that draws instead: the motion network, the sprite
animator), autoencoder decode, saving (clip write + store
transaction), and the whole step. Rows report medians over the turns that have history
(turn index >= 1: where the window and the KV cache matter; turn 0 of each session is not
counted). Peak memory is the process's peak RSS (ru_maxrss), RSS after loading is also given; on a
CUDA device also the GPU's peak allocated memory (torch.cuda.max_memory_allocated).

Sampling and decode are timed by wrapping the decoder's ``sample_latents`` / ``decode_latents``
(and its motion network's ``sample_flows``: with flow motion a shot is sampled there and not decoded)
for the duration of the run (the game calls them through ``ShotDecoder.forward``); "without KV
reuse" calls ``engine.predict(..., use_cache=False)`` the same way. Nothing in the models changes.
On a GPU each timed stage waits for the device to finish its kernels (CUDA runs asynchronously, so
without the wait a stage's time would land in whichever stage next reads the result).
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from animegamer.core.devices import cpu_kind, resolve_device
from animegamer.core.resources import current_rss_mb, peak_rss_mb
from animegamer.game.session import Game

# A fixed script in both instruction styles; one character, so it plays with any cast that has Qiqi.
SCRIPT = (
    "Character: Qiqi; Motion: quickly run; Background: day town.",
    "Qiqi sits down on a bench and reads a book",
    "Character: Qiqi; Motion: happily dance; Background: day town.",
    "Qiqi walks slowly towards the station as the sun sets",
    "Character: Qiqi; Motion: wave; Background: sunset station.",
    "Qiqi jumps energetically on the platform",
    "Character: Qiqi; Motion: calmly eat; Background: night station.",
    "Qiqi lies down and falls asleep",
)
STAGES = ("engine_s", "sampling_s", "decode_s", "saving_s", "turn_s")


@contextlib.contextmanager
def wrapped(obj: Any, name: str, wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """Replace ``obj.name`` by ``wrap(obj.name)`` on this instance only, restored on exit."""
    original = getattr(obj, name)
    setattr(obj, name, wrap(original))
    try:
        yield
    finally:
        delattr(obj, name)  # the class attribute shows through again
        if getattr(obj, name) != original:  # the original was itself an instance attribute
            setattr(obj, name, original)


def _timed(sink: list[float]) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable) -> Callable:
        def inner(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if torch.cuda.is_initialized():
                    torch.cuda.synchronize()
                sink.append(time.perf_counter() - t0)
        return inner
    return wrap


def _kept(sink: list[Any]) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable) -> Callable:
        def inner(*a: Any, **k: Any) -> Any:
            out = fn(*a, **k)
            sink.append(out)
            return out
        return inner
    return wrap


def _no_kv_reuse(fn: Callable) -> Callable:
    def inner(*a: Any, **k: Any) -> Any:
        return fn(*a, **{**k, "use_cache": False})
    return inner


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def play_row(game: Game, window: int, kv_reuse: bool, turns: int, seed: int = 0) -> dict[str, Any]:
    """One session of ``turns`` script turns at engine window ``window``; per-turn stage seconds
    and their medians over turns >= 1."""
    engine, decoder = game.engine, game.decoder
    cfg = engine.cfg
    saved = (cfg.window, cfg.slide)
    cfg.window, cfg.slide = int(window), 1
    sampling: list[float] = []
    decoding: list[float] = []
    predictions: list[Any] = []
    per_turn: list[dict[str, float]] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(wrapped(decoder, "sample_latents", _timed(sampling)))
        stack.enter_context(wrapped(decoder, "decode_latents", _timed(decoding)))
        if decoder.animator is not None:  # in layers the sprite animator draws instead (and nothing decodes)
            stack.enter_context(wrapped(decoder.animator, "draw", _timed(sampling)))
        if not kv_reuse:
            stack.enter_context(wrapped(engine, "predict", _no_kv_reuse))
        stack.enter_context(wrapped(engine, "predict", _kept(predictions)))
        try:
            engine.reset_cache()
            session = game.new_session(["Qiqi"], seed=seed)
            for i in range(turns):
                n_s, n_d = len(sampling), len(decoding)
                t0 = time.perf_counter()
                turn = session.step(SCRIPT[i % len(SCRIPT)])
                wall = time.perf_counter() - t0
                tm = turn.timings
                tokens = predictions[-1].timings if predictions and hasattr(predictions[-1], "timings") else {}
                per_turn.append({
                    "turn": i, "engine_s": tm["engine_s"], "sampling_s": sum(sampling[n_s:]),
                    "decode_s": sum(decoding[n_d:]), "saving_s": tm["clip_s"] + tm.get("save_s", 0.0),
                    "turn_s": wall, "history_turns": min(i, window),
                    "computed_tokens": tokens.get("computed_tokens"), "reused_tokens": tokens.get("reused_tokens"),
                })
        finally:
            cfg.window, cfg.slide = saved
            engine.reset_cache()
    measured = [t for t in per_turn if t["turn"] >= 1]
    return {"window": int(window), "kv_reuse": bool(kv_reuse), "turns": turns, "measured_turns": len(measured),
            "median": {k: _median([t[k] for t in measured]) for k in STAGES},
            "median_computed_tokens": _median([t["computed_tokens"] for t in measured
                                               if t["computed_tokens"] is not None]),
            "per_turn": per_turn}


def bench_game(model: str | Path | None = None, turns: int = 6, windows: tuple[int, ...] | None = None,
               threads: int | None = None, kv: tuple[bool, ...] = (True, False), device: str = "cpu",
               precision: str | None = None, quantize: str | None = None) -> dict[str, Any]:
    """The benchmark (see the module doc) of the model in ``model`` (default: the shipped model),
    played into a temporary store."""

    if turns < 2:
        raise ValueError(f"--turns must be >= 2 (turn 0 has no history and is not counted), got {turns}")
    if threads:
        torch.set_num_threads(int(threads))
    rss0 = current_rss_mb()
    on_gpu = resolve_device(device).type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="animegamer-bench-") as tmp:
        t0 = time.perf_counter()
        game = Game.load(model, store=Path(tmp) / "store", device=device, precision=precision, quantize=quantize)
        load_s = time.perf_counter() - t0
        rss_loaded = current_rss_mb()
        k = int(game.engine.cfg.window)
        windows = tuple(dict.fromkeys(int(w) for w in (windows if windows else (1, k))))
        if any(w < 0 for w in windows):
            raise ValueError(f"--windows must be >= 0, got {windows}")
        warm = game.new_session(["Qiqi"], seed=1)
        t0 = time.perf_counter()
        warm.step(SCRIPT[0])
        warmup_s = time.perf_counter() - t0
        rows = [play_row(game, w, use_kv, turns) for w in windows for use_kv in kv]
        dec = game.decoder
        result = {
            "model": game.model_info.get("path", str(model) if model else None),
            "device": game.model_info.get("device"), "precision": game.model_info.get("precision"),
            "quantize": game.model_info.get("quantize"),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "platform": platform.platform(),
            # the kind of processor decides the precision that pays: AMX tiles make bf16 fast, AVX2 emulates it
            "cpu_capability": cpu_kind(), "engine_window": k, "turns_per_row": turns,
            "decoder": {"steps": dec.sampler.steps, "guidance": dec.sampler.guidance,
                        "autocast_bf16": bool(dec.sampler.autocast)},
            "frames_shape": list(warm.turns[0].frames.shape),
            "load_s": load_s, "warmup_turn_s": warmup_s,
            "rss_before_load_mb": rss0, "rss_after_load_mb": rss_loaded, "peak_rss_mb": peak_rss_mb(),
            "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2 ** 20 if on_gpu else None,
            "gpu": torch.cuda.get_device_name() if on_gpu else None,
            "rows": rows,
            "note": "medians over turns with history (turn index >= 1) of one session per row",
        }
    return result


def format_table(result: dict[str, Any]) -> str:
    """A readable table of the rows (seconds, medians over turns with history)."""
    lines = [f"model {result['model']}  |  threads {result['threads']} of {result['cpu_count']} cores "
             f"({result.get('cpu_capability', '?')}), torch {result['torch']}  |  decoder {result['decoder']['steps']} steps, guidance "
             f"{result['decoder']['guidance']}  |  shot {'x'.join(map(str, result['frames_shape']))}",
             f"medians over {result['rows'][0]['measured_turns'] if result['rows'] else 0} turns with history "
             f"(of {result['turns_per_row']} per session, each stage its own median); the model's own window is "
             f"{result['engine_window']}; tokens: engine tokens computed per turn (the rest come from the KV cache)",
             "",
             f"{'window':>6} {'KV reuse':>8} {'engine':>9} {'sampling':>9} {'AE decode':>9} {'saving':>9} "
             f"{'s/turn':>9} {'tokens':>7}"]
    fmt = lambda v: f"{v:9.3f}" if v is not None else f"{'-':>9}"
    for r in result["rows"]:
        m = r["median"]
        tok = r.get("median_computed_tokens")
        lines.append(f"{r['window']:>6} {('yes' if r['kv_reuse'] else 'no'):>8} " + " ".join(fmt(m[k]) for k in STAGES)
                     + (f" {tok:>7.0f}" if tok is not None else f" {'-':>7}"))
    rss = result["rss_after_load_mb"]
    lines += ["", f"peak RSS {result['peak_rss_mb']:.0f} MB" + (f" (after loading: {rss:.0f} MB)" if rss else "")
              + (f"; GPU peak {result['cuda_peak_mb']:.0f} MB on {result['gpu']}" if result.get("cuda_peak_mb") else "")
              + f"; load {result['load_s']:.1f} s, warm-up turn {result['warmup_turn_s']:.2f} s"]
    return "\n".join(lines)
