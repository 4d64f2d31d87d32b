"""Phase c: adapt the decoder to the engine's PREDICTED s_a (the engine stays frozen).

    animegamer train adapt --engine ENGINE_RUN --decoder DECODER_RUN --data WORLD_DIR --out DIR [--resume]

Why: the decoder of phase a only ever saw s_a = E_a(true shot); the engine's predictions are
close to those but not equal (smoother, averaged over what the instruction leaves open), and
the paper measures the gap (in-domain CLIP-I 0.68 without this phase, 0.79 with it).

1. The engine plays every training session of ``--data``'s world (its engine sessions, s_a from the
   decoder's frozen E_a, built once into ``OUT/sessions``; ``--sessions DIR`` gives ready ones) turn by turn,
   closed loop by default (its history is its own predictions, as in a game; ``--teacher-forced``
   feeds the true history instead). Each turn's predicted s_a is stored with the shot it should
   become in ``OUT/predicted/`` (resumable, one part per 25 sessions).
2. The decoder (E_a unused, so frozen; the transformer and motion embedding train) learns to
   denoise the TRUE shot's latents from the PREDICTED s_a and the true motion level, with the
   phase-a loss (v-prediction, 5% condition dropout to the null branch). The true shots' latents
   come from the decoder run's feature cache (``DECODER_RUN/cache/train``). With ``--true-fraction F``,
   a share F of the samples are instead the cache's true shots with their own s_a = E_a(f_md, f_v),
   phase a's task: on predicted turns alone (125 turns for 200 steps of batch 8 = 13 epochs) the
   spatial-reference decoder lost most of its picture from the TRUE s_a (64 val shots, CFG 1: CLIP-I
   0.81 -> 0.60, character 0.36 -> 0.20), i.e. it forgot what phase a taught it.
3. ``OUT/final/shot_decoder`` is the adapted decoder; ``OUT/final/metrics.json`` has the held-out
   v-loss (the engine's val sessions that the decoder's val cache covers) on predicted s_a
   before and after adaptation, and the same on the TRUE s_a of the val cache (what was kept).
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import ConcatDataset, Subset
from tqdm.auto import tqdm

from animegamer.core.checkpoint import load_json, load_safetensors, save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import resolve_decoder, resolve_engine
from animegamer.decoder.diffusion import Denoiser, collate_decoder
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig
from animegamer.engine.data import load_sessions, turn_record
from animegamer.engine.model import load_engine
from animegamer.engine.sequence import TurnRecord
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.engine_sessions import build_engine_splits
from animegamer.training.loop import TrainConfig, train
from animegamer.training.phase_a import eval_loss
from animegamer.training.shot_cache import CachedShots
from animegamer.world.dataset import ShotDataset

PART_SESSIONS = 25

# Phase c's training schedule per size (the decoder's sizes are phase a's). A short fine-tune: the decoder
# already decodes s_a, so the lr is lower than phase a's.
PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=4, batch_size=2, lr=1e-3, warmup_steps=1, log_every=2, save_every=2, ema_decay=0.0),
    "default": TrainConfig(steps=600, batch_size=8, lr=2e-4, weight_decay=0.0, warmup_steps=20, ema_decay=0.0,
                           mixed_precision="bf16", log_every=20, save_every=100, grad_clip=1.0),
    # the paper decoder (CogVideoX-2B) on GPUs: one shot of 480 x 720 x 17 per GPU, activations recomputed;
    # starting values, not the paper's (it gives none)
    "paper": TrainConfig(steps=2000, batch_size=1, lr=1e-5, weight_decay=0.0, warmup_steps=100, ema_decay=0.0,
                         mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0,
                         gradient_checkpointing=True),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))
    parser.add_argument("--engine", type=Path, required=True, help="`train engine` run dir (or its final/)")
    parser.add_argument("--decoder", type=Path, required=True,
                        help="`train decoder` run dir (its joint/final/shot_decoder and cache/ are used)")
    parser.add_argument("--sessions", type=Path, default=None,
                        help="engine sessions of --data's world to predict on (default: built from --data with the "
                             "decoder's E_a into OUT/sessions)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the decoder run's latent cache of the train split (default: DECODER_RUN/cache/train)")
    parser.add_argument("--teacher-forced", action="store_true",
                        help="predict each turn from the TRUE history (default: the engine's own, as in play)")
    parser.add_argument("--eval-shots", type=int, default=64, help="held-out turns for the before/after v-loss")
    parser.add_argument("--true-fraction", type=float, default=0.0,
                        help="share of the training samples that are the cache's TRUE shots with their own s_a "
                             "(phase a's task), the rest the engine's predicted turns; keeps the decoder's picture "
                             "from the true representation while it learns the engine's (default 0: predicted only)")


# ------------------------------------------------------------------------------- inputs
def find_cache_dir(decoder_run: Path, split: str) -> Path:
    """The decoder run's cache of ``split`` (train: cache/train; val: cache/val_K, the largest K)."""
    root = decoder_run / "cache"
    if (root / split / "meta.json").is_file():
        return root / split
    limited = [m.parent for m in root.glob(f"{split}_*/meta.json") if m.parent.name.split("_")[-1].isdigit()]
    if limited:
        return max(limited, key=lambda d: int(d.name.split("_")[-1]))
    raise FileNotFoundError(f"{decoder_run}: no feature cache of the {split} split under {root} (the `train decoder` "
                            f"run writes it; pass --cache DIR if it lives elsewhere)")


