"""`animegamer bench-long`: does a long game stay as fast and as small as a short one?

    result = bench_long_session(None, turns=200)        # the shipped model
    print(format_long(result))

Plays ONE session of ``turns`` turns (the fixed script of `animegamer bench`, cycled) into a
temporary store, recording per turn the step's wall seconds, its stages, the process's resident
memory after it (RSS now, and the peak so far) and how many turns the session keeps decoded frames
for. Then reopens the game from the store (``Game.open_session``: what `play --open`, the API and
the web page do once the model is loaded; and for the web page, with the view it builds: bars,
history table, timeline thumbnails) and plays one more turn on the reopened copy.

Targets (issue "Play from anywhere"): the median of the last ``edge`` turns within 10% of the
median of the first ``edge`` (turn 0 is left out: it pays first-call allocations), peak RSS growth
from the end of the first ``edge`` turns to the end under 100 MB, and a reopen under 2 s.

``--drift`` (issue "Shots that are drawn, not slid"): the session stays in one place and time of day
(``DRIFT_SCRIPT``: Qiqi doing one thing after another in the town by day), so every scene continues
from what was shown; each shot is graded by the evaluator's frame classifier (is Qiqi named) and its
sharpness. A decoder whose drawn frames become the next shot's first frame can compound its errors;
the target: in the last ``edge`` turns, the share of turns naming Qiqi and the mean sharpness are at
least 0.95 of the first ``edge`` turns'.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import torch
from tqdm import tqdm

from animegamer.core.atomic_io import atomic_write_path, write_json
from animegamer.core.devices import add_device_arguments
from animegamer.core.resources import current_rss_mb, peak_rss_mb
from animegamer.evaluation.bench.game import SCRIPT
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.evaluation.picture import sharpness
from animegamer.game.session import Game, GameSession
from animegamer.game.web import page_view
from animegamer.models.frame_classifier import FrameClassifier

TIME_TOLERANCE = 0.10
DRIFT_KEEP = 0.95  # the last turns keep at least this share of the first turns' character rate and sharpness
DRIFT_SCRIPT = (  # one place and time of day: every turn continues the scene
    "Character: Qiqi; Motion: walk; Background: day town.",
    "Qiqi waves at the passers-by",
    "Qiqi sits down on a bench",
    "Qiqi reads a book on the bench",
    "Qiqi stands up and dances happily",
    "Qiqi eats a rice ball",
    "Qiqi jumps",
    "Qiqi laughs",
)
RSS_GROWTH_MB = 100.0
REOPEN_S = 2.0


def decoded_turns(session: GameSession) -> int:
    """Turns whose frames the session holds in memory (the rest are read back from their clips)."""
    return sum(t._frames is not None for t in session.turns)


def play_long(game: Game, turns: int, seed: int = 0, progress: bool = True,
              grader: FrameClassifier | None = None) -> tuple[GameSession, list[dict[str, Any]]]:
    """One session of ``turns`` script turns; a row per turn (seconds, stages, memory). With ``grader`` the
    session plays ``DRIFT_SCRIPT`` (one place) and each row also holds whether Qiqi is named and the sharpness."""
    script = DRIFT_SCRIPT if grader is not None else SCRIPT
    session = game.new_session(["Qiqi"], seed=seed)
    rows: list[dict[str, Any]] = []
    for i in tqdm(range(turns), desc="long session", unit="turn", disable=not progress):
        t0 = time.perf_counter()
        turn = session.step(script[i % len(script)])
        wall = time.perf_counter() - t0
        rows.append({"turn": i, "turn_s": wall, **{k: round(v, 4) for k, v in turn.timings.items()},
                     "rss_mb": current_rss_mb(), "peak_rss_mb": peak_rss_mb(),
                     "decoded_turns": decoded_turns(session), "first_frame": turn.anchor})
        if grader is not None:
            seen = grader.read_shot(turn.frames, 1)
            rows[-1].update({"qiqi": float(seen["characters"] == ["Qiqi"]), "sharpness": sharpness(turn.frames),
                             "place": seen["place"], "time": seen["time"]})
    return session, rows


def drift(rows: list[dict[str, Any]], edge: int) -> dict[str, Any]:
    """The first and last ``edge`` turns' share naming Qiqi and mean sharpness (turn 0 counted: the scene starts
    there), their ratios, and whether both keep ``DRIFT_KEEP``."""
    first, last = rows[:edge], rows[-edge:]
    out: dict[str, Any] = {"edge": edge}
    for key in ("qiqi", "sharpness"):
        a, b = statistics.fmean(r[key] for r in first), statistics.fmean(r[key] for r in last)
        out.update({f"{key}_first": a, f"{key}_last": b, f"{key}_ratio": b / a if a > 0 else None})
    out["kept"] = all(out[f"{k}_ratio"] is not None and out[f"{k}_ratio"] >= DRIFT_KEEP for k in ("qiqi", "sharpness"))
    return out


def summarise(rows: list[dict[str, Any]], edge: int) -> dict[str, Any]:
    """First / last ``edge`` turns' medians and the memory growth between them, with pass/fail."""
    if len(rows) < 2 * edge + 1:
        raise ValueError(f"--turns must be at least 2 x --edge + 1 = {2 * edge + 1} (turn 0 is not counted), "
                         f"got {len(rows)}")
    first = rows[1:edge + 1]
    last = rows[-edge:]
    m_first = statistics.median(r["turn_s"] for r in first)
    m_last = statistics.median(r["turn_s"] for r in last)
    growth = rows[-1]["peak_rss_mb"] - first[-1]["peak_rss_mb"]
    rss_growth = (rows[-1]["rss_mb"] - first[-1]["rss_mb"]) if rows[-1]["rss_mb"] is not None else None
    return {"edge": edge, "first_median_s": m_first, "last_median_s": m_last, "time_ratio": m_last / m_first,
            "time_flat": abs(m_last / m_first - 1.0) <= TIME_TOLERANCE,
            "peak_rss_growth_mb": growth, "rss_growth_mb": rss_growth, "memory_flat": growth < RSS_GROWTH_MB,
            "max_decoded_turns": max(r["decoded_turns"] for r in rows)}


