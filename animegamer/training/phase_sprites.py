"""The sprite animator: train the network that draws a character doing the verb on a canvas that follows its
feet (decoder/sprite_animator.py).

    animegamer train sprites --data WORLD_DIR --out DIR [--limit N] [--resume] [--max-seconds S]
    animegamer train sprites --render-sessions 3000 --render-seed 1000 --out DIR   # no dataset on disk

Each train shot gives its s_a (the shipped E_a on its TRUE first frame, frozen: ``training/action_parts.py``)
and its motion level; the world re-plans the shot from its seed and draws each of its characters alone, frame
by frame (``world/sprite_tracks.py``, ~50 ms a shot): the sprite's target. ``--resume`` continues a stopped run;
``OUT/final/`` holds ``config.json`` and ``model.safetensors`` (EMA weights), loadable by
``SpriteAnimator.from_pretrained``.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing as mp
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.runs import resolve_decoder
from animegamer.core.checkpoint import load_safetensors, run_dir
from animegamer.decoder.layered import tracks_as_played
from animegamer.decoder.pipeline import STAGE_DIR
from animegamer.decoder.stage import Stage, world_stage
from animegamer.decoder.sprite_animator import (
    WEIGHTS_NAME,
    SpriteAnimator,
    SpriteAnimatorNet,
    load_into,
    sprite_animator_preset,
)
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.action_parts import (
    SHIPPED,
    TEXT_TABLE,
    ActionParts,
    add_shot_arguments,
    compute_s_a,
    train_shots,
)
from animegamer.training.loop import TrainConfig, train
from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.sprite_tracks import (
    FRAME_H,
    SpriteTrack,
    other_adverb,
    row_tracks,
    session_lengths,
    shot_phase,
)

PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=4, batch_size=2, lr=1e-3, warmup_steps=1, log_every=2, save_every=2, ema_decay=0.0),
    "default": TrainConfig(steps=12600, batch_size=8, lr=3e-4, weight_decay=0.0, warmup_steps=100,
                           schedule="constant", ema_decay=0.995, log_every=20, save_every=200, grad_clip=1.0),
}


@dataclasses.dataclass
class SpriteTensors:
    """Every character track of a set of shots, with the shot it comes from."""

    rgba: torch.Tensor  # uint8 (M, T, H, W, 4)
    standing: torch.Tensor  # uint8 (M, H, W, 4)
    offset: torch.Tensor  # float32 (M, T, 2)
    role: torch.Tensor  # long (M,)
    shot: torch.Tensor  # long (M,): index into the shots
    skipped: int  # shots whose re-plan did not match their row
    body: torch.Tensor  # float32 (M, T, 2, 3): where each frame puts the body (``sprite_tracks.sprite_body``)
    standing_body: torch.Tensor  # float32 (M, 2, 3)
    marks: torch.Tensor  # uint8 (M, T, H, W): the verb's marks (``sprite_tracks.verb_marks``)
    # the same tracks drawn from phase 0 (``SpriteAnimatorConfig.canonical_start``): rgba, offset, body, marks
    canonical: dict[str, torch.Tensor] | None = None
    # the same tracks from phase 0 in another adverb's manner (``SpriteAnimatorConfig.level_swap_share``;
    # ``sprite_tracks.other_adverb``): rgba, offset, body, marks
    other: dict[str, torch.Tensor] | None = None


TrackSet = tuple[SpriteTrack, SpriteTrack | None, SpriteTrack | None]  # own, from phase 0, in another manner
FIELDS = ("rgba", "offset", "body", "marks")  # what a track's variants replace of it


def _tracks(job: tuple[dict[str, Any], int, int, bool, bool]) -> list[TrackSet] | None:
    row, n_turns, n_frames, canonical, other = job
    torch.set_num_threads(1)
    try:
        own = row_tracks(row, n_turns, n_frames)
        at_zero: list[SpriteTrack | None] = [None] * len(own)
        if canonical:  # a shot the world began at phase 0 is its own canonical track: not drawn twice
            at_zero = own if shot_phase(row) == 0.0 else row_tracks(row, n_turns, n_frames, phase=0.0)
        swapped: list[SpriteTrack | None] = [None] * len(own)
        if other:
            swapped = row_tracks(row, n_turns, n_frames, phase=0.0, adverb=other_adverb(row))
        return list(zip(own, at_zero, swapped))
    except ValueError:
        return None


def _stack(tracks: list[SpriteTrack], field: str) -> torch.Tensor:
    return torch.from_numpy(np.stack([getattr(t, field) for t in tracks]))


def sprite_tensors(rows: list[dict[str, Any]], n_frames: int, workers: int = 2, progress: bool = True,
                   canonical: bool = False, other: bool = False) -> SpriteTensors:
    """The sprite tracks of every row (``world/sprite_tracks.row_tracks``), spread over ``workers`` processes;
    with ``canonical`` also each drawn from phase 0, with ``other`` also from phase 0 in another adverb's manner
    (each once more the drawing and the memory)."""
    lengths = session_lengths(rows)
    jobs = [(r, lengths[(int(r["seed"]), int(r["session"]))], n_frames, canonical, other) for r in rows]
    bar = dict(total=len(jobs), desc="sprites", disable=not progress)
    if workers <= 1:
        results = [_tracks(j) for j in tqdm(jobs, **bar)]
    else:
        with mp.get_context("spawn").Pool(workers) as pool:
            results = list(tqdm(pool.imap(_tracks, jobs, chunksize=8), **bar))
    flat = [(i, pair) for i, pairs in enumerate(results) if pairs for pair in pairs]
    if not flat:
        raise ValueError("no sprite tracks: no row could be re-planned from its seed")
    own = [tracks[0] for _, tracks in flat]

    def variant(k: int, wanted: bool) -> dict[str, torch.Tensor] | None:
        return {f: _stack([tracks[k] for _, tracks in flat], f) for f in FIELDS} if wanted else None

    return SpriteTensors(_stack(own, "rgba"), _stack(own, "standing"), _stack(own, "offset"),
                         torch.tensor([t.role for t in own]), torch.tensor([i for i, _ in flat]),
                         sum(r is None for r in results), _stack(own, "body"), _stack(own, "standing_body"),
                         _stack(own, "marks"), variant(1, canonical), variant(2, other))


_PLAYED: dict[str, Any] = {}  # a worker's stage and quantiser (``played_levels``)


def _init_played(stage: Stage) -> None:
    torch.set_num_threads(1)
    _PLAYED.update(stage=stage, quant=MotionQuantizer.load())


def level_as_played(stage: Stage, quant: MotionQuantizer, place: str, time: str, rgba: list[np.ndarray],
                    offset: list[np.ndarray], motion: str) -> int:
    """The level of sprite tracks (and their feet offsets) as play shows them on the stage, read by ``quant``."""
    return quant.level(flow_magnitude(tracks_as_played(stage, place, time, rgba, offset, motion)))


def _played_level(job: tuple[str, str, list[np.ndarray], list[np.ndarray], str]) -> int:
    return level_as_played(_PLAYED["stage"], _PLAYED["quant"], *job)


def played_levels(rows: list[dict[str, Any]], sprites: SpriteTensors, stage: Stage, progress: bool = True,
                  workers: int = 1, other: bool = False) -> torch.Tensor:
    """long (N,): each shot's motion level as play shows its true tracks (``layered.tracks_as_played``: the stage's
    place, play's camera), read by the world's quantiser, the one its labels come from, over ``workers`` processes.
    The animator learns to draw the level asked as the player will see it: labelled with the world shot's level,
    it learnt the world's camera too (a pan moves a still character against the place; play does not pan), and
    the level read from its drawings missed the one asked in 0.19 of held-out shots even where it drew the true
    tracks exactly (docs/layers.md, "The level through the network"). A shot whose tracks could not be re-planned,
    or in a place the stage has no picture of, keeps the world's level. ``other``: the level of the tracks in
    another manner (``sprites.other``) instead; 0 where they cannot be read (the world shot no such turn)."""
    tracks = sprites.other if other else {"rgba": sprites.rgba, "offset": sprites.offset}
    if tracks is None:
        raise ValueError("these sprite tensors hold no tracks in another manner: sprite_tensors(other=True)")
    levels = torch.zeros(len(rows), dtype=torch.long) if other else torch.tensor([int(r["motion_level"]) for r in rows])
    by_shot: dict[int, list[int]] = {}
    for m, shot in enumerate(sprites.shot.tolist()):
        by_shot.setdefault(shot, []).append(m)
    shots = [shot for shot in sorted(by_shot) if (rows[shot]["place"], rows[shot]["time"]) in stage.places]
    jobs = ((rows[shot]["place"], rows[shot]["time"], [tracks["rgba"][m].numpy() for m in by_shot[shot]],
             [tracks["offset"][m].numpy() for m in by_shot[shot]], rows[shot]["motion"]) for shot in shots)
    bar = dict(total=len(shots), desc="levels as played", disable=not progress)
    if workers <= 1:
        _init_played(stage)
        read = [_played_level(job) for job in tqdm(jobs, **bar)]
    else:
        with mp.get_context("spawn").Pool(workers, _init_played, (stage,)) as pool:
            read = list(tqdm(pool.imap(_played_level, jobs, chunksize=4), **bar))
    levels[shots] = torch.tensor(read, dtype=torch.long)
    return levels


def look_groups(standing: torch.Tensor) -> list[list[int]]:
    """Tracks grouped by their standing picture: the same character in the same look, facing the same way."""
    groups: dict[bytes, list[int]] = {}
    for i, picture in enumerate(standing):
        groups.setdefault(hashlib.sha1(picture.numpy().tobytes()).digest(), []).append(i)
    return list(groups.values())


class SpriteShots(torch.utils.data.Dataset):
    """One item per character track: its sprites, standing sprite, feet offsets, role, its shot's s_a, level, and
    a donor: another track of the same character and look (or itself), whose last frame as the network draws it
    is the input of a scene that goes on (``SpriteAnimatorConfig.went_on_share``).

    A share ``swap_share`` of the items are the track in another adverb's manner (``sprites.other``) at the level
    it reads (``other_levels``, 0: never swapped), with the shot's own s_a: with s_a and level always agreeing,
    the network took the amount of motion from s_a and hardly read the level (docs/layers.md, "The animator
    learns to read the level"). A track in another manner that reads the shot's own level is never swapped in:
    asked its own s_a at its own level, the network was shown two manners (two tempos) for one input and drew
    their mean, a smaller swing (docs/layers.md, "The level swap's own level")."""

    def __init__(self, sprites: SpriteTensors, s_a: torch.Tensor, levels: torch.Tensor, seed: int = 0,
                 other_levels: torch.Tensor | None = None, swap_share: float = 0.0) -> None:
        if swap_share > 0 and (sprites.other is None or other_levels is None):
            raise ValueError("a level swap needs the tracks in another manner and their levels")
        self.sprites, self.s_a, self.levels = sprites, s_a, levels
        if other_levels is not None:
            other_levels = torch.where(other_levels == levels, torch.zeros_like(other_levels), other_levels)
        self.other_levels, self.swap_share = other_levels, swap_share
        self.looks = look_groups(sprites.standing)
        self.group_of = [np.empty(0, np.int64)] * len(sprites.role)
        for members in self.looks:
            for i in members:
                self.group_of[i] = np.asarray(members)
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.sprites.role)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        sp, shot = self.sprites, int(self.sprites.shot[i])
        donor = int(self.rng.choice(self.group_of[i]))
        donor_shot = int(sp.shot[donor])
        track = {f: getattr(sp, f)[i] for f in FIELDS}
        canonical = {f"canonical_{k}": v[i] for k, v in sp.canonical.items()} if sp.canonical else {}
        level = self.levels[shot]
        if self.swap_share > 0 and self.other_levels[shot] > 0 and self.rng.random() < self.swap_share:
            track = {f: sp.other[f][i] for f in FIELDS}  # drawn from phase 0: its own canonical track
            canonical = {f"canonical_{k}": v for k, v in track.items()} if sp.canonical else {}
            level = self.other_levels[shot]
        return {**track, "standing": sp.standing[i], "role": sp.role[i], "s_a": self.s_a[shot], "motion_level": level,
                "donor_first": sp.rgba[donor, 0], "donor_s_a": self.s_a[donor_shot],
                "donor_level": self.levels[donor_shot], "donor_role": sp.role[donor], "standing_body": sp.standing_body[i],
                "donor_last_body": sp.body[donor, -1], **canonical}


def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def init_state(path: str) -> dict[str, torch.Tensor]:
    """The weights ``--init`` names: a checkpoint's EMA (or its raw weights), or a run's final ones."""
    d = Path(path)
    for name in ("ema.safetensors", "model.safetensors"):
        if (d / name).is_file() and (d / "optimizer.json").is_file():  # a checkpoint of the training loop
            return load_safetensors(d / name)
    return load_safetensors(run_dir(path, "sprite animator", "config.json") / WEIGHTS_NAME)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS), data_required=False)
    add_shot_arguments(parser, SHIPPED)
    parser.add_argument("--net", default=None, help="JSON overrides of the network preset, e.g. '{\"blocks\": 1}'")
    parser.add_argument("--init", default=None, metavar="RUN",
                        help="start from another run's weights: its final/ (or the run) or one of its "
                             "checkpoints/step_* (EMA weights); a run drawn without a reference cut-out gains one, at zero")


def run(args: argparse.Namespace) -> int:
    cfg = train_config_from_args(PRESETS[args.preset], args)
    decoder_dir = resolve_decoder(args.decoder)
    device = "cuda" if torch.cuda.is_available() and cfg.device != "cpu" else "cpu"
    parts = ActionParts(decoder_dir, device, decoder_dir / TEXT_TABLE)
    shots = train_shots(args, "train sprites", cfg.progress)
    s_a = compute_s_a(parts, shots, progress=cfg.progress)
    overrides = json.loads(args.net) if args.net else {}
    net_cfg = sprite_animator_preset("tiny" if args.preset == "tiny" else "default", **overrides)
    sprites = sprite_tensors(shots.rows, shots.frames.shape[1], args.render_workers, cfg.progress,
                             canonical=net_cfg.canonical_start, other=net_cfg.level_swap_share > 0)
    if args.preset == "tiny":  # the tiny net on the world's real sprites: only the shapes change
        net_cfg = dataclasses.replace(net_cfg, frames=sprites.rgba.shape[1], height=sprites.rgba.shape[2],
                                      width=sprites.rgba.shape[3], cond_dim=s_a.shape[-1])
    module = SpriteAnimator(SpriteAnimatorNet(net_cfg))
    if args.init and not args.resume:
        load_into(module, init_state(args.init))
    print(f"[sprites] {len(sprites.role)} character tracks of {len(shots.rows)} train shots "
          f"({sprites.skipped} not re-planned), {sum(p.numel() for p in module.parameters()) / 1e6:.2f} M parameters")
    # the stage play will show these characters on: the decoder's own, else the one `model pack` draws
    stage = (Stage.from_pretrained(decoder_dir / STAGE_DIR) if (decoder_dir / STAGE_DIR).is_dir()
             else world_stage((FRAME_H, FRAME_H * 3 // 2)))  # the tracks are drawn for 96-pixel frames
    levels = played_levels(shots.rows, sprites, stage, cfg.progress, args.render_workers)
    moved = (levels != shots.levels).float()
    print(f"[sprites] levels as play shows them: {moved.mean():.3f} of shots read another level than the "
          f"world's (mean {float((levels - shots.levels).float().mean()):+.3f})")
    other_levels = None
    if net_cfg.level_swap_share > 0:
        other_levels = played_levels(shots.rows, sprites, stage, cfg.progress, args.render_workers, other=True)
    data = SpriteShots(sprites, s_a, levels, cfg.seed, other_levels, net_cfg.level_swap_share)
    if data.other_levels is not None:  # what SpriteShots swaps in: readable, at another level than the shot's own
        asked = data.other_levels[data.other_levels > 0]
        print(f"[sprites] tracks in another manner: {len(asked)} shots readable at another level than their own, "
              f"levels {torch.bincount(asked, minlength=6)[1:].tolist()}; {net_cfg.level_swap_share:.2f} of items swapped")
    print(f"[sprites] {len(data.looks)} character looks, {len(sprites.role) / len(data.looks):.1f} tracks each: a "
          f"scene that goes on is trained from another track of the same look")
    result = train(module, data, collate, cfg, args.out, resume=args.resume)
    print(f"[sprites] step {result['step']}, loss {result['loss']}, final weights in {result['final_dir']}")
    return 0
