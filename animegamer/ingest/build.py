"""`animegamer ingest`: video files -> a dataset in the world's format, which every phase reads.

    meta = ingest(["film1.mp4", "film2.mkv"], "data/my_films", IngestConfig(), annotations="notes.csv")

Per video: decode at the model's fps and size (video.py), cut into shots and clips (shots.py),
measure each clip's motion level with the world's own DIS-flow code (world/flow.py), write each clip
as ``shots/<video hash>_<n>.npz`` and, last, ``sources/<video hash>.json`` (its clips and cuts). A
video whose JSON exists is skipped, so an interrupted ingest continues where it stopped (a video cut
short is redone from its start; its leftover clips are replaced).

Then the dataset: consecutive clips of one video form sessions of ``session_turns`` turns (the engine
learns from real history); sessions are split train / val / test in the order of a hash of (video,
session), val and test holding at least one session each from 3 sessions on; the
motion levels use the world's thresholds, or ``refit_levels`` fits quintiles to these clips; the
annotations, if given, fill in what a person (or a tool) said of each clip; everything not known is
None or empty, never invented. ``turns.jsonl`` and ``meta.json`` are written last (atomically), so a
directory with a meta.json is complete. ``annotations_template.csv`` lists every clip with what was
measured, for a person to complete and pass back with ``--annotations``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from animegamer.core.atomic_io import write_json, write_jsonl, write_npz
from animegamer.ingest.annotations import apply_annotations, read_annotations, write_template
from animegamer.ingest.shots import ClipCutter, CutConfig
from animegamer.ingest.video import IngestError, file_hash, frames, probe
from animegamer.world.dataset import FORMAT, VERSION, encode_delta
from animegamer.world.flow import MotionQuantizer, flow_magnitude

TEMPLATE_NAME = "annotations_template.csv"


@dataclass(frozen=True)
class IngestConfig:
    height: int = 96  # the model's shot size, frame count and rate (as `world render`)
    width: int = 144
    frames: int = 17
    fps: int = 8
    stride: int | None = None  # model frames between the starts of a long shot's clips (default: frames)
    session_turns: int = 5  # consecutive clips of a video per session
    val_fraction: float = 0.05
    test_fraction: float = 0.05
    refit_levels: bool = False  # fit the motion-level thresholds to these clips instead of the world's
    cuts: CutConfig = field(default_factory=CutConfig)

    def __post_init__(self) -> None:
        checks = [
            (self.height >= 32 and self.height % 8 == 0, f"height must be a multiple of 8 >= 32, got {self.height}"),
            (self.width >= 32 and self.width % 8 == 0, f"width must be a multiple of 8 >= 32, got {self.width}"),
            (self.frames >= 5 and (self.frames - 1) % 4 == 0, f"frames must be 4k+1 (e.g. 17), got {self.frames}"),
            (self.fps >= 1, f"fps must be >= 1, got {self.fps}"),
            (self.stride is None or self.stride >= 1, f"stride must be >= 1, got {self.stride}"),
            (self.session_turns >= 1, f"session turns must be >= 1, got {self.session_turns}"),
            (0 <= self.val_fraction and 0 <= self.test_fraction and self.val_fraction + self.test_fraction < 1,
             f"val and test fractions must be >= 0 and sum below 1, got {self.val_fraction}, {self.test_fraction}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


def config_key(config: IngestConfig) -> dict[str, Any]:
    """What decides a video's clips (a rerun with other settings redoes the video)."""
    d = asdict(config)
    for k in ("session_turns", "val_fraction", "test_fraction", "refit_levels"):
        d.pop(k)
    return d


def _source_json(out: Path, digest: str) -> Path:
    return out / "sources" / f"{digest[:16]}.json"


def ingest_video(path: Path, digest: str, out: Path, config: IngestConfig, progress: bool = True) -> dict[str, Any]:
    """One video's clips into ``out/shots`` and its record into ``out/sources`` (written last)."""
    info = probe(path)
    stem = digest[:16]
    for old in (out / "shots").glob(f"{stem}_*.npz"):  # left by an interrupted run of this video
        old.unlink()
    cutter = ClipCutter(config.cuts, config.fps, config.frames, config.stride)
    clips: list[dict[str, Any]] = []

    def keep(batch: list) -> None:
        for c in batch:
            rel = f"shots/{stem}_{len(clips):05d}.npz"
            write_npz(out / rel, delta=encode_delta(c.frames))
            clips.append({"shot": rel, "flow_magnitude": flow_magnitude(c.frames),
                          "source": {"file": path.name, "hash": digest, "shot": c.shot, "clip_in_shot": c.index_in_shot,
                                     "start_s": round(c.start / config.fps, 4),
                                     "end_s": round((c.start + config.frames) / config.fps, 4)}})

    t0 = time.perf_counter()
    total = round(info.duration_s * config.fps)
    bar = tqdm(total=total, desc=f"ingest {path.name}", unit="frame", disable=not progress, dynamic_ncols=True)
    for frame in frames(path, config.fps, config.height, config.width):
        keep(cutter.push(frame))
        bar.update(1)
    keep(cutter.finish())
    bar.close()
    if cutter.n < config.frames:
        raise IngestError(f"{path}: {cutter.n} frames at {config.fps} fps, shorter than one clip of {config.frames}")
    record = {"file": str(path), "name": path.name, "hash": digest, "fps": info.fps, "size": [info.width, info.height],
              "duration_s": info.duration_s, "model_frames": cutter.n, "shots": cutter.shots,
              "cuts": cutter.cuts, "clips": clips, "seconds": round(time.perf_counter() - t0, 3),
              "config": config_key(config)}
    write_json(_source_json(out, digest), record)
    return record


