"""`animegamer bench-ingest`: `ingest` graded on a film whose truth is known, and timed.

    result = bench_ingest(sessions=40, seed=9300)

Renders a world (``world render``), concatenates its sessions' shots into one MP4 with hard cuts,
each drawing held for 3 frames at 24 fps (anime "on threes"), and ingests it. Graded against the
world's own rows:
- the cuts found (precision, recall; recall per kind of cut: a new session, a new place, a new time of
  day, a new camera, or the same scene going on, where only the action changes);
- the clips: how many start exactly on a world shot, and their motion level against the world's;
- the annotation round trip: the world's labels written as an annotation file (by time range), applied
  by a second `ingest --annotations` run, reproduce the rows' fields;
- speed: seconds of video per second of work, and source frames per second.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from animegamer.core.atomic_io import write_json, write_text
from animegamer.core.video_io import save_mp4
from animegamer.ingest.annotations import COLUMNS
from animegamer.ingest.build import IngestConfig, ingest
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset
from animegamer.world.rules import STATE_NAMES

HOLD = 3  # each drawing held 3 frames: 8 drawings a second at 24 fps
FIELDS = ("characters", "motion", "adverb", "motion_text", "place", "time", "deltas", "instruction", "caption")


def world_film(world: WorldDataset, path: Path, sessions: int | None = None) -> list[dict[str, Any]]:
    """The world's sessions, shot after shot, as one 24 fps MP4; returns the rows in film order."""
    rows = [r for s in world.sessions()[:sessions] for r in s]
    frames = np.concatenate([world.frames(r) for r in rows])
    save_mp4(np.repeat(frames, HOLD, axis=0), path, fps=world.meta["fps"] * HOLD)
    return rows


def cut_kind(row: dict[str, Any], prev: dict[str, Any]) -> str:
    if row["session"] != prev["session"]:
        return "new session"
    if row["place_changed"]:
        return "new place"
    if row["time_changed"]:
        return "new time of day"
    if row["camera"] != prev["camera"]:
        return "new camera"
    return "same scene"


