"""`animegamer eval`: play held-out world sessions through the game and grade every turn.

    report = run_eval(EvalConfig("runs/eval", world=held_out_world(sessions=20), evaluator="runs/clip_eval",
                                 ablations=[("no adaptation", "models/no_adapt")], window_ablations=[1]))

Held-out data. Without ``data`` the world renders ``sessions`` fresh sessions at a seed no
training run uses (default 9000) into OUT/world, every one planned as the "test" split, i.e.
with the 15 paraphrase templates held out of training. With ``data`` the test split of that
world is used.

Playing. Each system plays each session exactly as a player would: ``Game.new_session`` with
the session's characters, its true start states and a per-session seed shared by every system
(paired comparisons), then ``GameSession.step`` on each true instruction. The history is the
game's own (closed loop): what the engine predicted and the decoder drew, never the truth.

Systems. The model (``--model``), the same model with another engine history window
(``--window-ablation W``), and any other model directory (``--ablation NAME=DIR``): a decoder
without adaptation, a GC text-only baseline, ... -- a baseline is just another model dir.
Two reference rows need no model: the ground truth graded like a generated shot (the
evaluator's ceiling for the zero-shot and text columns) and a shuffled truth (each turn shown
the true shot of another session: the floor of the image columns).

Per turn (see ``Scorer.score``): CLIP-I, CLIP-T, PSNR / SSIM (a DreamSim stand-in), ACC-F from
the generated pixels and from the engine's level, MAE-F of the state deltas, MAE of the
absolute states, zero-shot character / place / prop-colour probes, prop keep and consecutive
similarity on turns that stay in the same place, seconds per turn and per stage.

Each system's turn rows are saved to OUT/systems/<name>.jsonl with a fingerprint of what
produced them; a rerun with the same fingerprint reuses them (``fresh=True`` replays).
"""
from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.atomic_io import write_json, write_jsonl
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator, probes, recorded_tower_hashes
from animegamer.evaluation.metrics import (
    align_clips,
    mean_abs_error,
    motion_level_from_pixels,
    new_content,
    pixel_scores,
)
from animegamer.evaluation.picture import read_picture
from animegamer.evaluation.report import write_outputs
from animegamer.evaluation.systems import (
    GROUND_TRUTH,
    MAIN,
    SHUFFLED,
    SystemResult,
    SystemSpec,
    jsonable,
    slug,
)
from animegamer.game.session import DEFAULT_WEIGHTS, Game, SessionStore, turn_seed
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset
from animegamer.world.flow import MotionQuantizer

DEFAULT_SEED = 9000  # held-out world seed: the training data uses 0, the motion-level fit 1000


def parse_ablation(text: str) -> tuple[str, str]:
    """``NAME=MODEL_DIR`` -> (name, dir)."""
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ValueError(f"--ablation takes NAME=MODEL_DIR (e.g. 'no adaptation=runs/model_noadapt'), got {text!r}")
    return name.strip(), path.strip()


# -- held-out world ------------------------------------------------------------------------------
def held_out_world(sessions: int = 20, turns: int = 5, seed: int = DEFAULT_SEED, height: int = 96, width: int = 144,
                   frames: int = 17) -> RenderConfig:
    """The held-out sessions `eval` renders: every one planned as the "test" split (held-out templates)."""
    if sessions < 1:
        raise ValueError(f"--sessions must be >= 1, got {sessions}")
    return RenderConfig(sessions=sessions, turns=turns, seed=seed, height=height, width=width, frames=frames,
                        workers=1, split="test")


