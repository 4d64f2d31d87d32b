"""Phase b: train the game engine.

    animegamer train engine --preset default --data WORLD_DIR --decoder DECODER_RUN [--clip CLIP_RUN] --out DIR
    animegamer train engine --preset tiny|default|paper --data SESSIONS_DIR --out DIR [--resume] [--steps N ...]
    animegamer train engine --preset tiny --synthetic 32 --out runs/engine-smoke

``--data`` is either
* a world dataset (``animegamer world render``; meta.json with format animegamer-world): the s_a
  of every turn's true shot is computed once with phase a's representation (``--decoder``: the
  `train decoder` run, its E_a; ``--clip``: the vision tower, default the one the decoder run
  was trained with; MiniLM for the motion text) into ``OUT/sessions/{train,val,test}``
  (resumable, reused by later runs and by ``--resume``; see animegamer.training.engine_sessions).
  The engine trains on the train split and is evaluated on the held-out ``--eval-split``
  sessions (held-out paraphrase templates included);
* or a prepared engine-sessions directory (animegamer.engine.data.save_sessions), whose s_a were
  precomputed with the ``--decoder`` named (recorded only); ``--eval-sessions K`` then holds out
  its last K sessions.
``--synthetic N`` trains on N synthetic sessions instead (a smoke run that needs no other phase).

s_a is standardised per (token, dim) inside the engine with the training sessions' statistics
(EngineConfig.rep_norm, ``--no-rep-norm`` to turn off); predictions come out in the decoder's space.
Where the data record how their s_a were made (a world dataset, or sessions built from one), the engine also
learns to say which of the world's motion texts the next shot shows (EngineConfig.motion_texts: its regressed
text tokens scored against each text's own, cross-entropy); the labels are free, s_a's text part is one of them.
An ``--init`` engine without motion texts gains them.

Output: ``OUT/final/`` loads with ``animegamer.engine.model.load_engine`` (engine.json +
engine.safetensors: LoRA, new-token embeddings, queries, resamplers, s_a statistics);
``OUT/engine_config.json`` (the engine config, data source, decoder); ``OUT/eval.json`` and
``OUT/eval_history.png`` (animegamer.engine.evaluate: motion-level accuracy, delta MAE, s_a
cosine / MSE per turn index, teacher forced and closed loop, window 0 / 1 / k on the visual
tokens), also copied to ``OUT/final/metrics.json``.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from animegamer.core.checkpoint import load_json, load_safetensors, save_json_atomic
from animegamer.core.devices import QUANTIZE
from animegamer.core.runs import ENGINE_CONFIG, ENGINE_WEIGHTS, resolve_engine
from animegamer.engine.data import EngineCollate, EngineDataset, load_sessions, synthetic_sessions
from animegamer.engine.evaluate import (
    evaluate_engine,
    format_summary,
    level_reference,
    play_sessions,
    summarize,
    write_report,
)
from animegamer.engine.model import EngineConfig, GameEngine, engine_config, load_engine
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.engine_sessions import (
    build_engine_splits,
    is_world_dataset,
    load_rep_stats,
    motion_text_table,
    rep_stats,
)
from animegamer.training.loop import TrainConfig, train
from animegamer.world.instructions import all_motion_texts

ENGINE_RUN_CONFIG = "engine_config.json"


# Engine preset (animegamer.engine.model.ENGINE_PRESETS) + TrainConfig fields per preset.
@dataclass(frozen=True)
class EnginePreset:
    """Phase b at one size: the engine (engine/model.py ENGINE_PRESETS) and the training schedule."""

    engine: str
    train: TrainConfig
    max_turns: int = 5  # the longest training sample (history + target)


PRESETS: dict[str, EnginePreset] = {
    "tiny": EnginePreset("tiny", TrainConfig(steps=20, batch_size=2, lr=1e-3, warmup_steps=2, log_every=5,
                                             save_every=10, ema_decay=0.0)),
    # bf16 autocast measured ~15% faster per step than fp32 on an AMX CPU; where bf16 is emulated (AVX2) the
    # loop trains in fp32 (2.3 s a step at batch 2, samples of up to 3 turns, 2 threads, AMD EPYC). The step
    # count is a CPU budget.
    "default": EnginePreset("default", TrainConfig(steps=7800, batch_size=2, lr=3e-4, warmup_steps=40,
                                                   weight_decay=0.0, log_every=10, save_every=50, grad_clip=1.0,
                                                   mixed_precision="bf16"), max_turns=3),
    "paper": EnginePreset("paper", TrainConfig(steps=20000, batch_size=8, lr=1e-4, warmup_steps=500, weight_decay=0.0,
                                               log_every=20, save_every=500, grad_clip=1.0, mixed_precision="bf16")),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS), data_required=False)
    parser.add_argument("--decoder", type=Path,
                        help="phase-a `train decoder` run (or its shot_decoder/): its E_a gives the s_a targets")
    parser.add_argument("--clip", type=Path, default=None,
                        help="vision tower run for world data (default: the one the decoder run was trained with)")
    parser.add_argument("--text-encoder", default=None, help="motion-text encoder dir (default: the decoder run's)")
    parser.add_argument("--encode-batch", type=int, default=16, help="turns per encoder call when building sessions")
    parser.add_argument("--eval-split", default="val,test",
                        help="world data: held-out split(s) to evaluate on, comma-separated (default: %(default)s)")
    parser.add_argument("--eval-windows", default=None, help="history windows compared (default: 0,1,k)")
    parser.add_argument("--no-closed-loop", action="store_true", help="skip the closed-loop evaluation")
    parser.add_argument("--no-rep-norm", action="store_true", help="train on raw s_a (no per-(token, dim) standardising)")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N", help="train on N synthetic sessions")
    parser.add_argument("--synthetic-turns", type=int, default=8)
    parser.add_argument("--init", type=Path, default=None, metavar="ENGINE",
                        help="start from a trained engine (a `train engine` run, its final/ or a model dir): its "
                             "config, LoRA, embeddings, resamplers and s_a statistics; a fresh optimiser and schedule")
    parser.add_argument("--init-new-targets", action="store_true",
                        help="with --init: the s_a targets come from another decoder than the init engine's (e.g. a "
                             "new visual reference): keep its LoRA and embeddings, standardise s_a with THIS data's "
                             "statistics (the resamplers re-learn the new space)")
    parser.add_argument("--max-turns", type=int, default=None,
                        help="longest training sample, history + target (default: the preset's)")
    parser.add_argument("--window", type=int, default=None, help="play-time history window (turns)")
    parser.add_argument("--lora-rank", type=int, default=None)
    parser.add_argument("--alpha-mse", type=float, default=None,
                        help="loss = CE + ALPHA_MSE * MSE (default 1; also with --init). Lower weighs the motion "
                             "level and state tokens more against the s_a regression")
    parser.add_argument("--history-level-weight", type=float, default=None,
                        help="also learn the motion level at every history turn of a sample, with this weight "
                             "(EngineConfig.history_level_weight; default 0: the target turn only)")
    parser.add_argument("--rep-tokens", type=int, default=None, help="N (synthetic only; data dirs carry it)")
    parser.add_argument("--rep-dim", type=int, default=None, help="D (synthetic only; data dirs carry it)")
    parser.add_argument("--llm-path", type=str, default=None, help="local LLM checkpoint for --preset paper")
    parser.add_argument("--quantize", choices=list(QUANTIZE), default=None,
                        help="--llm-path's frozen weights quantized by bitsandbytes as they load (4bit + LoRA: QLoRA); "
                             "the trained engine plays with the same")
    parser.add_argument("--eval-sessions", type=int, default=0,
                        help="sessions dir / synthetic: hold out the last K sessions and evaluate; "
                             "world data: evaluate at most K held-out sessions (0 = all)")


def _sessions(args: argparse.Namespace, rep_tokens: int, rep_dim: int, seed: int) -> tuple[list, list, dict[str, Any]]:
    """(training sessions, held-out sessions, source info). Source info carries rep_tokens /
    rep_dim (and n_text, rep stats) when the data fixes them."""

    k = args.eval_sessions
    if args.synthetic:
        sessions = synthetic_sessions(args.synthetic, args.synthetic_turns, rep_tokens, rep_dim, seed=seed)
        held, train = (sessions[len(sessions) - k:], sessions[:len(sessions) - k]) if k else ([], sessions)
        return train, held, {"source": f"synthetic:{args.synthetic}x{args.synthetic_turns}:seed{seed}"}
    if args.data is None:
        raise SystemExit("train engine: pass --data DIR (a world dataset or engine sessions) or --synthetic N")
    if is_world_dataset(args.data):
        if args.decoder is None:
            raise SystemExit("train engine: --data is a world dataset: pass --decoder DECODER_RUN (phase a) so the "
                             "s_a targets can be computed (and --clip CLIP_RUN unless the decoder run records it)")
        splits = [x for x in args.eval_split.split(",") if x]
        if any(x not in ("val", "test") for x in splits):
            raise SystemExit(f"train engine: --eval-split takes val and/or test, got {args.eval_split!r}")
        dirs = build_engine_splits(args.data, args.decoder, args.clip, Path(args.out) / "sessions", ("train", *splits),
                                   batch_size=args.encode_batch, progress=not args.no_progress,
                                   text_encoder=args.text_encoder, limit=args.limit)
        train, meta = load_sessions(dirs["train"])
        held: list = []
        for x in splits:
            held += load_sessions(dirs[x])[0]
        held = held[:k] if k else held
        return train, held, {"source": str(args.data), "sessions_dir": str(dirs["train"]), "eval_split": splits,
                             "stats": load_rep_stats(dirs["train"]),
                             **{key: meta[key] for key in ("rep_tokens", "rep_dim", "n_text", "n_visual", "build")}}
    if not (Path(args.data) / "engine_meta.json").is_file():
        raise SystemExit(f"train engine: {args.data} is neither a world dataset nor engine sessions (no "
                         f"engine_meta.json); write the sessions with animegamer.engine.data.save_sessions")
    sessions, meta = load_sessions(args.data, limit=args.limit)
    held, train = (sessions[len(sessions) - k:], sessions[:len(sessions) - k]) if k else ([], sessions)
    return train, held, {"source": str(args.data), "stats": load_rep_stats(args.data), **meta}


def motion_table(source: dict[str, Any]) -> tuple[list[str], torch.Tensor] | None:
    """The world's motion texts and s_a's text tokens of each, (K, n_text, D), with the representation the data's
    s_a were computed with: the engine's motion head chooses among them. None where the data do not say how they
    were made (synthetic sessions, a sessions dir written by hand)."""
    build = source.get("build") or {}
    if not build.get("decoder") or not source.get("n_text"):
        return None
    texts = all_motion_texts()
    table = motion_text_table(build, texts)
    if table.shape[1] != source["n_text"]:
        raise SystemExit(f"train engine: the representation gives {table.shape[1]} text tokens, the data "
                         f"{source['n_text']}")
    return texts, table


def evaluate(engine, sessions: list, closed_loop: bool = False) -> dict[str, Any]:
    """Motion-level accuracy, delta MAE and s_a similarity on whole sessions, per turn index, at
    the engine's window (the full report with the window comparison: animegamer.engine.evaluate)."""

    return summarize(play_sessions(engine, sessions, closed_loop=closed_loop))


