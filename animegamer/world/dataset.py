"""The on-disk world dataset (versioned) and its torch datasets.

Layout of a dataset directory (format "animegamer-world", version 1):
    meta.json                      format, version, sizes, seed, motion-level thresholds, counts
    turns.jsonl                    one row per turn: every annotation (see `turn_row`)
    shots/SSSSSS_TT.npz            frames uint8 (T, H, W, 3) of session S, turn T, stored as
                                   `delta`: frame 0 then frame-to-frame differences mod 256
                                   (2.3x smaller than raw frames once zlib-compressed, exact)
    sessions/SSSSSS.json           the rows of one session (lets an interrupted render resume)
Every file is written atomically; meta.json and turns.jsonl are written last, so a directory
with a meta.json is complete.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.atomic_io import write_json, write_jsonl, write_npz
from animegamer.world.batches import ShotBatch
from animegamer.world.cast import load_cast
from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.shot import render_session

FORMAT = "animegamer-world"
VERSION = 1


@dataclass(frozen=True)
class RenderConfig:
    sessions: int
    turns: int
    seed: int = 0
    height: int = 96
    width: int = 144
    frames: int = 17
    fps: int = 8
    workers: int = 2
    min_turns: int | None = None  # if set, sessions have min_turns..turns turns
    split: str | None = None  # if set, every session is planned as this split (e.g. "test": held-out templates)
    cast: str | None = None  # a cast file to play (e.g. drawn characters from `world characters`); None: the world's
    groups: float = 0.0  # share of verbs of one done by two side by side (sessions.plan_session); 0: films'

    def __post_init__(self) -> None:
        checks = [
            (self.sessions >= 1, f"sessions must be >= 1, got {self.sessions}"),
            (self.turns >= 1, f"turns must be >= 1, got {self.turns}"),
            (self.height >= 32 and self.height % 8 == 0, f"height must be a multiple of 8 >= 32, got {self.height}"),
            (self.width >= 32 and self.width % 8 == 0, f"width must be a multiple of 8 >= 32, got {self.width}"),
            (self.frames >= 5 and (self.frames - 1) % 4 == 0, f"frames must be 4k+1 (e.g. 17), got {self.frames}"),
            (self.fps >= 1, f"fps must be >= 1, got {self.fps}"),
            (self.workers >= 1, f"workers must be >= 1, got {self.workers}"),
            (self.min_turns is None or 1 <= self.min_turns <= self.turns,
             f"min_turns must be in 1..turns, got {self.min_turns}"),
            (self.split in (None, "train", "val", "test"), f"split must be train, val or test, got {self.split!r}"),
            (self.cast is None or Path(self.cast).is_file(), f"no cast file at {self.cast}"),
            (0.0 <= self.groups <= 1.0, f"groups must be a share in 0..1, got {self.groups}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


def _session_turns(cfg: RenderConfig, index: int) -> int:
    if cfg.min_turns is None:
        return cfg.turns
    rng = np.random.default_rng([cfg.seed, index, 7])
    return int(rng.integers(cfg.min_turns, cfg.turns + 1))


def _render_one(args: tuple[RenderConfig, int, str]) -> list[dict]:
    cfg, index, out = args

    torch.set_num_threads(1)
    session_json = Path(out) / "sessions" / f"{index:06d}.json"
    if session_json.exists():  # resuming an interrupted render
        return json.loads(session_json.read_text())
    rows = []
    for shot in render_session(cfg.seed, index, _session_turns(cfg, index), cfg.height, cfg.width, cfg.frames, cfg.fps,
                               split=cfg.split, cast_file=cfg.cast, groups=cfg.groups):
        rel = f"shots/{index:06d}_{shot.row['turn']:02d}.npz"
        write_npz(Path(out) / rel, delta=encode_delta(shot.frames))
        row = dict(shot.row, shot=rel, flow_magnitude=flow_magnitude(shot.frames))
        rows.append(row)
    write_json(session_json, rows)
    return rows


def render_dataset(cfg: RenderConfig, out: str | os.PathLike, progress: bool = True) -> dict:
    """Render cfg.sessions sessions into `out` with cfg.workers processes; returns meta."""

    out = Path(out)
    if (out / "meta.json").exists():
        meta = json.loads((out / "meta.json").read_text())
        raise FileExistsError(f"{out} already holds a finished dataset ({meta.get('turns_total')} turns); "
                              "choose another --out or delete it")
    (out / "shots").mkdir(parents=True, exist_ok=True)
    (out / "sessions").mkdir(exist_ok=True)
    quantizer = MotionQuantizer.load()
    cast = load_cast(cfg.cast)  # a bad cast file fails here, before any worker starts
    t0 = time.perf_counter()
    jobs = [(cfg, i, str(out)) for i in range(cfg.sessions)]
    rows: list[dict] = []
    bar = tqdm(total=cfg.sessions, desc="rendering sessions", unit="session", disable=not progress)
    if cfg.workers == 1:
        results: Iterator[list[dict]] = map(_render_one, jobs)
        for r in results:
            rows.extend(r)
            bar.update(1)
    else:
        with mp.get_context("spawn").Pool(cfg.workers) as pool:
            for r in pool.imap_unordered(_render_one, jobs, chunksize=1):
                rows.extend(r)
                bar.update(1)
    bar.close()
    seconds = time.perf_counter() - t0
    rows.sort(key=lambda r: (r["session"], r["turn"]))
    for r in rows:
        r["motion_level"] = quantizer.level(r["flow_magnitude"])
    write_jsonl(out / "turns.jsonl", rows)
    nbytes = sum(p.stat().st_size for p in (out / "shots").glob("*.npz"))
    meta = {
        "format": FORMAT, "version": VERSION, "seed": cfg.seed, "height": cfg.height, "width": cfg.width,
        "frames": cfg.frames, "fps": cfg.fps, "sessions": cfg.sessions, "max_turns": cfg.turns,
        "turns_total": len(rows), "motion_thresholds": list(quantizer.thresholds),
        "render_seconds": round(seconds, 2), "shots_per_second": round(len(rows) / max(seconds, 1e-9), 2),
        "bytes_per_1000_shots": int(nbytes * 1000 / max(len(rows), 1)),
        "level_counts": {str(k): sum(r["motion_level"] == k for r in rows) for k in range(1, 6)},
    }
    if cfg.split is not None:
        meta["split"] = cfg.split
    if cfg.cast is not None:
        meta["cast"] = {"file": str(cfg.cast), "sha256": hashlib.sha256(Path(cfg.cast).read_bytes()).hexdigest(),
                        "characters": sorted(cast)}
    write_json(out / "meta.json", meta)
    return meta


def encode_delta(frames: np.ndarray) -> np.ndarray:
    """Frame 0, then differences of consecutive frames modulo 256 (lossless)."""
    delta = frames.copy()
    delta[1:] = frames[1:] - frames[:-1]  # uint8 arithmetic wraps: exact round trip
    return delta


def decode_delta(delta: np.ndarray) -> np.ndarray:
    return np.cumsum(delta, axis=0, dtype=np.uint8)


def relabel_motion_levels(root: str | os.PathLike, quantizer: "MotionQuantizer") -> dict[str, int]:
    """Recompute every turn's motion level from its stored flow magnitude (atomic rewrite)."""
    world = WorldDataset(root)
    for r in world.rows:
        r["motion_level"] = quantizer.level(r["flow_magnitude"])
    counts = {str(k): sum(r["motion_level"] == k for r in world.rows) for k in range(1, 6)}
    write_jsonl(world.root / "turns.jsonl", world.rows)
    write_json(world.root / "meta.json", dict(world.meta, motion_thresholds=list(quantizer.thresholds),
                                               level_counts=counts))
    return counts