def bench_long_session(model: str | Path | None = None, turns: int = 200, edge: int = 20,
                       threads: int | None = None, seed: int = 0, progress: bool = True, device: str = "cpu",
                       precision: str | None = None, grade_drift: bool = False) -> dict[str, Any]:
    """The benchmark of the module doc for the model in ``model`` (default: the shipped model); with
    ``grade_drift`` in one place, each shot graded (``drift``)."""
    if threads:
        torch.set_num_threads(int(threads))
    if edge < 1:
        raise ValueError(f"--edge must be >= 1, got {edge}")
    if turns < 2 * edge + 1:
        raise ValueError(f"--turns must be at least 2 x --edge + 1 = {2 * edge + 1} (turn 0 is not counted), "
                         f"got {turns}")
    with tempfile.TemporaryDirectory(prefix="animegamer-bench-long-") as tmp:
        t0 = time.perf_counter()
        game = Game.load(model, store=Path(tmp) / "store", device=device, precision=precision)
        load_s = time.perf_counter() - t0
        rss_loaded = current_rss_mb()
        grader = FrameClassifier.from_pretrained(FrameClassifier.find(DEFAULT_EVALUATOR)) if grade_drift else None
        session, rows = play_long(game, turns, seed=seed, progress=progress, grader=grader)
        t0 = time.perf_counter()
        reopened = game.open_session(session.id)
        reopen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        page_view(game, reopened, "")  # what the web page builds on "Open saved game": bars, history, timeline
        web_reopen_s = time.perf_counter() - t0 + reopen_s
        t0 = time.perf_counter()
        after = reopened.step(SCRIPT[turns % len(SCRIPT)])
        reopened_turn_s = time.perf_counter() - t0
        summary = summarise(rows, edge)
        if grade_drift:
            summary["drift"] = drift(rows, edge)
        summary.update({"reopen_s": reopen_s, "web_reopen_s": web_reopen_s,
                        "reopen_fast": max(reopen_s, web_reopen_s) < REOPEN_S,
                        "reopened_turn_s": reopened_turn_s, "reopened_turn_index": after.index})
        store_mb = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file()) / 1e6
    return {"model": game.model_info.get("path"), "device": game.model_info.get("device"),
            "precision": game.model_info.get("precision"), "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "platform": platform.platform(), "turns": turns,
            "engine_window": int(game.engine.cfg.window), "load_s": load_s, "rss_after_load_mb": rss_loaded,
            "store_mb": store_mb, "summary": summary, "per_turn": rows}