def run(args: argparse.Namespace) -> int:
    preset = PRESETS[args.preset]
    tcfg = train_config_from_args(preset.train, args)
    max_turns = args.max_turns or preset.max_turns
    out = Path(args.out)
    saved_cfg = out / ENGINE_RUN_CONFIG
    if args.resume and saved_cfg.is_file():  # the run's own engine config wins over the command line
        cfg = EngineConfig.from_dict(load_json(saved_cfg)["engine"])
        train_sessions, held, source = _sessions(args, cfg.rep_tokens, cfg.rep_dim, tcfg.seed)
    else:
        over: dict[str, Any] = {"seed": tcfg.seed, "rep_norm": not args.no_rep_norm}
        for key, val in (("window", args.window), ("lora_rank", args.lora_rank), ("alpha_mse", args.alpha_mse),
                         ("history_level_weight", args.history_level_weight), ("backbone_path", args.llm_path),
                         ("backbone_quantize", args.quantize), ("rep_tokens", args.rep_tokens), ("rep_dim", args.rep_dim)):
            if val is not None:
                over[key] = val
        if args.lora_rank is not None:
            over["lora_alpha"] = 2.0 * args.lora_rank
        cfg = engine_config(preset.engine, **over)
        train_sessions, held, source = _sessions(args, cfg.rep_tokens, cfg.rep_dim, tcfg.seed)
        if "rep_tokens" in source:  # a data dir fixes N and D
            cfg = engine_config(preset.engine, **{**over, "rep_tokens": source["rep_tokens"],
                                                     "rep_dim": source["rep_dim"]})
    if not train_sessions:
        raise SystemExit("train engine: no training sessions left after --eval-sessions")
    motion = None if (args.resume and saved_cfg.is_file()) else motion_table(source)
    if motion is not None:
        cfg = EngineConfig.from_dict({**cfg.to_dict(), "motion_texts": motion[0], "n_text": source["n_text"]})

    init_weights, new_head = None, False
    if args.init is not None and not (args.resume and saved_cfg.is_file()):  # a resumed run has its own weights
        init_dir = resolve_engine(args.init)
        init_cfg = EngineConfig.from_dict(load_json(init_dir / ENGINE_CONFIG)["config"])
        if (init_cfg.rep_tokens, init_cfg.rep_dim) != (cfg.rep_tokens, cfg.rep_dim):
            raise SystemExit(f"train engine: --init {args.init} predicts {init_cfg.rep_tokens} x {init_cfg.rep_dim} "
                             f"s_a, the data has {cfg.rep_tokens} x {cfg.rep_dim}")
        # the init engine fixes the architecture; the play window and the loss weighting may change
        keep = {k: v for k, v in (("window", args.window), ("alpha_mse", args.alpha_mse),
                                   ("history_level_weight", args.history_level_weight)) if v is not None}
        if motion is not None and not init_cfg.motion_texts:  # the head is new: the rest is the init engine's
            keep.update(motion_texts=motion[0], n_text=source["n_text"])
        cfg = EngineConfig.from_dict({**init_cfg.to_dict(), **keep})
        new_head = bool(cfg.motion_texts) and not init_cfg.motion_texts
        init_weights = load_safetensors(init_dir / ENGINE_WEIGHTS)
        print(f"[engine] initialised from {init_dir}")

    engine = GameEngine(cfg)
    if init_weights is not None:  # also restores the s_a statistics the weights were trained with
        engine.load_trainable_state_dict(init_weights, new_motion_head=new_head)
    if motion is not None and cfg.motion_texts:  # this data's E_a (a fine-tuned decoder's may differ from init's)
        if list(cfg.motion_texts) != motion[0]:
            raise SystemExit("train engine: the init engine's motion texts are not this world's")
        engine.set_motion_table(motion[1])
    # statistics of the training s_a (a resumed run reloads the same from its checkpoint)
    if cfg.rep_norm and (init_weights is None or args.init_new_targets):
        stats = source.get("stats")
        engine.set_rep_stats(*(stats if stats is not None and "sessions_dir" in source else rep_stats(train_sessions)))
    dataset = EngineDataset(train_sessions, engine.builder, max_turns=max_turns)
    collate = EngineCollate(engine.vocab["<PAD>"], cfg.rep_tokens)
    n_train = sum(p.numel() for p in engine.trainable_parameters())
    print(f"[engine] preset={args.preset} backbone={cfg.backbone} N={cfg.rep_tokens} D={cfg.rep_dim} "
          f"trainable={n_train / 1e6:.2f}M samples={len(dataset)} from {len(train_sessions)} sessions, "
          f"{len(held)} held out ({source['source']})")
    out.mkdir(parents=True, exist_ok=True)
    source = {k: v for k, v in source.items() if k != "stats"}
    if not saved_cfg.is_file():
        save_json_atomic({"engine": cfg.to_dict(), "data": source, "max_turns": max_turns,
                          "decoder": str(args.decoder) if args.decoder else None,
                          "clip": str(args.clip) if args.clip else None,
                          "init": str(args.init) if args.init else None,
                          "eval_sessions": args.eval_sessions}, saved_cfg)
    result = train(engine, dataset, collate, tcfg, out, resume=args.resume)
    print(f"[engine] step {result['step']} loss {result['loss']} -> {result['final_dir']}")
    if held:
        del engine  # evaluate what was exported (EMA weights if any), through the loader players use
        engine = load_engine(result["final_dir"])
        windows = tuple(int(w) for w in args.eval_windows.split(",")) if args.eval_windows else None
        report = evaluate_engine(engine, held, windows, closed_loop=not args.no_closed_loop,
                                 n_text=source.get("n_text"), progress=not args.no_progress)
        report.update(engine=str(result["final_dir"]), step=result["step"], data=source)
        if "eval_split" in source:  # held-out turns of a world: the level beside its lookup table
            report["level_reference"] = level_reference(held, [source["build"].get("world")] * len(held),
                                                        report["teacher_forced"]["levels_per_turn"])
        write_report(report, out)
        save_json_atomic(report, Path(result["final_dir"]) / "metrics.json")
        print("[engine] " + format_summary(report))
    return 0
