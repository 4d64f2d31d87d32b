"""Shot cuts (PySceneDetect) and the clips taken from each shot, streamed frame by frame.

    cutter = ClipCutter(CutConfig(), fps=8.0, clip_frames=17)
    for frame in video.frames(...):
        for clip in cutter.push(frame): ...
    for clip in cutter.finish(): ...

The detector is PySceneDetect's AdaptiveDetector: a frame starts a new shot when its content change
stands out from the changes around it, so fast action inside a shot is not cut. A shot of at least
``clip_frames`` frames gives clips of ``clip_frames`` consecutive frames, starting at its first frame
and every ``stride`` frames after (non-overlapping by default). A clip is handed out as soon as
no cut can fall inside it any more (the detector decides a few frames late), so memory holds one
clip and a few frames, whatever the film's length.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from scenedetect import AdaptiveDetector, ContentDetector, FrameTimecode


@dataclass(frozen=True)
class CutConfig:
    """PySceneDetect's AdaptiveDetector settings. The defaults were chosen on a world film (seed 9200,
    docs/results.md#your-own-films); PySceneDetect's own (3.0, 15, no edges) cut less often."""

    adaptive_threshold: float = 2.0  # how many times the surrounding frames' change a cut must exceed
    min_content_val: float = 3.0  # and at least this much change (0..255)
    window: int = 2  # frames on each side the change is compared with
    min_shot_frames: int = 4  # two cuts are at least this many frames apart
    edges: bool = True  # count the change of edges too, not only hue / saturation / luma (drawn outlines move at a cut)


@dataclass
class Clip:
    shot: int  # the shot's number in the video (0-based, counted over every detected shot)
    index_in_shot: int
    start: int  # first frame, in model frames from the video's start
    frames: np.ndarray  # uint8 (clip_frames, H, W, 3)


class ClipCutter:
    def __init__(self, config: CutConfig, fps: float, clip_frames: int, stride: int | None = None) -> None:
        self.config, self.fps, self.clip_frames = config, float(fps), int(clip_frames)
        self.stride = int(stride or clip_frames)
        if self.clip_frames < 2 or self.stride < 1:
            raise ValueError(f"clip_frames must be >= 2 and stride >= 1, got {clip_frames} and {stride}")
        self.detector = AdaptiveDetector(adaptive_threshold=config.adaptive_threshold,
                                         min_content_val=config.min_content_val, window_width=config.window,
                                         min_scene_len=config.min_shot_frames,
                                         weights=ContentDetector.Components(1.0, 1.0, 1.0, 1.0 if config.edges else 0.0))
        self.delay = config.window + 1  # frames after which the detector has decided about a frame
        self.n = 0  # frames pushed
        self.buffer: list[np.ndarray] = []
        self.buffer_start = 0  # frame number of buffer[0]
        self.shot, self.shot_start, self.next_clip, self.clip_in_shot = 0, 0, 0, 0
        self.cuts: list[int] = []  # the first frame of every shot after the first

    def _clips_until(self, end: int) -> list[Clip]:
        """Clips of the current shot that lie wholly before frame ``end``."""
        out = []
        while self.next_clip + self.clip_frames <= end:
            a = self.next_clip - self.buffer_start
            out.append(Clip(self.shot, self.clip_in_shot, self.next_clip,
                            np.stack(self.buffer[a:a + self.clip_frames])))
            self.clip_in_shot += 1
            self.next_clip += self.stride
        return out

    def _drop_before(self, frame: int) -> None:
        k = min(max(0, frame - self.buffer_start), len(self.buffer))
        del self.buffer[:k]
        self.buffer_start += k

    def _cut(self, at: int) -> list[Clip]:
        out = self._clips_until(at)
        self.cuts.append(at)
        self.shot, self.shot_start, self.next_clip, self.clip_in_shot = self.shot + 1, at, at, 0
        return out

    def push(self, frame: np.ndarray) -> list[Clip]:
        """Feed the next frame (uint8 RGB); the clips that became final."""
        i = self.n
        self.n += 1
        self.buffer.append(frame)
        out: list[Clip] = []
        for tc in self.detector.process_frame(FrameTimecode(i, fps=self.fps), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)):
            out += self._cut(int(tc.frame_num))
        out += self._clips_until(self.n - self.delay)
        self._drop_before(min(self.next_clip, self.n - self.delay - 1))
        return out

    def finish(self) -> list[Clip]:
        """The end of the video: the last shot's remaining clips."""
        out: list[Clip] = []
        if self.n:
            for tc in self.detector.post_process(FrameTimecode(self.n - 1, fps=self.fps)) or []:
                out += self._cut(int(tc.frame_num))
        out += self._clips_until(self.n)
        self.buffer.clear()
        return out

    @property
    def shots(self) -> int:
        """Shots detected so far (the current one included)."""
        return self.shot + 1 if self.n else 0