def check_same_world(sessions_dir: Path, cache, world_dir: str | Path) -> None:
    """Shots are paired with predictions by file name ("000012_3"), which every world reuses: engine
    sessions, decoder cache and --data must come from one world (the same seed), or the decoder
    would learn one world's predictions against another's shots."""

    seeds = {"--data": load_json(Path(world_dir) / "meta.json").get("seed"), "decoder cache": cache.meta.get("data_seed")}
    meta = Path(sessions_dir) / "engine_meta.json"
    if meta.is_file():
        seeds["engine sessions"] = (load_json(meta).get("build") or {}).get("world_seed")
    known = {k: v for k, v in seeds.items() if v is not None}
    if len(set(known.values())) > 1:
        raise SystemExit("the engine sessions, the decoder cache and --data must come from the same world, "
                         "got world seeds " + ", ".join(f"{k} {v}" for k, v in known.items())
                         + f" (sessions: {sessions_dir}; pass --sessions with the engine sessions of --data's world)")


def shot_rows(cache, world_dir: str | Path) -> dict[str, int]:
    """shot file name -> row of the decoder cache (cache rows carry ShotDataset indices of their split)."""

    rows = ShotDataset(world_dir, cache.meta["split"]).rows
    return {rows[int(i)]["shot"]: r for r, i in enumerate(cache.tensors["index"].tolist())}


def predict_sessions(engine, sessions: list, out_dir: Path, closed_loop: bool = True, progress: bool = True,
                     desc: str = "predict") -> dict[str, Any]:
    """Every turn's predicted s_a (fp16) and its shot name, in parts of PART_SESSIONS sessions
    written atomically (an interrupted run continues). Returns {"s_a": (M, N, D), "shot": [M]}."""

    out_dir.mkdir(parents=True, exist_ok=True)
    s_a: list = []
    shots: list[str] = []
    bar = tqdm(total=sum(len(s) for s in sessions), desc=desc, unit="turn", disable=not progress, dynamic_ncols=True)
    engine.eval()
    for p in range(0, len(sessions), PART_SESSIONS):
        path, names = out_dir / f"part_{p // PART_SESSIONS:05d}.safetensors", out_dir / f"part_{p // PART_SESSIONS:05d}.json"
        chunk = sessions[p:p + PART_SESSIONS]
        if not (path.is_file() and names.is_file()):
            preds, part_shots = [], []
            for s in chunk:
                engine.reset_cache()
                hist: list = []
                for d in s:
                    true = turn_record(d)
                    with torch.no_grad():
                        pr = engine.predict(hist, true.instruction, true.states)
                    preds.append(pr.s_a.half())
                    part_shots.append(d["shot"])
                    hist.append(TurnRecord(true.instruction, pr.s_a, pr.motion_level, pr.deltas, true.states)
                                if closed_loop else true)
                    bar.update(1)
            save_safetensors_atomic({"s_a": torch.stack(preds)}, path)
            save_json_atomic({"shots": part_shots}, names)
        else:
            bar.update(sum(len(s) for s in chunk))
        s_a.append(load_safetensors(path)["s_a"])
        shots += load_json(names)["shots"]
    bar.close()
    engine.reset_cache()
    return {"s_a": torch.cat(s_a), "shot": shots}