def format_long(result: dict[str, Any]) -> str:
    s = result["summary"]

    def ok(b: bool) -> str:
        return "ok" if b else "NOT MET"

    e = s["edge"]
    rss = f"{s['rss_growth_mb']:.1f} MB" if s["rss_growth_mb"] is not None else "n/a"
    head = (f"model {result['model']}  |  {result['turns']} turns, engine window {result['engine_window']}  |  "
            f"threads {result['threads']} of {result['cpu_count']} cores, torch {result['torch']}")
    time_line = (f"seconds per turn, median of turns 1-{e}: {s['first_median_s']:.3f}; of the last {e}: "
                 f"{s['last_median_s']:.3f}; ratio {s['time_ratio']:.3f} (within {TIME_TOLERANCE:.0%}: "
                 f"{ok(s['time_flat'])})")
    memory = (f"peak RSS growth after turn {e}: {s['peak_rss_growth_mb']:.1f} MB (under {RSS_GROWTH_MB:.0f} MB: "
              f"{ok(s['memory_flat'])}); RSS now minus then: {rss}; turns held decoded in memory: at most "
              f"{s['max_decoded_turns']}")
    reopen = (f"reopen {s['reopen_s']:.3f} s, in the web page {s['web_reopen_s']:.3f} s (under {REOPEN_S:.0f} s: "
              f"{ok(s['reopen_fast'])}); the reopened game's next turn {s['reopened_turn_s']:.3f} s; store {result['store_mb']:.1f} MB; load {result['load_s']:.1f} s")
    lines = [head, time_line, memory, reopen]
    if "drift" in s:
        d = s["drift"]
        lines.append(f"drift, one place: Qiqi named in {d['qiqi_first']:.2f} of the first {d['edge']} turns, "
                     f"{d['qiqi_last']:.2f} of the last; sharpness {d['sharpness_first']:.0f} -> {d['sharpness_last']:.0f} "
                     f"(ratio {d['sharpness_ratio']:.3f}; both kept at >= {DRIFT_KEEP}: {ok(d['kept'])})")
    return "\n".join(lines)


def plot_long(results: dict[str, dict[str, Any]], path: str | Path) -> Path:
    """Seconds per turn and resident memory over the game, one line per labelled result."""
    matplotlib.use("Agg")
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4))
    for i, (label, result) in enumerate(results.items()):
        rows = result["per_turn"]
        x = [r["turn"] for r in rows]
        t = [r["turn_s"] for r in rows]
        k = 9  # a running median shows the trend through the machine's noise
        smooth = [statistics.median(t[max(0, j - k // 2): j + k // 2 + 1]) for j in range(len(t))]
        ax_t.plot(x, t, color=f"C{i}", alpha=0.25, lw=0.8)
        ax_t.plot(x, smooth, color=f"C{i}", label=f"{label} (running median of {k})")
        ax_m.plot(x, [r["rss_mb"] for r in rows], color=f"C{i}", label=f"{label}: RSS")
        ax_m.plot(x, [r["peak_rss_mb"] for r in rows], color=f"C{i}", ls="--", label=f"{label}: peak RSS")
    ax_t.set(xlabel="turn", ylabel="seconds per turn", title="time per turn")
    ax_m.set(xlabel="turn", ylabel="MB", title="memory of the process")
    ax_t.legend(fontsize=8)
    ax_m.legend(fontsize=8)
    fig.tight_layout()
    out = atomic_write_path(Path(path), lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of `animegamer bench-long`."""
    ap.add_argument("--model", default=None, metavar="PATH",
                    help="model directory with engine/ and shot_decoder/ (default: the shipped model)")
    ap.add_argument("--turns", type=int, default=200, help="turns of the session (default: %(default)s)")
    ap.add_argument("--edge", type=int, default=20,
                    help="compare the medians of turns 1..EDGE and of the last EDGE turns (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=0, help="the session's seed (default: %(default)s)")
    add_device_arguments(ap)
    ap.add_argument("--out", default=None, metavar="FILE.json", help="also write the result (with every turn) as JSON")
    ap.add_argument("--plot", default=None, metavar="FILE.png", help="also plot seconds per turn and memory")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the summary")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--drift", action="store_true",
                    help="stay in one place and grade every shot: do the character and sharpness hold? (module doc; "
                         "try --turns 50 --edge 10)")


def run(a: argparse.Namespace) -> int:
    """`animegamer bench-long`: exit 1 when a target is not met."""
    result = bench_long_session(a.model, turns=a.turns, edge=a.edge, threads=a.threads, seed=a.seed,
                                progress=not a.no_progress, device=a.device, precision=a.precision,
                                grade_drift=a.drift)
    if a.out:
        write_json(a.out, result)
    if a.plot:
        plot_long({"this run": result}, a.plot)
    print(json.dumps(result, indent=1) if a.json else format_long(result))
    s = result["summary"]
    return 0 if s["time_flat"] and s["memory_flat"] and s["reopen_fast"] and s.get("drift", {}).get("kept", True) else 1
