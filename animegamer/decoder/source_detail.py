"""Source detail: the real picture a shot was drawn from, carried along the decoded shot's motion.

Why (a deliberate addition to the paper's decoder, ``SamplerConfig.source_detail``): the decoder
draws what its autoencoder can draw, and the default 4x autoencoder (4 latent channels, trained on a
CPU budget) loses colour and outline: its round trip turns a yellow shirt orange and pink hair beige,
so a shot drawn from the TRUE representation of a frame is already hard to name
(docs/history.md#source-detail). But a shot drawn from an anchor has that frame in full: a true training
frame of the bank, or a player's character rendered by the world. So the shot's first frame becomes
that picture, and every later frame k gets the picture's detail (the picture minus the decoded first
frame) moved along the decoded shot's own optical flow from frame k back to frame 0 (OpenCV's DIS),
weighted by how well that flow explains frame k: where the decoder drew something the first frame
does not hold (a limb swinging in, a new patch of background), its own pixels stay. The motion is
the decoder's; the picture's detail rides on it. Nothing is trained.

It cannot make a fast shot sharp: where the decoded frames dissolve into texture, the flow explains
little of them and the detail is held back.
"""
from __future__ import annotations

import cv2
import numpy as np

# The warped first frame's mean absolute error (of 255) below which frame k is taken to show the first
# frame's content moved (full detail), and the width of the ramp above it to none: chosen by eye on
# held-out world shots so that still regions take the detail and a character's swept area does not.
ERROR_FULL = 8.0
ERROR_RAMP = 24.0


MIN_FLOW_SIDE = 16  # DIS needs a side of at least 12 pixels: smaller frames are upsampled for the flow


def _gray(frame: np.ndarray) -> np.ndarray:
    g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    f = _upsample(g.shape)
    return g if f == 1 else cv2.resize(g, (g.shape[1] * f, g.shape[0] * f), interpolation=cv2.INTER_LINEAR)


def _upsample(shape: tuple[int, ...]) -> int:
    return max(1, -(-MIN_FLOW_SIDE // min(shape[:2])))


def _flow(dis: cv2.DISOpticalFlow, frame: np.ndarray, first_gray: np.ndarray) -> np.ndarray:
    """(H, W, 2): where each pixel of ``frame`` is in the first frame, in pixels of the frame."""
    flow = dis.calc(_gray(frame), first_gray, None)
    f = _upsample(frame.shape)
    if f == 1:
        return flow
    h, w = frame.shape[:2]
    return cv2.resize(flow, (w, h), interpolation=cv2.INTER_AREA) / f


def transfer_detail(frames: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Decoded frames (T, H, W, 3) uint8 and the picture they were drawn from (H, W, 3) uint8 -> the
    frames with the picture's detail carried along their flow; frame 0 is the picture itself."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"transfer_detail: frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    if source.shape != frames.shape[1:] or source.dtype != np.uint8:
        raise ValueError(f"transfer_detail: the source picture must be uint8 {frames.shape[1:]}, got "
                         f"{source.dtype} {source.shape}")
    first = frames[0].astype(np.float32)
    detail = source.astype(np.float32) - first  # (H, W, 3): what the decoder lost of the picture
    h, w = source.shape[:2]
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    g0 = _gray(frames[0])
    out = np.empty_like(frames)
    out[0] = source
    for k in range(1, len(frames)):
        flow = _flow(dis, frames[k], g0)  # (H, W, 2): where each pixel of frame k is in frame 0
        map_x, map_y = xs + flow[..., 0], ys + flow[..., 1]
        moved_first = cv2.remap(first, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        moved_detail = cv2.remap(detail, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        frame = frames[k].astype(np.float32)
        error = np.abs(moved_first - frame).mean(-1)  # (H, W): how badly the flow explains frame k
        weight = np.clip(1.0 - (error - ERROR_FULL) / ERROR_RAMP, 0.0, 1.0)
        weight = cv2.GaussianBlur(weight, (5, 5), 0)[..., None]  # no hard seams
        out[k] = np.clip(frame + weight * moved_detail, 0, 255).round().astype(np.uint8)
    return out


def transfer_details(frames: np.ndarray, sources: list[np.ndarray | None]) -> np.ndarray:
    """A batch (B, T, H, W, 3) with one source picture or None (untouched) per shot."""
    if len(sources) != len(frames):
        raise ValueError(f"transfer_details: {len(sources)} source pictures for {len(frames)} shots")
    return np.stack([f if s is None else transfer_detail(f, s) for f, s in zip(frames, sources)])