class WorldDataset:
    """Read access to a rendered dataset directory (validates format and version)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        meta_path = self.root / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.root} is not a finished world dataset (no meta.json); "
                                    "render one with `animegamer world render --out DIR`")
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("format") != FORMAT or self.meta.get("version") != VERSION:
            raise ValueError(f"{self.root}: expected {FORMAT} v{VERSION}, found "
                             f"{self.meta.get('format')} v{self.meta.get('version')}")
        with open(self.root / "turns.jsonl") as f:
            self.rows = [json.loads(line) for line in f]

    def frames(self, row: dict) -> np.ndarray:
        with np.load(self.root / row["shot"]) as z:
            return decode_delta(z["delta"]) if "delta" in z else z["frames"]

    def split_rows(self, split: str | None) -> list[dict]:
        if split not in (None, "train", "val", "test"):
            raise ValueError(f"split must be train, val, test or None, got {split!r}")
        return [r for r in self.rows if split is None or r["split"] == split]

    def sessions(self, split: str | None = None) -> list[list[dict]]:
        by: dict[int, list[dict]] = {}
        for r in self.split_rows(split):
            by.setdefault(r["session"], []).append(r)
        return [sorted(v, key=lambda r: r["turn"]) for _, v in sorted(by.items())]


class ShotDataset(torch.utils.data.Dataset):
    """One item per shot: frames (T, H, W, 3) uint8 and its annotations."""

    def __init__(self, root: str | os.PathLike, split: str | None = "train", limit: int | None = None):
        self.world = WorldDataset(root)
        self.rows = self.world.split_rows(split)[:limit]
        if not self.rows:
            raise ValueError(f"{root}: no shots in split {split!r}")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        return {"frames": torch.from_numpy(self.world.frames(row)), "row": row}


def collate_shots(samples: list[dict[str, Any]]) -> ShotBatch:
    frames = torch.stack([s["frames"] for s in samples])  # (B, T, H, W, 3) uint8
    frames = frames.permute(0, 1, 4, 2, 3).float().div(127.5).sub(1.0)  # (B, T, 3, H, W) in [-1, 1]
    rows = [s["row"] for s in samples]
    return ShotBatch(
        frames=frames,
        motion_text=[r["motion_text"] for r in rows],
        caption=[r["caption"] for r in rows],
        motion_level=torch.tensor([r["motion_level"] for r in rows], dtype=torch.long),
        character=[r["characters"][0] for r in rows],
        place=[r["place"] for r in rows],
        verb=[r["motion"] for r in rows],
        characters=[list(r["characters"]) for r in rows],
        time=[r.get("time", "") for r in rows],  # "" where a dataset does not know it
    )


def heldout_shots(root: str | os.PathLike, desc: str, progress: bool = True) -> Iterator[dict[str, Any]]:
    """Every shot of the val and test splits a world has ({"frames", "row"}, loaded one at a time):
    what an evaluator's fit is graded on."""
    for split in ("val", "test"):
        try:
            ds = ShotDataset(root, split)
        except ValueError:  # the world has no shot of this split
            continue
        for i in tqdm(range(len(ds)), desc=f"{desc} {split}", disable=not progress, dynamic_ncols=True):
            yield ds[i]


class SessionDataset(torch.utils.data.Dataset):
    """One item per session: its rows in turn order (frames loaded on demand via .world)."""

    def __init__(self, root: str | os.PathLike, split: str | None = "train"):
        self.world = WorldDataset(root)
        self.items = self.world.sessions(split)
        if not self.items:
            raise ValueError(f"{root}: no sessions in split {split!r}")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> list[dict]:
        return self.items[i]