@dataclass
class EvalConfig:
    """What `animegamer eval` plays, where it writes, and on what (its command-line options)."""

    out: str | Path
    model: str | None = None  # the model directory (None: the shipped one)
    data: str | None = None  # a world dataset whose test split is played; None: render ``world`` into OUT/world
    world: RenderConfig = field(default_factory=held_out_world)
    evaluator: str | None = None  # a `train clip` run (None: the shipped evaluator, if there)
    actions: str | None = None  # an action classifier (None: the one beside the evaluator)
    ablations: list[tuple[str, str]] = field(default_factory=list)  # (name, model dir) played on the same turns
    window_ablations: list[int] = field(default_factory=list)  # the model again with these history windows
    contact_turns: int = 8
    fresh: bool = False  # replay systems whose graded turns OUT already holds
    progress: bool = True
    command: str | None = None  # the command line, recorded in the report
    device: str = "cpu"
    precision: str | None = None


def prepare_world(out: Path, data: str | Path | None, render: RenderConfig, progress: bool = True
                  ) -> tuple[WorldDataset, list[list[dict[str, Any]]]]:
    """(WorldDataset, the first ``render.sessions`` held-out sessions as lists of turn rows): ``data``'s test
    split, or ``render``'s sessions rendered into OUT/world (reused when it holds them)."""
    sessions = render.sessions
    if data is not None:
        world = WorldDataset(data)
        held = world.sessions("test")
        if not held:
            raise ValueError(f"{data} has no test-split sessions; render a held-out world with `animegamer eval "
                             "--seed S` (no --data) instead")
        if len(held) < sessions:
            print(f"[eval] {data} has only {len(held)} test sessions (asked for {sessions})")
        return world, held[:sessions]
    root = out / "world"
    if (root / "meta.json").exists():
        world = WorldDataset(root)
        m = world.meta
        want = {"seed": render.seed, "sessions": sessions, "max_turns": render.turns, "height": render.height,
                "width": render.width, "frames": render.frames, "split": render.split}
        got = {k: m.get(k) for k in want}
        if got != want:
            raise FileExistsError(f"{root} holds another held-out world ({got}, asked for {want}); "
                                  "choose another --out or delete it")
    else:
        render_dataset(render, root, progress=progress)
        world = WorldDataset(root)
    return world, world.sessions("test")[:sessions]


