"""Held-out evaluation of the game engine against issue 4's targets, and "history matters".

    report = evaluate_engine(engine, sessions, n_text=16)      # sessions: load_sessions(...)[0]
    write_report(report, "runs/engine")                        # eval.json + eval_history.png
    evaluate_run("runs/engine", ["runs/engine/sessions/test"])  # the same from disk

Every figure comes from ``GameEngine.predict`` (the play-time path: window, KV cache,
constrained decoding), one held-out session at a time:
* teacher forced (the history is the TRUE turns) at the engine's own window k: motion-level
  accuracy, MAE of the state deltas (mean over social, entertainment, stamina; also per field),
  cosine and MSE of predicted vs true s_a, overall and per turn index;
* closed loop (the history is the engine's own predictions, what a player gets): the same;
* history matters: teacher forced at windows 0 (the current turn only: the public release,
  whose history is off), 1 and k, measured on the VISUAL tokens of s_a (the last n_visual: the
  session's props and outfits are only in the visual history, no instruction names them),
  plus a copy-the-previous-shot baseline. Gains are paired per turn (mean and standard error)
  over turns that have history (turn index >= 1; turn 0 is the same for every window).
s_a similarity is reported in the decoder's space (``cos``, ``mse``) and in the engine's
standardised space (``*_z``: per-(token, dim) z-scores with the training statistics, see
EngineConfig.rep_norm), where the large constant part of E_a's LayerNorm outputs no longer
inflates the cosine; the history comparison uses ``cos_visual_z``.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.ticker import MaxNLocator
from tqdm.auto import tqdm

from animegamer.core.atomic_io import atomic_write_path
from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import ENGINE_CONFIG
from animegamer.engine.data import load_sessions, turn_record
from animegamer.engine.model import load_engine
from animegamer.engine.sequence import DELTA_FIELDS, TurnRecord
from animegamer.world.dataset import WorldDataset
from animegamer.world.level_ceiling import AdditiveLevelModel, LevelTable

TARGETS = {"acc_motion_level": (">=", 0.7), "mae_deltas": ("<=", 0.4)}  # issue 4 (paper: 0.674, 0.424)
HISTORY_METRIC = "cos_visual_z"
S_A_METRICS = ("cos", "mse", "cos_z", "mse_z", "cos_visual", "mse_visual", "cos_visual_z", "mse_visual_z")


def _sim(pred: torch.Tensor, true: torch.Tensor, prefix: str, suffix: str = "") -> dict[str, float]:
    """(n, D) vs (n, D): mean per-token cosine and MSE."""
    return {f"cos{prefix}{suffix}": float(F.cosine_similarity(pred, true, dim=-1).mean()),
            f"mse{prefix}{suffix}": float(((pred - true) ** 2).mean())}


def rep_metrics(engine, pred: torch.Tensor, true: torch.Tensor, n_text: int = 0) -> dict[str, float]:
    """Similarity of one predicted s_a (N, D) to the true one, raw and standardised, all tokens
    and visual tokens (those after the first ``n_text``)."""
    pred, true = pred.float().cpu(), true.float().cpu()
    with torch.no_grad():
        zp, zt = engine.normalize_rep(pred), engine.normalize_rep(true)
    out = {**_sim(pred, true, ""), **_sim(zp, zt, "", "_z")}
    out.update(_sim(pred[n_text:], true[n_text:], "_visual"))
    out.update(_sim(zp[n_text:], zt[n_text:], "_visual", "_z"))
    return out


def play_sessions(engine, sessions: list, window: int | None = None, closed_loop: bool = False,
                  n_text: int = 0, progress: bool = False, desc: str = "eval") -> list[dict[str, Any]]:
    """One row per turn of every session, predicted with ``engine.predict`` at ``window``
    (default: the engine's own) on the true history (or its own, ``closed_loop``)."""

    cfg = engine.cfg
    saved = (cfg.window, cfg.slide)
    if window is not None:
        cfg.window, cfg.slide = int(window), 1
    engine.eval()
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=sum(len(s) for s in sessions), desc=desc, unit="turn", disable=not progress, dynamic_ncols=True)
    try:
        for si, s in enumerate(sessions):
            engine.reset_cache()
            hist: list[TurnRecord] = []
            for t, d in enumerate(s):
                true = turn_record(d)
                p = engine.predict(hist, true.instruction, true.states)
                # state changes a film's annotations left unknown are not graded (those rows lack the mae keys)
                err = {} if true.deltas is None else {k: abs(p.deltas[k] - true.deltas[k]) for k in DELTA_FIELDS}
                rows.append({"session": si, "turn": t, "window": cfg.window, "ml_pred": p.motion_level,
                             "ml_true": true.motion_level, "ml_ok": float(p.motion_level == true.motion_level),
                             "ml_off_by_one": float(abs(p.motion_level - true.motion_level) == 1),
                             **({"mae": sum(err.values()) / len(err)} if err else {}),
                             **{f"mae_{k}": float(v) for k, v in err.items()},
                             **rep_metrics(engine, p.s_a, true.s_a, n_text), "sec": p.timings["total_s"],
                             # the motion text the head chose, where the engine has one and the turn says its own
                             **({"motion_ok": float(p.motion_text == d["motion_text"])}
                                if p.motion_text is not None and d.get("motion_text") else {})})
                hist.append(TurnRecord(true.instruction, p.s_a, p.motion_level, p.deltas, true.states)
                            if closed_loop else true)
                bar.update(1)
    finally:
        bar.close()
        cfg.window, cfg.slide = saved
        engine.reset_cache()
    return rows


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    """Over the rows that have ``key`` (a turn whose state changes are unknown has no mae)."""
    values = [float(r[key]) for r in rows if key in r]
    return sum(values) / len(values) if values else float("nan")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over turns, and per turn index."""
    if not rows:
        return {}
    keys = ["ml_ok", "mae", "mae_social", "mae_entertainment", "mae_stamina", *S_A_METRICS]
    out: dict[str, Any] = {"acc_motion_level": _mean(rows, "ml_ok"), "mae_deltas": _mean(rows, "mae"),
                           **({"acc_motion_text": _mean(rows, "motion_ok")} if any("motion_ok" in r for r in rows) else {}),
                           **{k: _mean(rows, k) for k in keys[2:]}, "sec_per_turn": _mean(rows, "sec"),
                           "turns": len(rows), "sessions": len({r["session"] for r in rows})}
    per_turn = {}
    for t in sorted({r["turn"] for r in rows}):
        rs = [r for r in rows if r["turn"] == t]
        per_turn[str(t)] = {"n": len(rs), "acc_motion_level": _mean(rs, "ml_ok"), "mae_deltas": _mean(rs, "mae"),
                            **{k: _mean(rs, k) for k in S_A_METRICS}}
    out["per_turn"] = per_turn
    # rows = true level 1..5, columns = predicted level 1..5: are the misses next to a quantiser
    # threshold (one level off) or systematic?
    confusion = [[0] * 5 for _ in range(5)]
    for r in rows:
        confusion[int(r["ml_true"]) - 1][int(r["ml_pred"]) - 1] += 1
    out["level_confusion"] = confusion
    out["level_off_by_one"] = _mean(rows, "ml_off_by_one")
    # per turn [session index (in the sessions dir order), turn index, true level, predicted level]: so each
    # miss can be put beside what the turn told the engine (world.level_ceiling.level_key)
    out["levels_per_turn"] = [[int(r["session"]), int(r["turn"]), int(r["ml_true"]), int(r["ml_pred"])] for r in rows]
    return out


def _mean_se(values: list[float]) -> dict[str, float]:
    """Mean and standard error of the mean (nan for no values)."""
    if not values:
        return {"mean": float("nan"), "se": float("nan"), "n": 0}
    m = sum(values) / len(values)
    var = sum((v - m) ** 2 for v in values) / max(len(values) - 1, 1)
    return {"mean": m, "se": math.sqrt(var / len(values)), "n": len(values)}


def _paired_gain(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> dict[str, float]:
    """mean and standard error of a[key] - b[key] over turns with history (turn >= 1), paired."""
    d = [float(x[key]) - float(y[key]) for x, y in zip(a, b) if x["turn"] >= 1]
    return _mean_se(d)


def copy_previous_baseline(engine, sessions: list, n_text: int = 0) -> dict[str, Any]:
    """Predict each turn's s_a as the previous turn's TRUE s_a (turns >= 1): how much of the
    visual content simply carries over."""
    rows = []
    for si, s in enumerate(sessions):
        for t in range(1, len(s)):
            rows.append({"session": si, "turn": t, **rep_metrics(engine, s[t - 1]["s_a"], s[t]["s_a"], n_text)})
    if not rows:
        return {}
    return {**{k: _mean(rows, k) for k in S_A_METRICS},
            "per_turn": {str(t): {k: _mean([r for r in rows if r["turn"] == t], k) for k in S_A_METRICS}
                         for t in sorted({r["turn"] for r in rows})}}


def evaluate_engine(engine, sessions: list, windows: tuple[int, ...] | None = None, closed_loop: bool = True,
                    n_text: int | None = None, progress: bool = False) -> dict[str, Any]:
    """The full report (see the module docstring). ``n_text``: text tokens at the start of s_a
    (None or 0: every token counts as visual, e.g. synthetic sessions)."""
    if not sessions:
        raise ValueError("evaluate_engine: no sessions")
    n_text = int(n_text or 0)
    k = int(engine.cfg.window)
    windows = tuple(sorted({int(w) for w in (windows if windows is not None else (0, 1, k))} | {k}))
    by_window = {w: play_sessions(engine, sessions, w, False, n_text, progress, f"eval window {w}") for w in windows}
    main = summarize(by_window[k])
    report: dict[str, Any] = {
        "window": k, "sessions": len(sessions), "turns": main["turns"], "n_text": n_text,
        "rep_space": "standardised per (token, dim)" if engine.cfg.rep_norm else "raw (rep_norm off)",
        "teacher_forced": main,
    }
    if closed_loop:
        report["closed_loop"] = summarize(play_sessions(engine, sessions, k, True, n_text, progress, "eval closed loop"))
    history: dict[str, Any] = {"metric": HISTORY_METRIC, "windows": list(windows), "per_window": {}}
    for w, rows in by_window.items():
        s = summarize(rows)
        with_hist = [r for r in rows if r["turn"] >= 1]
        history["per_window"][str(w)] = {
            **{m: s[m] for m in ("cos_visual", "mse_visual", "cos_visual_z", "mse_visual_z", "acc_motion_level",
                                 "mae_deltas")},
            "history_turns": {m: _mean(with_hist, m) for m in ("cos_visual_z", "mse_visual_z", "cos_visual")},
            "per_turn": {t: {m: v[m] for m in ("cos_visual", "cos_visual_z", "mse_visual_z")}
                         for t, v in s["per_turn"].items()},
        }
    history["gain"] = {f"window_{k}_vs_{w}": {m: _paired_gain(by_window[k], by_window[w], m)
                                              for m in ("cos_visual_z", "mse_visual_z", "cos_visual")}
                       for w in windows if w != k}
    history["copy_previous"] = copy_previous_baseline(engine, sessions, n_text)
    report["history"] = history
    report["targets"] = {name: {"value": main[name], "target": f"{op} {v}",
                                "met": bool(main[name] >= v if op == ">=" else main[name] <= v)}
                         for name, (op, v) in TARGETS.items()}
    return report


def level_reference(sessions: list, worlds: list[str | None], levels_per_turn: list[list[int]]) -> dict[str, Any]:
    """The motion level beside two references fit on each world's training split
    (``world.level_ceiling``), on the same turns: the lookup table (verb, adverb, tired stamina,
    cast size) and the additive log-flow model that also knows who acts and where ("scene"). Both
    use only what the engine is told; the scene model is the stronger, so it is the one to reach.
    ``worlds[i]``: the world dataset session i was built from (its engine-sessions build meta).
    Returns {"skipped": reason} when a world is not on disk or its rows do not match."""

    refs: dict[str, tuple[LevelTable, AdditiveLevelModel, dict[tuple[int, int], dict[str, Any]]]] = {}
    for w in sorted({w for w in worlds if w is not None}):
        try:
            world = WorldDataset(w)
        except (OSError, ValueError) as e:
            return {"skipped": f"world {w} not readable here: {e}"}
        train = world.split_rows("train")
        refs[w] = (LevelTable(train), AdditiveLevelModel(train),
                   {(int(r["session"]), int(r["turn"])): r for r in world.rows})
    if None in worlds:
        return {"skipped": "some sessions do not name the world dataset they were built from"}
    ok: dict[str, list[float]] = {"engine": [], "table": [], "scene": []}
    per_world: dict[str, dict[str, float]] = {}
    for si, t, true, pred in levels_per_turn:
        w, d = worlds[si], sessions[si][t]
        table, scene, rows = refs[w]
        row = rows.get((int(d.get("session", -1)), int(d.get("turn", -1))))
        if row is None or int(row["motion_level"]) != true or row["split"] == "train":
            return {"skipped": f"session {si} turn {t} is not a held-out turn of {w} with this level"}
        hits = {"engine": pred == true, "table": table.predict(row) == true,
                "scene": int(scene.predict([row])[0]) == true}
        pw = per_world.setdefault(w, {"turns": 0, **{k: 0.0 for k in ok}})
        pw["turns"] += 1
        for k, hit in hits.items():
            ok[k].append(float(hit))
            pw[k] += float(hit)
    for pw in per_world.values():
        for k in ok:
            pw[k] /= pw["turns"]
    return {"turns": len(ok["engine"]), **{k: _mean_se(v) for k, v in ok.items()},
            "engine_minus_table": _mean_se([a - b for a, b in zip(ok["engine"], ok["table"])]),
            "engine_minus_scene": _mean_se([a - b for a, b in zip(ok["engine"], ok["scene"])]),
            "per_world": per_world}


def plot_history(report: dict[str, Any], path: str | Path) -> Path:
    """Per-turn visual-token cosine (standardised) for each window + the copy-previous baseline."""

    matplotlib.use("Agg")

    h = report["history"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in ((axes[0], "cos_visual_z", "cosine, visual tokens (standardised)"),
                              (axes[1], "cos_visual", "cosine, visual tokens (decoder space)")):
        for w, v in h["per_window"].items():
            turns = sorted(v["per_turn"], key=int)
            name = f"window {w}" + (" (current turn only)" if w == "0" else "") + (" = engine" if int(w) == report["window"] else "")
            ax.plot([int(t) for t in turns], [v["per_turn"][t][metric] for t in turns], marker="o", label=name)
        cp = h.get("copy_previous", {}).get("per_turn", {})
        if cp:
            turns = sorted(cp, key=int)
            ax.plot([int(t) for t in turns], [cp[t][metric] for t in turns], "k--", label="copy previous shot")
        ax.set_xlabel("turn index")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"history matters: {report['sessions']} held-out sessions, predicted vs true s_a")
    fig.tight_layout()
    atomic_write_path(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return Path(path)


def write_report(report: dict[str, Any], out_dir: str | Path, name: str = "eval") -> dict[str, Path]:
    """OUT/{name}.json and OUT/{name}_history.png, each written atomically."""

    out_dir = Path(out_dir)
    paths = {"json": out_dir / f"{name}.json", "plot": out_dir / f"{name}_history.png"}
    plot_history(report, paths["plot"])
    save_json_atomic({**report, "plot": paths["plot"].name}, paths["json"])
    return paths


def format_summary(report: dict[str, Any]) -> str:
    m, h = report["teacher_forced"], report["history"]
    lines = [f"held-out {report['sessions']} sessions / {report['turns']} turns, window {report['window']}:",
             f"  teacher forced: acc_ml={m['acc_motion_level']:.3f} mae_deltas={m['mae_deltas']:.3f} "
             f"cos={m['cos']:.3f} cos_z={m['cos_z']:.3f} mse_z={m['mse_z']:.3f} sec/turn={m['sec_per_turn']:.3f}"]
    if "closed_loop" in report:
        c = report["closed_loop"]
        lines.append(f"  closed loop:    acc_ml={c['acc_motion_level']:.3f} mae_deltas={c['mae_deltas']:.3f} "
                     f"cos={c['cos']:.3f} cos_z={c['cos_z']:.3f}")
    for w, v in h["per_window"].items():
        lines.append(f"  window {w}: {HISTORY_METRIC} (turns >= 1) = {v['history_turns']['cos_visual_z']:.4f}")
    for name, g in h["gain"].items():
        c = g["cos_visual_z"]
        lines.append(f"  gain {name}: {c['mean']:+.4f} +- {c['se']:.4f} (n={c['n']})")
    ref = report.get("level_reference")
    if ref and "skipped" not in ref:
        e, t, d = ref["engine"], ref["table"], ref["engine_minus_table"]
        lines.append(f"  motion level on {ref['turns']} turns: engine {e['mean']:.3f} +- {e['se']:.3f}, "
                     f"world lookup table {t['mean']:.3f} +- {t['se']:.3f}, difference {d['mean']:+.3f} +- {d['se']:.3f}")
        if "scene" in ref:  # older reports have the table only
            c, d = ref["scene"], ref["engine_minus_scene"]
            lines.append(f"  the same turns, additive model with characters and place {c['mean']:.3f} +- {c['se']:.3f}, "
                         f"engine minus it {d['mean']:+.3f} +- {d['se']:.3f}")
    elif ref:
        lines.append(f"  motion level beside the world's references: skipped ({ref['skipped']})")
    return "\n".join(lines)


def evaluate_run(engine_dir: str | Path, sessions_dirs: list[str | Path], out_dir: str | Path | None = None,
                 windows: tuple[int, ...] | None = None, closed_loop: bool = True, limit: int | None = None,
                 progress: bool = True) -> dict[str, Any]:
    """Load an engine (a `train engine` run dir or its final/) and held-out engine-sessions dirs,
    evaluate, and write the report to ``out_dir`` (default: the run dir)."""

    p = Path(engine_dir)
    engine_path = p if (p / ENGINE_CONFIG).is_file() else p / "final"
    engine = load_engine(engine_path)
    sessions, n_text, worlds = [], None, []
    for d in sessions_dirs:
        s, meta = load_sessions(d)
        sessions += s
        worlds += [meta.get("build", {}).get("world")] * len(s)
        n_text = meta.get("n_text", n_text)
    sessions, worlds = sessions[:limit], worlds[:limit]
    report = evaluate_engine(engine, sessions, windows, closed_loop, n_text, progress)
    report["level_reference"] = level_reference(sessions, worlds, report["teacher_forced"]["levels_per_turn"])
    report["engine"] = str(engine_path)
    report["data"] = [str(d) for d in sessions_dirs]
    write_report(report, out_dir or (p if p != engine_path else p.parent))
    return report


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of `animegamer eval-engine`."""
    ap.add_argument("engine", help="a `train engine` run dir or its final/")
    ap.add_argument("sessions", nargs="+", help="held-out engine-sessions dirs (e.g. RUN/sessions/test)")
    ap.add_argument("--out", default=None, help="report dir (default: the run dir)")
    ap.add_argument("--windows", default=None, help="comma-separated history windows (default: 0,1,k)")
    ap.add_argument("--no-closed-loop", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="first N sessions only")
    ap.add_argument("--no-progress", action="store_true")


def run(a: argparse.Namespace) -> int:
    """`animegamer eval-engine`: the report, its summary on stdout."""
    windows = tuple(int(w) for w in a.windows.split(",")) if a.windows else None
    report = evaluate_run(a.engine, a.sessions, a.out, windows, not a.no_closed_loop, a.limit, not a.no_progress)
    print(format_summary(report))
    print(json.dumps(report["targets"]))
    return 0
