"""Phase a's own targets: decode the TRUE s_a of held-out shots and grade what comes out.

    animegamer eval-decoder --decoder runs/decoder --data WORLD_DIR [--n 32] [--out FILE.json]

s_a = E_a(motion text, the shot's first frame) from the decoder run's val feature cache
(``DECODER_RUN/cache/val_K``), decoded with the true motion level and a fixed seed. Columns:
CLIP-I of decoded vs true frames, character and place accuracy by the evaluator's zero-shot
probes, action accuracy by the evaluator's video action classifier, PSNR / SSIM / MS-SSIM against
the true shot (the DreamSim stand-in of `eval`), motion-level accuracy measured from the decoded
PIXELS (the world's DIS-flow quantiser; with the decoded latents' RMS error and frame-to-frame
error, see ``latent_errors``), and the same accuracy when the decoder is given a WRONG
level (true + 2, wrapped): if the motion level steers the motion, accuracy against the true level
drops there. ``--sheet FILE.png``: the first decoded shots beside their ground truth.

``by_true_level``: ACC-F, CLIP-I, character and place of the shots of each true level apart.

``latent_motion_by_level``: does the decoder's motion follow the level it is asked for? For each
requested level (the true one and the wrong one), the mean frame-to-frame change of the decoded
latents itself (``latent_motion``, on the scale of ``latent_frame_sigma``) beside that of the true
shots of that level. A decoder that flickers moves more than the truth at every level; one that
ignores the level moves the same at every level.

``--latent-noise 0,0.05,0.1``: also the ceiling that the autoencoder sets on motion-level accuracy:
the same shots encoded and decoded back (no diffusion), then with independent Gaussian noise of
each standard deviation added to every frame's (unit-variance) latent. It shows how exact the
decoder's per-frame latents must be for the flow to read the true level.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.pipeline import ShotDecoder, frames_from_uint8, frames_to_uint8
from animegamer.decoder.sampler import add_sampler_arguments, sampler_overrides
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator, probes
from animegamer.evaluation.metrics import align_clips, finite_mean, motion_level_from_pixels, new_content, pixel_scores
from animegamer.evaluation.picture import picture_summary, read_picture
from animegamer.models.autoencoder import unpack_time
from animegamer.models.frame_classifier import FrameClassifier
from animegamer.training.phase_c import find_cache_dir
from animegamer.training.shot_cache import CachedShots, decoder_cache
from animegamer.world.dataset import ShotDataset
from animegamer.world.flow import MotionQuantizer
from animegamer.world.preview import BG, save_png, shot_strip, stack_strips


def evaluate_decoder(decoder, cache, rows: list[dict[str, Any]], frames_of, evaluator, n: int = 32,
                     seed: int = 0, progress: bool = True, keep: int = 0) -> dict[str, Any]:
    """Grade ``n`` cached held-out shots decoded from their true s_a (see module doc), with the sampler settings
    the decoder holds. The first ``keep`` decoded shots are returned under "_shots" as (row, decoded uint8
    frames) for a contact sheet."""

    quant = MotionQuantizer.load()
    n = min(n, len(cache))
    out: dict[str, list[float]] = {k: [] for k in ("clip_i", "character", "place", "action", "action_truth",
                                                    "action_autoencoder", "acc_f",
                                                    "acc_f_wrong_level", "psnr", "ssim", "ms_ssim",
                                                    "latent_rms", "latent_frame_sigma", "new_content",
                                                    "new_content_truth")}
    kept: list[tuple[dict[str, Any], np.ndarray]] = []
    decoded_levels = [0] * 5  # how often each level is measured on the decoded pixels (all 1 = nothing moves)
    confusion = [[0] * 5 for _ in range(5)]  # [true level - 1][level measured on the decoded pixels - 1]
    motion = {lv: {"decoded": [], "true": []} for lv in range(1, 6)}  # latent motion per requested level
    by_level = {lv: {"acc_f": [], "clip_i": [], "character": [], "place": []} for lv in range(1, 6)}  # per true level
    chain: dict[str, list[dict[str, Any]]] = {"truth": [], "autoencoder": [], "decoded": []}  # the picture, step by step
    by_verb: dict[str, list[float]] = {}  # the decoded shots' verb named, per true verb
    for i in tqdm(range(n), desc="decode true s_a", disable=not progress, dynamic_ncols=True):
        item = cache[i]
        row = rows[int(cache.tensors["index"][i])]
        level = int(item["motion_level"])
        with torch.no_grad():
            s_a = decoder.net.action_encoder(item["f_md"][None], item["f_v"][None])[0]  # (N, D)
        true = frames_of(row)
        wrong_level = (level + 1) % 5 + 1
        latents = decoder.sample_latents(s_a[None], level, torch.Generator().manual_seed(seed + i))
        gen = frames_to_uint8(decoder.decode_latents(latents))[0]  # exactly decoder(s_a, level, generator)
        errors = latent_errors(decoder, latents[0], item["latents"])
        wrong_latents = decoder.sample_latents(s_a[None], wrong_level, torch.Generator().manual_seed(seed + i))
        wrong = frames_to_uint8(decoder.decode_latents(wrong_latents))[0]
        if errors is not None:
            out["latent_rms"].append(errors[0])
            out["latent_frame_sigma"].append(errors[1])
        motion[level]["decoded"].append(latent_motion(decoder, latents[0]))
        motion[wrong_level]["decoded"].append(latent_motion(decoder, wrong_latents[0]))
        motion[level]["true"].append(latent_motion(decoder, item["latents"]))
        measured = motion_level_from_pixels(gen, quant)[0]
        decoded_levels[measured - 1] += 1
        confusion[level - 1][measured - 1] += 1
        out["acc_f"].append(float(measured == level))
        if (nc := new_content(gen)) is not None:  # what frame 0 moved along the flow cannot explain
            out["new_content"].append(nc)
            out["new_content_truth"].append(new_content(true))
        by_level[level]["acc_f"].append(float(measured == level))
        out["acc_f_wrong_level"].append(float(motion_level_from_pixels(wrong, quant)[0] == level))
        for k, v in pixel_scores(*align_clips(gen, true)).items():
            if v is not None:  # MS-SSIM: None below its minimum frame size
                out[k].append(v)
        if len(kept) < keep:
            kept.append((row, gen))
        if evaluator is not None:
            round_trip = None
            if evaluator.frames is not None:
                round_trip = _picture_chain(chain, evaluator.frames, decoder, gen, true, row)
            if evaluator.actions is not None:  # the verb along the chain: truth, round trip, decoded
                out["action"].append(float(evaluator.actions.predict(gen) == row["motion"]))
                by_verb.setdefault(row["motion"], []).append(out["action"][-1])
                out["action_truth"].append(float(evaluator.actions.predict(true) == row["motion"]))
                if round_trip is not None:
                    out["action_autoencoder"].append(float(evaluator.actions.predict(round_trip) == row["motion"]))
            eg, et = evaluator.embed_frames(gen), evaluator.embed_frames(true)
            out["clip_i"].append(float((eg * et).sum(-1).mean()))
            by_level[level]["clip_i"].append(out["clip_i"][-1])
            shot = evaluator.shot_embedding(eg)
            for p in probes(row):
                if p.attribute in ("character", "place"):
                    out[p.attribute].append(float(evaluator.answer(shot, p) == p.answer))
                    by_level[level][p.attribute].append(out[p.attribute][-1])
    return {"shots": n, "steps": decoder.sampler.steps, "guidance": decoder.sampler.guidance,
            "decoded_level_counts": decoded_levels, "level_confusion": confusion,
            **{k: (float(np.mean(v)) if v else None) for k, v in out.items()},
            "latent_motion_by_level": {str(lv): {k: (float(np.mean(v)) if v else None) for k, v in m.items()}
                                       | {"decodes": len(m["decoded"])} for lv, m in motion.items()},
            # are the pictures lost at some levels more than at others?
            "by_true_level": {str(lv): {"shots": len(m["acc_f"])} | {k: (float(np.mean(v)) if v else None)
                                                                    for k, v in m.items()} for lv, m in by_level.items()},
            # what a player can tell: truth, the autoencoder's round trip of it, the decoder from the true s_a
            "picture": {k: picture_summary(rows) for k, rows in chain.items()} if chain["truth"] else None,
            "action_by_verb": {v: {"shots": len(h), "named": float(np.mean(h))} for v, h in sorted(by_verb.items())},
            **({"_shots": kept} if keep else {})}


def _picture_chain(chain: dict[str, list[dict[str, Any]]], classifier: FrameClassifier, decoder: ShotDecoder,
                   gen: np.ndarray, true: np.ndarray, row: dict[str, Any]) -> np.ndarray:
    """The picture columns of one shot at each step of the chain: the true frames, their autoencoder
    round trip (the ceiling the autoencoder sets), and the frames decoded from the true s_a. Returns the
    round trip (T, H, W, 3)."""
    truth = classifier.read_shot(true, len(row["characters"]))
    with torch.no_grad():
        x = frames_from_uint8(true)[None].to(decoder.device)  # (1, T, 3, H, W)
        round_trip = frames_to_uint8(decoder.decode_latents(decoder.autoencoder.encode(x)))[0]
    chain["truth"].append(read_picture(classifier, true, true, row, truth, truth))
    for name, frames in (("autoencoder", round_trip), ("decoded", gen)):
        g, t = align_clips(frames, true)
        chain[name].append(read_picture(classifier, g, t, row, truth))
    return round_trip


def _per_frame(autoencoder, latents: torch.Tensor) -> torch.Tensor | None:
    """Packed latents (F, C', h, w) -> one latent per video frame (T, C, h, w); None for an autoencoder
    that compresses time itself (no per-frame latents)."""

    if getattr(autoencoder.cfg, "kind", None) != "kl2d":
        return None
    return unpack_time(latents.float()[None], autoencoder.temporal_ratio)[0]


def _frame_sigma(change: torch.Tensor) -> float:
    """Frame-to-frame change (T-1, ...) as the std of i.i.d. per-frame noise that would cause it
    (noise of std s on every frame gives differences of std s * sqrt(2))."""
    return float(change.pow(2).mean().sqrt() / np.sqrt(2))


def latent_errors(decoder, pred: torch.Tensor, true: torch.Tensor) -> tuple[float, float] | None:
    """(RMS error, frame-to-frame error) of decoded vs true RAW latents (F, C', h, w), both in the
    diffusion's unit-variance space and per video frame. The second number is on the scale of
    ``--latent-noise``: the flow reads frame-to-frame errors as motion. None without per-frame latents."""
    d = decoder.diffusion
    x = _per_frame(decoder.autoencoder, (pred - d.latent_shift) * d.latent_scale)  # (T, C, h, w)
    y = _per_frame(decoder.autoencoder, (true - d.latent_shift) * d.latent_scale)
    if x is None:
        return None
    return float((x - y).pow(2).mean().sqrt()), _frame_sigma((x[1:] - x[:-1]) - (y[1:] - y[:-1]))


def latent_motion(decoder, latents: torch.Tensor) -> float | None:
    """Frame-to-frame change of RAW latents (F, C', h, w) themselves, on the scale of ``latent_errors``'
    second number: how much a shot moves (or flickers) in the autoencoder's latent space."""
    d = decoder.diffusion
    return own_motion(decoder.autoencoder, (latents.float() - d.latent_shift) * d.latent_scale)


def autoencoder_motion_ceiling(autoencoder, cache, rows: list[dict[str, Any]], frames_of, n: int,
                               sigmas: list[float], seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Motion-level accuracy from the pixels of autoencoder round trips of ``n`` held-out shots, per
    latent noise level sigma (0 = the plain round trip): {sigma: {acc_f, level_counts}}."""

    quant = MotionQuantizer.load()
    n = min(n, len(cache))
    hits = {s: [] for s in sigmas}
    counts = {s: [0] * 5 for s in sigmas}
    for i in tqdm(range(n), desc="autoencoder round trips", disable=not progress, dynamic_ncols=True):
        row = rows[int(cache.tensors["index"][i])]
        true = frames_of(row)  # (T, H, W, 3) uint8
        x = frames_from_uint8(true)[None]  # (1, T, 3, H, W)
        gen = torch.Generator().manual_seed(seed + i)
        with torch.no_grad():
            z = autoencoder.encode(x)  # (1, T', C', h, w), ~unit variance
            for s in sigmas:
                noisy = z + s * torch.randn(z.shape, generator=gen) if s > 0 else z
                level = motion_level_from_pixels(frames_to_uint8(autoencoder.decode(noisy))[0], quant)[0]
                hits[s].append(float(level == int(row["motion_level"])))
                counts[s][level - 1] += 1
    still = [own_motion(autoencoder, cache[i]["latents"]) for i in range(n)]
    return {"still_frame_sigma": finite_mean(still),
            **{str(s): {"acc_f": float(np.mean(hits[s])), "level_counts": counts[s]} for s in sigmas}}


def own_motion(autoencoder, latents: torch.Tensor) -> float | None:
    """Frame-to-frame change of unit-variance packed latents (F, C', h, w) themselves. For true latents
    this is also the frame-to-frame error (as in ``latent_errors``) of a still copy of the first
    frame: the reference point for a decoder's ``latent_frame_sigma``. None without per-frame latents."""
    y = _per_frame(autoencoder, latents)  # (T, C, h, w)
    return None if y is None else _frame_sigma(y[1:] - y[:-1])


def decoded_sheet(shots: list[tuple[dict[str, Any], np.ndarray]], frames_of, path: str | Path) -> Path:
    """One row per shot: first / middle / last decoded frames, then the true shot with its annotations."""

    rows = []
    for row, gen in shots:
        decoded = shot_strip(gen)
        gap = np.full((decoded.shape[0], 8, 3), BG, np.uint8)
        rows.append(np.concatenate([decoded, gap, shot_strip(frames_of(row), row)], axis=1))
    return save_png(stack_strips(rows), path)


def parse_sigmas(text: str | None) -> list[float]:
    """--latent-noise "0,0.05,0.1" -> [0.0, 0.05, 0.1]; a clear error for anything else."""
    if not text:
        return []
    try:
        sigmas = [float(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"eval-decoder: --latent-noise takes comma-separated numbers, got {text!r}") from None
    if any(not np.isfinite(x) or x < 0 for x in sigmas):
        raise SystemExit(f"eval-decoder: --latent-noise takes standard deviations >= 0, got {text!r}")
    return sigmas


def run(args: argparse.Namespace) -> int:
    sigmas = parse_sigmas(args.latent_noise)  # bad input fails before any decoding
    try:
        overrides = sampler_overrides(args)
    except ValueError as e:
        raise SystemExit(f"eval-decoder: {e}") from None
    if args.threads:
        torch.set_num_threads(args.threads)
    decoder = ShotDecoder.from_pretrained(resolve_decoder(args.decoder))
    decoder.sampler = dataclasses.replace(decoder.sampler, **overrides)
    if args.cache and not (Path(args.cache) / "meta.json").is_file():
        cache = decoder_cache(decoder, args.data, args.split, args.n, Path(args.cache), progress=not args.no_progress)
    else:
        cache = CachedShots(args.cache or find_cache_dir(Path(args.decoder), "val"))
    shots = ShotDataset(args.data, cache.meta["split"])
    by_shot = {r["shot"]: i for i, r in enumerate(shots.rows)}

    def frames_of(row: dict[str, Any]) -> np.ndarray:
        return np.asarray(shots[by_shot[row["shot"]]]["frames"])

    ev_path = args.evaluator or (DEFAULT_EVALUATOR if DEFAULT_EVALUATOR.is_dir() else None)
    evaluator = Evaluator.load(ev_path) if ev_path else None
    report = evaluate_decoder(decoder, cache, shots.rows, frames_of, evaluator, args.n, progress=not args.no_progress,
                              keep=args.sheet_shots if args.sheet else 0)
    if sigmas:
        report["autoencoder_ceiling"] = autoencoder_motion_ceiling(decoder.autoencoder, cache, shots.rows, frames_of,
                                                                   args.n, sigmas, progress=not args.no_progress)
    if args.sheet:
        report["sheet"] = str(decoded_sheet(report.pop("_shots"), frames_of, args.sheet))
    report.update({"decoder": str(args.decoder), "evaluator": str(ev_path) if ev_path else None})
    print(json.dumps(report, indent=1))
    if args.out:
        save_json_atomic(report, args.out)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval-decoder", help="phase a: decode the TRUE s_a of held-out shots and grade them",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decoder", required=True, help="`train decoder` / `train adapt` run dir (or shot_decoder/)")
    p.add_argument("--data", required=True, help="the world dataset the decoder run was trained on")
    p.add_argument("--cache", default=None,
                   help="feature cache of held-out shots (default: DECODER_RUN/cache/val_K); a directory that does "
                        "not exist yet is built from --data's --split with the decoder's own encoders")
    p.add_argument("--split", default="val", help="the split a new --cache is built from (default: %(default)s)")
    p.add_argument("--evaluator", default=None, help="evaluator vision tower (default: the shipped one)")
    p.add_argument("--n", type=int, default=32, help="held-out shots (default: %(default)s)")
    p.add_argument("--out", default=None, help="JSON report path")
    add_sampler_arguments(p)
    p.add_argument("--sheet", default=None, help="PNG contact sheet: decoded shots (left) beside the truth (right)")
    p.add_argument("--sheet-shots", type=int, default=8, help="shots on the contact sheet (default: %(default)s)")
    p.add_argument("--latent-noise", default=None, metavar="S1,S2,...",
                   help="also report motion-level accuracy of autoencoder round trips of the same shots with this "
                        "latent noise (0 = plain round trip): the ceiling the autoencoder sets")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)
