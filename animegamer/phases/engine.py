"""Phase b: train the game engine.

    animegamer train engine --preset tiny|default|paper --data DIR --out DIR [--resume] [--steps N ...]
    animegamer train engine --preset tiny --synthetic 32 --out runs/engine-smoke

Output: ``OUT/final/`` loads with ``animegamer.engine.model.load_engine`` (engine.json +
engine.safetensors: LoRA, new-token embeddings, queries, resamplers only); ``OUT/engine_config.json``
(the engine config, data source, decoder), ``OUT/eval.json`` with ``--eval-sessions K``.

``--data`` is a directory in the engine sessions format (animegamer.engine.data: engine_meta.json,
engine_sessions.jsonl, engine_reps/*.safetensors), i.e. world sessions whose s_a were precomputed
with phase a's E_a. ``--decoder`` names that phase-a checkpoint; it is recorded in the run config
(the s_a must already be precomputed with it). ``--synthetic N`` trains on N synthetic sessions
instead (a smoke run that needs no other phase).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

ENGINE_RUN_CONFIG = "engine_config.json"


# Engine preset (animegamer.engine.model.ENGINE_PRESETS) + TrainConfig fields per preset.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"engine": "tiny", "train": dict(steps=20, batch_size=2, lr=1e-3, warmup_steps=2, log_every=5,
                                             save_every=10, ema_decay=0.0)},
    "default": {"engine": "default", "train": dict(steps=3000, batch_size=2, lr=2e-4, warmup_steps=100,
                                                   weight_decay=0.0, log_every=10, save_every=250, grad_clip=1.0)},
    "paper": {"engine": "paper", "train": dict(steps=20000, batch_size=8, lr=1e-4, warmup_steps=500, weight_decay=0.0,
                                               log_every=20, save_every=500, grad_clip=1.0, mixed_precision="bf16")},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from animegamer.training.cli import add_train_arguments

    add_train_arguments(parser, list(PRESETS), data_required=False)
    parser.add_argument("--decoder", type=Path, help="phase-a checkpoint the s_a were computed with (recorded)")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N", help="train on N synthetic sessions")
    parser.add_argument("--synthetic-turns", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=5, help="longest training sample (history + target)")
    parser.add_argument("--window", type=int, default=None, help="play-time history window (turns)")
    parser.add_argument("--lora-rank", type=int, default=None)
    parser.add_argument("--alpha-mse", type=float, default=None)
    parser.add_argument("--rep-tokens", type=int, default=None, help="N (synthetic only; data dirs carry it)")
    parser.add_argument("--rep-dim", type=int, default=None, help="D (synthetic only; data dirs carry it)")
    parser.add_argument("--llm-path", type=str, default=None, help="local LLM checkpoint for --preset paper")
    parser.add_argument("--eval-sessions", type=int, default=0, help="hold out the last K sessions and evaluate")


def _sessions(args: argparse.Namespace, rep_tokens: int, rep_dim: int, seed: int) -> tuple[list, dict[str, Any]]:
    from animegamer.engine.data import load_sessions, synthetic_sessions

    if args.synthetic:
        return synthetic_sessions(args.synthetic, args.synthetic_turns, rep_tokens, rep_dim, seed=seed), {
            "source": f"synthetic:{args.synthetic}x{args.synthetic_turns}:seed{seed}"}
    if args.data is None:
        raise SystemExit("train engine: pass --data DIR (precomputed engine sessions) or --synthetic N")
    if not (Path(args.data) / "engine_meta.json").is_file():
        raise SystemExit(f"train engine: {args.data} has no engine_meta.json; write the sessions with "
                         f"animegamer.engine.data.save_sessions (s_a precomputed by phase a's E_a)")
    sessions, meta = load_sessions(args.data, limit=args.limit)
    return sessions, {"source": str(args.data), **meta}


def evaluate(engine, sessions: list, closed_loop: bool = False) -> dict[str, Any]:
    """Motion-level accuracy, delta MAE and s_a similarity on whole sessions, per turn index.

    History is the true turns (teacher forcing) or, with ``closed_loop``, the engine's own
    predictions (what a player gets). Uses engine.predict, i.e. the play-time path and window.
    """
    from animegamer.engine.data import turn_record
    from animegamer.engine.sequence import DELTA_FIELDS, TurnRecord

    engine.eval()
    rows = []
    for s in sessions:
        hist: list[TurnRecord] = []
        engine.reset_cache()
        for t, d in enumerate(s):
            true = turn_record(d)
            p = engine.predict(hist, true.instruction, true.states)
            cos = float(torch.nn.functional.cosine_similarity(p.s_a, true.s_a.float(), dim=-1).mean())
            mse = float(((p.s_a - true.s_a.float()) ** 2).mean())
            rows.append({"turn": t, "ml_ok": p.motion_level == true.motion_level,
                         "mae": sum(abs(p.deltas[k] - true.deltas[k]) for k in DELTA_FIELDS) / 3,
                         "cos": cos, "mse": mse, "sec": p.timings["total_s"]})
            hist.append(TurnRecord(true.instruction, p.s_a, p.motion_level, p.deltas) if closed_loop else true)
    if not rows:
        return {}

    def mean(key, rs):
        return sum(float(r[key]) for r in rs) / len(rs)

    per_turn = {}
    for t in sorted({r["turn"] for r in rows}):
        rs = [r for r in rows if r["turn"] == t]
        per_turn[t] = {"cos": mean("cos", rs), "mse": mean("mse", rs), "acc_ml": mean("ml_ok", rs)}
    return {"acc_motion_level": mean("ml_ok", rows), "mae_deltas": mean("mae", rows), "cos": mean("cos", rows),
            "mse": mean("mse", rows), "sec_per_turn": mean("sec", rows), "turns": len(rows), "per_turn": per_turn}


def run(args: argparse.Namespace) -> int:
    from animegamer.engine.data import EngineCollate, EngineDataset
    from animegamer.engine.model import EngineConfig, GameEngine, engine_config
    from animegamer.training.checkpoint import load_json, save_json_atomic
    from animegamer.training.cli import train_config_from_args
    from animegamer.training.loop import train

    preset = PRESETS[args.preset]
    tcfg = train_config_from_args(preset["train"], args)
    out = Path(args.out)
    saved_cfg = out / ENGINE_RUN_CONFIG
    if args.resume and saved_cfg.is_file():  # the run's own engine config wins over the command line
        cfg = EngineConfig.from_dict(load_json(saved_cfg)["engine"])
        sessions, source = _sessions(args, cfg.rep_tokens, cfg.rep_dim, tcfg.seed)
    else:
        over: dict[str, Any] = {"seed": tcfg.seed}
        for key, val in (("window", args.window), ("lora_rank", args.lora_rank), ("alpha_mse", args.alpha_mse),
                         ("backbone_path", args.llm_path), ("rep_tokens", args.rep_tokens), ("rep_dim", args.rep_dim)):
            if val is not None:
                over[key] = val
        if args.lora_rank is not None:
            over["lora_alpha"] = 2.0 * args.lora_rank
        cfg = engine_config(preset["engine"], **over)
        sessions, source = _sessions(args, cfg.rep_tokens, cfg.rep_dim, tcfg.seed)
        if "rep_tokens" in source:  # a data dir fixes N and D
            cfg = engine_config(preset["engine"], **{**over, "rep_tokens": source["rep_tokens"],
                                                     "rep_dim": source["rep_dim"]})
    k = args.eval_sessions
    held, train_sessions = (sessions[len(sessions) - k:], sessions[:len(sessions) - k]) if k else ([], sessions)
    if not train_sessions:
        raise SystemExit("train engine: no training sessions left after --eval-sessions")

    engine = GameEngine(cfg)
    dataset = EngineDataset(train_sessions, engine.builder, max_turns=args.max_turns)
    collate = EngineCollate(engine.vocab["<PAD>"], cfg.rep_tokens)
    n_train = sum(p.numel() for p in engine.trainable_parameters())
    print(f"[engine] preset={args.preset} backbone={cfg.backbone} N={cfg.rep_tokens} D={cfg.rep_dim} "
          f"trainable={n_train / 1e6:.2f}M samples={len(dataset)} from {len(train_sessions)} sessions "
          f"({source['source']})")
    out.mkdir(parents=True, exist_ok=True)
    if not saved_cfg.is_file():
        save_json_atomic({"engine": cfg.to_dict(), "data": source, "max_turns": args.max_turns,
                          "decoder": str(args.decoder) if args.decoder else None,
                          "eval_sessions": args.eval_sessions}, saved_cfg)
    result = train(engine, dataset, collate, tcfg, out, resume=args.resume)
    print(f"[engine] step {result['step']} loss {result['loss']} -> {result['final_dir']}")
    if held:
        ev = evaluate(engine, held)
        save_json_atomic(ev, out / "eval.json")
        print(f"[engine] held-out: acc_ml={ev['acc_motion_level']:.3f} mae_deltas={ev['mae_deltas']:.3f} "
              f"cos={ev['cos']:.3f} sec/turn={ev['sec_per_turn']:.3f}")
    return 0