# -- scoring -------------------------------------------------------------------------------------
class Scorer:
    """Grades one shot against its true turn (pixels, flow, evaluator probes) and carries what
    the next turn of the session needs (shot embedding, probe answers) for prop keep."""

    def __init__(self, world: WorldDataset, evaluator: Evaluator | None) -> None:
        self.world = world
        self.evaluator = evaluator
        self.quantizer = MotionQuantizer.load()
        self._true_emb: dict[tuple[str, int], torch.Tensor] = {}
        self._true_read: dict[tuple[str, int], dict[str, Any]] = {}  # the frame classifier's reading

    def true_frames(self, row: dict[str, Any]) -> np.ndarray:
        return self.world.frames(row)

    def _embed_true(self, row: dict[str, Any], aligned: np.ndarray) -> torch.Tensor:
        key = (row["shot"], len(aligned))
        if key not in self._true_emb:
            self._true_emb[key] = self.evaluator.embed_frames(aligned)
        return self._true_emb[key]

    def score(self, gen: np.ndarray, row: dict[str, Any], prev: dict[str, Any] | None,
              true: np.ndarray | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metrics of ``gen`` for the turn ``row``, context for the session's next turn).
        ``prev``: the context returned for the previous turn of the same session (None at turn 0)."""
        true = self.true_frames(row) if true is None else true
        g, t = align_clips(gen, true)
        level, mag = motion_level_from_pixels(gen, self.quantizer)
        m: dict[str, Any] = {**pixel_scores(g, t), "ml_pixels": level, "flow": mag,
                             "acc_f_pixels": float(level == int(row["motion_level"])),
                             "new_content": new_content(gen)}
        ctx: dict[str, Any] = {"place": row["place"], "props": list(row.get("props") or [])}
        continued = (prev is not None and not row.get("place_changed", True) and prev["place"] == row["place"]
                     and prev["props"] == ctx["props"])
        ev = self.evaluator
        if ev is None:
            return m, ctx
        if ev.actions is not None:
            m["action_acc"] = float(ev.actions.predict(g) == row["motion"])
        if ev.frames is not None:
            key = (row["shot"], len(t))
            if key not in self._true_read:
                self._true_read[key] = ev.frames.read_shot(t, len(row["characters"]))
            m.update(read_picture(ev.frames, g, t, row, self._true_read[key]))
        eg = ev.embed_frames(g)  # (T, E)
        et = self._embed_true(row, t)
        m["clip_i"] = float((eg * et).sum(-1).mean())
        m["clip_t"] = float((eg @ ev.caption_embeddings([row["caption"]])[0]).mean())
        shot = ev.shot_embedding(eg)
        answers: dict[str, str] = {}
        prop_ok = []
        for p in probes(row):
            a = ev.answer(shot, p)
            answers[p.attribute] = p.labels[a]
            if p.attribute == "character":
                m["char_acc"] = float(a == p.answer)
            elif p.attribute == "place":
                m["place_acc"] = float(a == p.answer)
            else:
                prop_ok.append(float(a == p.answer))
        m["prop_acc"] = float(np.mean(prop_ok)) if prop_ok else None
        if continued:
            keys = [k for k in answers if k.startswith("prop:") and k in prev.get("answers", {})]
            m["prop_keep"] = float(np.mean([answers[k] == prev["answers"][k] for k in keys])) if keys else None
            if not row.get("time_changed", True):
                m["consec_sim"] = float(shot @ prev["shot"])
        ctx.update(shot=shot, answers=answers)
        return m, ctx


# -- playing ---------------------------------------------------------------------------------------
def session_characters(rows: list[dict[str, Any]]) -> list[str]:
    """Every character the session's instructions name, protagonist first (a partner may join later)."""
    return list(dict.fromkeys(c for r in rows for c in r["characters"]))


def play_system(game: Game, spec: SystemSpec, sessions: list[list[dict[str, Any]]], scorer: Scorer, world_seed: int,
                progress: bool = True) -> list[dict[str, Any]]:
    """Play every session through ``game`` (GameSession.step, closed loop) and grade every turn."""

    engine = game.engine
    cfg = engine.cfg
    saved = (cfg.window, cfg.slide)
    if spec.window is not None:
        cfg.window, cfg.slide = int(spec.window), 1
    out: list[dict[str, Any]] = []
    bar = tqdm(total=sum(len(s) for s in sessions), desc=f"eval {spec.name}", unit="turn", disable=not progress,
               dynamic_ncols=True)
    try:
        for rows in sessions:
            if hasattr(engine, "reset_cache"):
                engine.reset_cache()
            session = game.new_session(session_characters(rows), seed=turn_seed(world_seed, rows[0]["session"]),
                                       states=dict(rows[0]["states_before"]))
            prev = None
            for row in rows:
                t0 = time.perf_counter()
                turn = session.step(row["instruction"])
                sec = time.perf_counter() - t0
                m, prev = scorer.score(turn.frames, row, prev)
                out.append({
                    "system": spec.name, "session": row["session"], "turn": row["turn"],
                    "instruction": row["instruction"], "place_changed": row.get("place_changed"),
                    "ml_true": int(row["motion_level"]), "ml_engine": int(turn.motion_level),
                    "acc_f_engine": float(turn.motion_level == int(row["motion_level"])),
                    "mae_f": mean_abs_error(turn.deltas, row["deltas"]),
                    "mae_states": mean_abs_error(turn.states, row["states_after"]),
                    "deltas": dict(turn.deltas), "states": dict(turn.states), **m, "sec": sec,
                    **{k: float(v) for k, v in turn.timings.items()},
                    "game_session": session.id, "video": str(turn.video_path), "anchor": turn.anchor,
                    "anchor_distance": turn.anchor_distance, "time_changed": row.get("time_changed"),
                    "frames_shape": list(turn.frames.shape),
                })
                bar.update(1)
    finally:
        bar.close()
        cfg.window, cfg.slide = saved
        if hasattr(engine, "reset_cache"):
            engine.reset_cache()
    return out


def reference_rows(sessions: list[list[dict[str, Any]]], scorer: Scorer) -> dict[str, list[dict[str, Any]]]:
    """The ground truth graded as if generated (trivial image columns blanked) and the shuffled
    truth: session i shown the true shots of session i+1 (same turn index, clamped)."""
    truth, shuffled = [], []
    for i, rows in enumerate(sessions):
        prev = None
        for row in rows:
            m, prev = scorer.score(scorer.true_frames(row), row, prev)
            for k in ("psnr", "ssim", "ms_ssim", "clip_i"):  # identical clips: 100 % by construction, not informative
                m[k] = None
            truth.append({"system": GROUND_TRUTH, "session": row["session"], "turn": row["turn"], **m})
        if len(sessions) < 2:
            continue
        other = sessions[(i + 1) % len(sessions)]
        for row in rows:
            o = other[min(row["turn"], len(other) - 1)]
            m, _ = scorer.score(scorer.true_frames(o), row, None)
            shuffled.append({"system": SHUFFLED, "session": row["session"], "turn": row["turn"],
                             "shown": [o["session"], o["turn"]], **m})
    out = {GROUND_TRUTH: truth}
    if shuffled:
        out[SHUFFLED] = shuffled
    return out


# -- orchestration ---------------------------------------------------------------------------------
def _model_stamp(model: str | None) -> dict[str, Any]:
    root = Path(model).expanduser() if model else DEFAULT_WEIGHTS
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    return {"path": str(root.resolve()), "mtime_ns": max((p.stat().st_mtime_ns for p in files), default=0),
            "files": len(files)}


def _fingerprint(spec: SystemSpec, world: WorldDataset, sessions: list[list[dict[str, Any]]], evaluator: Evaluator | None,
                 device: str = "cpu", precision: str | None = None) -> dict:
    # where and at what precision the models played, only when not the CPU as saved (older runs stay reusable)
    placed = {**({"device": device} if device != "cpu" else {}), **({"precision": precision} if precision else {})}
    return {**placed, "model": _model_stamp(spec.model), "window": spec.window, "world": str(world.root.resolve()),
            "world_seed": world.meta.get("seed"), "sessions": [s[0]["session"] for s in sessions],
            "turns": [len(s) for s in sessions], "evaluator": evaluator.weights_hash if evaluator else None,
            "actions": evaluator.actions.weights_hash if evaluator and evaluator.actions else None,
            "frames": evaluator.frames_hash if evaluator and evaluator.frames else None, "version": 3}


def _load_cached(out: Path, spec: SystemSpec, fp: dict) -> list[dict[str, Any]] | None:
    meta, rows_path = out / "systems" / f"{slug(spec.name)}.json", out / "systems" / f"{slug(spec.name)}.jsonl"
    if not (meta.is_file() and rows_path.is_file()):
        return None
    try:
        if json.loads(meta.read_text()).get("fingerprint") != json.loads(json.dumps(fp)):
            return None
        rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    except ValueError:
        return None
    if not all(Path(r["video"]).is_file() for r in rows):
        return None
    return rows


def _save_rows(out: Path, spec: SystemSpec, fp: dict, rows: list[dict[str, Any]]) -> None:
    write_jsonl(out / "systems" / f"{slug(spec.name)}.jsonl", [jsonable(r) for r in rows])
    write_json(out / "systems" / f"{slug(spec.name)}.json", {"system": spec.name, "fingerprint": fp})


def _open_game(spec: SystemSpec, store: Path, main_models: tuple | None, device: str = "cpu",
               precision: str | None = None) -> Game:
    st = SessionStore(store)
    for old in st.list_sessions():  # a replay starts from an empty store (our own directory)
        st.delete_session(old.id)
    if main_models is not None:
        engine, decoder, info = main_models
        return Game.from_models(engine, decoder, st, model_info=info)
    return Game.load(spec.model, store=st, device=device, precision=precision)


def build_systems(model: str | None, ablations: list[tuple[str, str]], window_ablations: list[int]) -> list[SystemSpec]:
    """The main model, its window ablations, then the other model directories."""
    specs = [SystemSpec(MAIN, model, None, "model", "the model under test, its own history window")]
    for w in window_ablations:
        if w < 0:
            raise ValueError(f"--window-ablation must be >= 0, got {w}")
        specs.append(SystemSpec(f"window {w}", model, int(w), "window",
                                "the same model, engine history window " + (
                                    "0 (current turn only)" if w == 0 else str(w))))
    for name, path in ablations:
        if not Path(path).expanduser().is_dir():
            raise FileNotFoundError(f"--ablation {name}={path}: no such model directory")
        specs.append(SystemSpec(name, path, None, "ablation", f"model dir {path}"))
    names = [s.name for s in specs] + [GROUND_TRUTH, SHUFFLED]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"system names must be unique, got {sorted(dup)} twice")
    return specs