def world_annotations(rows: list[dict[str, Any]], film: str, shot_seconds: float) -> str:
    """The world's labels as an annotation CSV, one row per world shot by time range."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for k, r in enumerate(rows):
        w.writerow({"source": film, "start_s": f"{k * shot_seconds:.4f}", "end_s": f"{(k + 1) * shot_seconds:.4f}",
                    "characters": ";".join(r["characters"]), "motion_text": r["motion_text"], "motion": r["motion"],
                    "adverb": r["adverb"], "place": r["place"], "time": r["time"],
                    **{k2: r["deltas"][k2] for k2 in STATE_NAMES}, "instruction": r["instruction"],
                    "caption": r["caption"]})
    return buf.getvalue()


def grade(truth: list[dict[str, Any]], data: WorldDataset, frames_per_shot: int) -> dict[str, Any]:
    """Cuts, clip alignment, levels and (if annotated) fields of an ingested world film."""
    source = json.loads(next((data.root / "sources").glob("*.json")).read_text())
    true_cuts = {frames_per_shot * k: cut_kind(truth[k], truth[k - 1]) for k in range(1, len(truth))}
    found = set(source["cuts"])
    hit = found & set(true_cuts)
    kinds: dict[str, list[int]] = {}
    for at, kind in true_cuts.items():
        kinds.setdefault(kind, [0, 0])
        kinds[kind][0] += at in found
        kinds[kind][1] += 1
    aligned, level_ok, same = 0, 0, {f: 0 for f in FIELDS}
    annotated = 0
    for r in data.rows:
        start = round(r["source"]["start_s"] * data.meta["fps"])
        if start % frames_per_shot:
            continue
        aligned += 1
        t = truth[start // frames_per_shot]
        level_ok += r["motion_level"] == t["motion_level"]
        if r.get("annotated"):
            annotated += 1
            for f in FIELDS:
                same[f] += (r.get(f) or None) == (t[f] or None)  # the world writes "" for no adverb
    return {
        "cuts": {"true": len(true_cuts), "found": len(found),
                 "precision": len(hit) / max(len(found), 1), "recall": len(hit) / max(len(true_cuts), 1),
                 "recall_by_kind": {k: {"found": a, "of": b, "recall": a / b} for k, (a, b) in sorted(kinds.items())}},
        "clips": {"world_shots": len(truth), "clips": len(data.rows), "on_a_world_shot": aligned,
                  "level_agreement": level_ok / max(aligned, 1)},
        "annotations": ({"clips_annotated": annotated, **{f"{f}_equal": same[f] / annotated for f in FIELDS}}
                        if annotated else None),
    }


def bench_ingest(sessions: int = 40, turns: int = 5, seed: int = 9300, workers: int = 2,
                 progress: bool = True) -> dict[str, Any]:
    """The benchmark of the module doc, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="animegamer-bench-ingest-") as tmp:
        root = Path(tmp)
        render_dataset(RenderConfig(sessions=sessions, turns=turns, seed=seed, workers=workers), root / "world",
                       progress=progress)
        world = WorldDataset(root / "world")
        film = root / "film.mp4"
        truth = world_film(world, film)
        config = IngestConfig(height=world.meta["height"], width=world.meta["width"], frames=world.meta["frames"],
                              fps=world.meta["fps"], session_turns=turns)
        t0 = time.perf_counter()
        meta = ingest([film], root / "ingested", config, progress=progress)
        wall = time.perf_counter() - t0
        notes = write_text(root / "world_labels.csv",
                           world_annotations(truth, film.name, world.meta["frames"] / world.meta["fps"]))
        ingest([film], root / "ingested", config, annotations=notes, progress=False)
        result = grade(truth, WorldDataset(root / "ingested"), world.meta["frames"])
        seconds = meta["ingest"]["video_seconds"]
        result["speed"] = {"video_seconds": seconds, "wall_seconds": wall, "x_real_time": seconds / wall,
                           "source_fps_processed": seconds * world.meta["fps"] * HOLD / wall,
                           "film": f"{world.meta['width']}x{world.meta['height']} at {world.meta['fps'] * HOLD} fps"}
        result["world"] = {"sessions": sessions, "turns": turns, "seed": seed}
    return result


def format_ingest(r: dict[str, Any]) -> str:
    c, k, s = r["cuts"], r["clips"], r["speed"]
    head = (f"world film: {r['world']['sessions']} sessions x {r['world']['turns']} turns (seed {r['world']['seed']}), "
            f"{s['film']}, {s['video_seconds']:.0f} s")
    lines = [head,
             f"cuts: precision {c['precision']:.3f}, recall {c['recall']:.3f} ({c['found']} found, {c['true']} true)"]
    lines += [f"  {kind:<16} {v['found']:>4} of {v['of']:<4} recall {v['recall']:.3f}"
              for kind, v in c["recall_by_kind"].items()]
    lines.append(f"clips: {k['clips']} of {k['world_shots']} world shots, {k['on_a_world_shot']} start on one; "
                 f"motion level = the world's: {k['level_agreement']:.3f}")
    if r["annotations"]:
        a = r["annotations"]
        lines.append(f"annotation round trip ({a['clips_annotated']} clips): "
                     + ", ".join(f"{f} {a[f + '_equal']:.3f}" for f in FIELDS))
    lines.append(f"speed: {s['x_real_time']:.1f}x real time ({s['source_fps_processed']:.0f} source frames/s), "
                 "decoding, cuts, clips and flow included")
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of `animegamer bench-ingest`."""
    ap.add_argument("--sessions", type=int, default=40, help="world sessions in the film (default: %(default)s)")
    ap.add_argument("--turns", type=int, default=5, help="turns per session (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=9300, help="the world's seed (default: %(default)s)")
    ap.add_argument("--out", default=None, metavar="FILE.json", help="also write the result as JSON")
    ap.add_argument("--no-progress", action="store_true")


def run(a: argparse.Namespace) -> int:
    """`animegamer bench-ingest`."""
    result = bench_ingest(a.sessions, a.turns, a.seed, progress=not a.no_progress)
    if a.out:
        write_json(a.out, result)
    print(format_ingest(result))
    return 0