class PredictedShots:
    """torch Dataset: the decoder cache's true latents / features + the engine's predicted s_a."""

    def __init__(self, cache, rows: dict[str, int], predicted: dict[str, Any]) -> None:
        keep = [(i, rows[s]) for i, s in enumerate(predicted["shot"]) if s in rows]
        if not keep:
            raise ValueError("none of the predicted turns' shots is in the decoder cache: were the engine sessions "
                             "built from the same world data as the decoder run?")
        self.cache, self.s_a = cache, predicted["s_a"]
        self.pairs = keep
        self.missing = len(predicted["shot"]) - len(keep)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict:
        p, r = self.pairs[i]
        return {**self.cache[r], "s_a": self.s_a[p].float()}


class TrueShots:
    """torch Dataset: the decoder cache's shots with their TRUE s_a = E_a(f_md, f_v) as an explicit
    ``s_a``, so they batch with predicted turns (the frozen E_a gives exactly what phase a trained on)."""

    def __init__(self, cache, action_encoder) -> None:
        self.cache, self.action_encoder = cache, action_encoder

    def __len__(self) -> int:
        return len(self.cache)

    def __getitem__(self, i: int) -> dict:
        item = self.cache[i]
        with torch.no_grad():
            s_a = self.action_encoder(item["f_md"][None], item["f_v"][None])[0]  # (N, D)
        return {**item, "s_a": s_a.float()}


def mix_true_shots(predicted, true, fraction: float, seed: int = 0):
    """One dataset in which about ``fraction`` of every epoch's items are true shots: the predicted
    turns are repeated k times and a seeded subset of the true shots is added to match the share."""

    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"--true-fraction must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return predicted
    p, t = len(predicted), len(true)
    k = max(1, round(t * (1 - fraction) / (fraction * p)))  # repeats of the predicted turns
    m = max(1, min(t, round(k * p * fraction / (1 - fraction))))  # true shots to add
    rows = torch.randperm(t, generator=torch.Generator().manual_seed(seed))[:m].sort().values.tolist()
    return ConcatDataset([predicted] * k + [Subset(true, rows)])


class AdaptModule(nn.Module):
    """The decoder trained on predicted s_a: E_a is not used (s_a comes in), so it stays frozen;
    the null branch (E_a of zero inputs) is kept as it was, so guidance still means the same."""

    def __init__(self, denoiser: Denoiser, autoencoder: nn.Module, sampler: SamplerConfig | None = None) -> None:
        super().__init__()
        self.denoiser = denoiser
        self.sampler = sampler or SamplerConfig()  # the base decoder's, stored with the adapted one
        self._ae = (autoencoder,)
        denoiser.net.requires_grad_(True)
        denoiser.net.action_encoder.requires_grad_(False)

    def forward(self, batch):
        return self.denoiser(batch)

    def trainable_parameters(self):
        return [p for p in self.denoiser.net.parameters() if p.requires_grad]

    def shot_decoder(self) -> ShotDecoder:
        return ShotDecoder(self.denoiser.net, self._ae[0], self.denoiser.config, self.sampler)

    def export_pretrained(self, directory: Path) -> None:
        self.shot_decoder().save_pretrained(Path(directory) / "shot_decoder")

    def config_dict(self) -> dict:
        return {"phase": "adapt", "decoder": self.denoiser.net.config.to_dict(),
                "diffusion": self.denoiser.config.to_dict()}