def run_eval(cfg: EvalConfig) -> dict[str, Any]:
    """Play, grade and report (OUT/eval.json, eval.md, eval.png, contact_sheet.png); returns the report.
    ``cfg.device`` / ``cfg.precision``: where the systems play (core/devices.py); the grading runs on the CPU."""

    out, model, device, precision, progress = Path(cfg.out), cfg.model, cfg.device, cfg.precision, cfg.progress
    specs = build_systems(model, list(cfg.ablations), list(cfg.window_ablations))
    t_start = time.perf_counter()
    main_game = Game.load(model, store=out / "games" / slug(MAIN), device=device,  # fails fast, before any rendering
                          precision=precision)
    world, held = prepare_world(out, cfg.data, cfg.world, progress)
    world_seed = int(world.meta.get("seed", cfg.world.seed))
    ev_path = cfg.evaluator or (DEFAULT_EVALUATOR if DEFAULT_EVALUATOR.is_dir() else None)
    ev = Evaluator.load(ev_path, cfg.actions) if ev_path else None
    warnings: list[str] = []
    if ev is None:
        warnings.append("no evaluator (--evaluator CLIP_RUN): CLIP-I, CLIP-T and the zero-shot columns are empty")
    else:
        for spec in specs:
            if ev.weights_hash in recorded_tower_hashes(spec.model or main_game.model_info.get("path")):
                warnings.append(f"the evaluator {ev.path} is the vision tower {spec.name} was trained with: "
                                "its CLIP columns grade the model with its own encoder")
    scorer = Scorer(world, ev)
    info = dict(main_game.model_info)
    main_models: tuple | None = (main_game.engine, main_game.decoder, info)
    del main_game
    results: list[SystemResult] = []
    for spec in specs:
        fp = _fingerprint(spec, world, held, ev, device, precision)
        cached = None if cfg.fresh else _load_cached(out, spec, fp)
        if cached is not None:
            print(f"[eval] {spec.name}: reusing {len(cached)} graded turns from {out / 'systems'}")
            results.append(SystemResult(spec, cached, reused=True))
            continue
        if spec.kind == "ablation" and main_models is not None:
            main_models = None  # the main model is done (windows come first): free it before loading another
            gc.collect()
        game = _open_game(spec, out / "games" / slug(spec.name), main_models if spec.kind != "ablation" else None,
                          device, precision)
        rows = play_system(game, spec, held, scorer, world_seed, progress)
        _save_rows(out, spec, fp, rows)
        results.append(SystemResult(spec, rows))
        del game
        gc.collect()
    refs = reference_rows(held, scorer)
    report = write_outputs(out, results, refs, world, held, ev, warnings, cfg.contact_turns,
                           command=cfg.command, seconds=time.perf_counter() - t_start)
    return report
