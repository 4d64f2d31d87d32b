"""Write animation shots to MP4 (imageio-ffmpeg, H.264) and GIF, atomically.

Frames are uint8 (T, H, W, 3). Each file is written under a temporary name in the target
directory and renamed into place, so a crash never leaves a torn video behind.
"""
from __future__ import annotations

import os
from pathlib import Path

import cv2
import imageio.v2 as imageio
import numpy as np
from PIL import Image

from animegamer.core.atomic_io import atomic_write_path


def _check_frames(frames: np.ndarray) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    if frames.shape[0] < 1:
        raise ValueError("frames must hold at least one frame")
    return frames


def save_mp4(frames: np.ndarray, path: str | os.PathLike, fps: int = 8, quality: int = 8) -> Path:
    """H.264 / yuv420p MP4 (plays in browsers). Odd sizes are padded to even by edge replication."""

    frames = _check_frames(frames)
    h, w = frames.shape[1:3]
    if h % 2 or w % 2:  # yuv420p needs even sizes
        frames = np.pad(frames, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)), mode="edge")

    def write(tmp: str) -> None:
        writer = imageio.get_writer(
            tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264", quality=quality,
            pixelformat="yuv420p", macro_block_size=1, ffmpeg_log_level="error",
        )
        try:
            for f in frames:
                writer.append_data(f)
        finally:
            writer.close()

    return atomic_write_path(Path(path), write)


def save_gif(frames: np.ndarray, path: str | os.PathLike, fps: int = 8) -> Path:
    """Looping GIF (PIL)."""

    frames = _check_frames(frames)
    images = [Image.fromarray(f) for f in frames]

    def write(tmp: str) -> None:
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                       duration=int(round(1000 / fps)), loop=0, optimize=False)

    return atomic_write_path(Path(path), write)


def read_video(path: str | os.PathLike) -> np.ndarray:
    """Read an MP4 or GIF back as uint8 (T, H, W, 3) (for tests and evaluation)."""

    path = Path(path)
    if path.suffix.lower() == ".gif":
        frames = np.stack([np.asarray(f)[..., :3] for f in imageio.mimread(str(path))])
    else:
        reader = imageio.get_reader(str(path), format="FFMPEG")
        try:
            frames = np.stack([np.asarray(f) for f in reader])
        finally:
            reader.close()
    return frames.astype(np.uint8)


def read_middle_frame(path: str | os.PathLike) -> np.ndarray:
    """A video's middle frame, uint8 (H, W, 3), for thumbnails: OpenCV decodes in-process (a fraction of
    read_video's time, which starts an ffmpeg process); its colours may differ from read_video's by a level."""
    cap = cv2.VideoCapture(str(path))
    try:
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        if n > 1:
            cap.set(cv2.CAP_PROP_POS_FRAMES, n // 2)
        ok, frame = cap.read()
    finally:
        cap.release()
    if not ok:
        raise ValueError(f"cannot read a frame of {path}")
    return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
