"""Decode a video file at the model's frame rate and size, streamed (imageio-ffmpeg).

ffmpeg does the work: its ``fps`` filter picks the source frame nearest each model-frame time (a
24 fps film animated "on threes" gives back exactly its drawings at 8 fps), then ``scale`` +
``crop`` resize the picture to cover the model's size and cut the centre.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import imageio_ffmpeg
import numpy as np

from animegamer.core.errors import UserFacingError


class IngestError(ValueError, UserFacingError):
    """A video or an annotation file cannot be ingested (the message says which and why)."""


@dataclass(frozen=True)
class VideoInfo:
    path: Path
    fps: float
    width: int
    height: int
    duration_s: float


def probe(path: str | os.PathLike) -> VideoInfo:
    """What ffmpeg says of the file, or IngestError."""
    p = Path(path)
    if not p.is_file():
        raise IngestError(f"{p}: no such file")
    try:
        reader = imageio_ffmpeg.read_frames(str(p))
        meta = next(reader)
        reader.close()
    except (OSError, RuntimeError, StopIteration) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IngestError(f"{p}: ffmpeg cannot decode it as a video ({first})") from None
    size = meta.get("size") or (0, 0)
    fps, duration = float(meta.get("fps") or 0.0), float(meta.get("duration") or 0.0)
    if not size[0] or fps <= 0 or duration <= 0:
        raise IngestError(f"{p}: no video stream ffmpeg can read (size {size}, fps {fps}, duration {duration} s)")
    return VideoInfo(p, fps, int(size[0]), int(size[1]), duration)


def frames(path: str | os.PathLike, fps: float, height: int, width: int) -> Iterator[np.ndarray]:
    """The video's frames at ``fps``, each uint8 (height, width, 3) RGB, centre-cropped to cover."""
    vf = (f"fps={fps:g},scale={width}:{height}:force_original_aspect_ratio=increase:flags=area,"
          f"crop={width}:{height}")
    reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24", output_params=["-vf", vf])
    try:
        next(reader)  # the meta dict
        for raw in reader:
            yield np.frombuffer(raw, np.uint8).reshape(height, width, 3)
    except (OSError, RuntimeError) as e:
        raise IngestError(f"{path}: decoding failed part-way ({str(e).strip().splitlines()[0]})") from None
    finally:
        reader.close()


def file_hash(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """blake2b of the file's bytes (hex): names the source in the dataset and lets a rerun skip it."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