def _session_key(digest: str, first_clip: int) -> float:
    return int.from_bytes(hashlib.blake2b(f"{digest}:{first_clip}".encode(), digest_size=8).digest(), "little") / 2**64


def _splits(keys: list[float], config: IngestConfig) -> list[str]:
    """Sessions in the order of their hash: the first ceil(test x n) are test, the next ceil(val x n)
    val (each at least one when a fraction is set and there are 3 sessions or more), the rest train."""
    n = len(keys)
    n_test = max(math.ceil(config.test_fraction * n), int(config.test_fraction > 0 and n >= 3))
    n_val = max(math.ceil(config.val_fraction * n), int(config.val_fraction > 0 and n >= 3))
    n_test, n_val = (0, 0) if n_test + n_val >= n else (n_test, n_val)
    out = ["train"] * n
    for rank, i in enumerate(sorted(range(n), key=keys.__getitem__)):
        out[i] = "test" if rank < n_test else "val" if rank < n_test + n_val else "train"
    return out


def _rows(records: list[dict[str, Any]], config: IngestConfig) -> list[dict[str, Any]]:
    """The clips of every video as dataset rows; what a video cannot tell is None / empty."""
    chunks = [(rec, k) for rec in records for k in range(0, len(rec["clips"]), config.session_turns)]
    splits = _splits([_session_key(rec["hash"], k) for rec, k in chunks], config)
    rows = []
    for session, ((rec, k), split) in enumerate(zip(chunks, splits)):
        for turn, c in enumerate(rec["clips"][k:k + config.session_turns]):
            rows.append({
                "session": session, "turn": turn, "split": split, "seed": None,
                "instruction": None, "template_id": None, "characters": [], "motion": None, "adverb": None,
                "motion_text": None, "place": None, "time": None, "props": [], "place_changed": None,
                "time_changed": None, "camera": None, "looks": {}, "deltas": None, "states_before": None,
                "states_after": None, "caption": None, "annotated": False, **c})
    return rows


def ingest(videos: Sequence[str | os.PathLike], out: str | os.PathLike, config: IngestConfig | None = None,
           annotations: str | os.PathLike | None = None, progress: bool = True) -> dict[str, Any]:
    """The module doc's ingest; returns meta. Bad files and annotations fail before anything is written."""
    config = config or IngestConfig()
    out = Path(out)
    if not videos:
        raise IngestError("no video files given")
    meta_path = out / "meta.json"
    if meta_path.exists() and "ingest" not in json.loads(meta_path.read_text()):
        raise IngestError(f"{out} holds a rendered world dataset; ingest into another --out")
    paths = [Path(v) for v in videos]
    for p in paths:
        info = probe(p)  # every file readable before anything is written
        if info.duration_s * config.fps < config.frames:
            raise IngestError(f"{p}: {info.duration_s:.2f} s long, shorter than one clip "
                              f"({config.frames} frames at {config.fps} fps = {config.frames / config.fps:.2f} s)")
    digests = [file_hash(p) for p in paths]
    twice = {p.name for p, d in zip(paths, digests) if digests.count(d) > 1}
    if twice:
        raise IngestError(f"the same video is given twice: {', '.join(sorted(twice))}")
    notes = read_annotations(annotations) if annotations else None  # a bad file fails before any work
    (out / "shots").mkdir(parents=True, exist_ok=True)
    (out / "sources").mkdir(exist_ok=True)
    records, wall, done_before = [], 0.0, 0
    for p, d in zip(paths, digests):
        src = _source_json(out, d)
        done = json.loads(src.read_text()) if src.exists() else None
        if done is not None and done.get("config") == config_key(config):
            records.append(done)
            done_before += 1
            continue
        rec = ingest_video(p, d, out, config, progress)
        wall += rec["seconds"]
        records.append(rec)
    rows = _rows(records, config)
    if not rows:
        raise IngestError("no shot of these videos is long enough for one clip "
                          f"({config.frames} frames at {config.fps} fps); nothing to train on")
    quantizer = MotionQuantizer.fit([r["flow_magnitude"] for r in rows]) if config.refit_levels \
        else MotionQuantizer.load()
    for r in rows:
        r["motion_level"] = quantizer.level(r["flow_magnitude"])
    durations = {k: r["duration_s"] for r in records for k in (r["name"], Path(r["name"]).stem)}
    applied = apply_annotations(rows, notes, durations) if notes is not None else {"annotation_rows": 0,
                                                                                   "clips_annotated": 0}
    write_template(out / TEMPLATE_NAME, rows)
    write_jsonl(out / "turns.jsonl", rows)
    seconds_of_video = sum(r["duration_s"] for r in records)
    meta = {
        "format": FORMAT, "version": VERSION, "seed": None, "height": config.height, "width": config.width,
        "frames": config.frames, "fps": config.fps, "sessions": rows[-1]["session"] + 1,
        "max_turns": config.session_turns, "turns_total": len(rows), "motion_thresholds": list(quantizer.thresholds),
        "level_counts": {str(k): sum(r["motion_level"] == k for r in rows) for k in range(1, 6)},
        "ingest": {
            "config": config_key(config), "annotations": str(annotations) if annotations else None, **applied,
            "sources": [{"file": r["file"], "hash": r["hash"], "duration_s": r["duration_s"], "shots": r["shots"],
                         "clips": len(r["clips"])} for r in records],
            "video_seconds": round(seconds_of_video, 3), "videos_skipped_as_done": done_before,
            "seconds_this_run": round(wall, 3),
        },
    }
    write_json(meta_path, meta)
    return meta