def run(args: argparse.Namespace) -> int:
    if not 0.0 <= args.true_fraction < 1.0:  # before the slow part (the engine's predictions)
        raise SystemExit(f"--true-fraction must be in [0, 1), got {args.true_fraction}")
    preset = PRESETS[args.preset]
    cfg = train_config_from_args(preset, args)
    out = Path(args.out)
    progress = not args.no_progress
    engine_dir = resolve_engine(args.engine)
    decoder_dir = resolve_decoder(args.decoder)
    decoder_run = Path(args.decoder)
    if args.sessions is not None:
        sessions_dir = args.sessions
        if not sessions_dir.is_dir():
            raise FileNotFoundError(f"{sessions_dir}: no engine sessions (--sessions takes the engine-sessions "
                                    f"directory `train engine` built from --data's world)")
    else:  # --data's turns as engine sessions, s_a from the decoder's E_a (frozen since phase a: the engine's targets);
        # built once into OUT/sessions, so the engine may have trained on any mix of worlds
        sessions_dir = build_engine_splits(args.data, decoder_run, None, out / "sessions", ("train", "val"),
                                           progress=progress, limit=args.limit)["train"]
    train_cache = CachedShots(args.cache or find_cache_dir(decoder_run, "train"))
    check_same_world(sessions_dir, train_cache, args.data)
    rows = shot_rows(train_cache, args.data)

    # 1. predicted s_a of every training turn (engine frozen)
    engine = load_engine(engine_dir)
    engine.merge_lora(True)  # predict only: the adapters folded in are faster per turn
    sessions, _ = load_sessions(sessions_dir, limit=args.limit)
    mode = "teacher" if args.teacher_forced else "closed"
    predicted = predict_sessions(engine, sessions, out / f"predicted_{mode}", closed_loop=not args.teacher_forced,
                                 progress=progress, desc="engine predicts (train)")
    dataset = PredictedShots(train_cache, rows, predicted)
    held = held_true = None
    val_sessions_dir = sessions_dir.parent / "val"
    try:
        val_cache = CachedShots(find_cache_dir(decoder_run, "val"))
        if val_sessions_dir.is_dir():
            val_rows = shot_rows(val_cache, args.data)
            val_sessions = [s for s in load_sessions(val_sessions_dir)[0] if any(d["shot"] in val_rows for d in s)]
            vp = predict_sessions(engine, val_sessions, out / f"predicted_{mode}_val",
                                  closed_loop=not args.teacher_forced, progress=progress, desc="engine predicts (val)")
            held = PredictedShots(val_cache, val_rows, vp)
        held_true = val_cache
    except (FileNotFoundError, ValueError) as e:
        print(f"[adapt] no held-out evaluation: {e}")
    del engine
    print(f"[adapt] {len(dataset)} predicted turns ({dataset.missing} without a cached shot), "
          f"{len(held) if held else 0} held out, engine {engine_dir}, decoder {decoder_dir}")

    # 2. fine-tune
    base = ShotDecoder.from_pretrained(decoder_dir)
    denoiser = Denoiser(base.net, base.diffusion)
    before = eval_loss(denoiser, held, args.eval_shots) if held else {}
    before_true = eval_loss(denoiser, held_true, args.eval_shots) if held_true else {}
    # E_a is frozen in phase c: the true shots' s_a come from a detached copy of it
    frozen_ea = copy.deepcopy(base.net.action_encoder).eval().requires_grad_(False)
    mixed = mix_true_shots(dataset, TrueShots(train_cache, frozen_ea), args.true_fraction, seed=cfg.seed)
    if args.true_fraction:
        print(f"[adapt] {len(mixed)} samples per epoch, {len(mixed.datasets[-1])} of them true shots "
              f"(--true-fraction {args.true_fraction})")
    result = train(AdaptModule(denoiser, base.autoencoder, base.sampler), mixed, collate_decoder, cfg, out, resume=args.resume)

    # 3. held-out v-loss on predicted s_a, before / after (the EMA or live weights that were exported)
    final = Path(result["final_dir"])
    metrics: dict[str, Any] = {"step": result["step"], "loss": result["loss"], "seconds": result["seconds"],
                               "engine": str(engine_dir), "decoder": str(decoder_dir), "history": mode,
                               "train_turns": len(dataset), "true_fraction": args.true_fraction}
    exported = ShotDecoder.from_pretrained(final / "shot_decoder")
    adapted = Denoiser(exported.net, exported.diffusion)
    if held:
        metrics["heldout_v_loss_predicted_s_a"] = {"before": before, "after": eval_loss(adapted, held, args.eval_shots),
                                                   "turns": min(len(held), args.eval_shots)}
    if held_true:
        metrics["heldout_v_loss_true_s_a"] = {"before": before_true,
                                              "after": eval_loss(adapted, held_true, args.eval_shots),
                                              "shots": min(len(held_true), args.eval_shots)}
    save_json_atomic(metrics, final / "metrics.json")
    print(f"[adapt] done: {final / 'shot_decoder'}\n{json.dumps(metrics, indent=1)}")
    return 0
