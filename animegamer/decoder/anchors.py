"""Visual anchors: where the visual part of s_a that the decoder draws comes from at play time.

The engine regresses the next shot's first frame (the visual tokens of s_a) with MSE, so it predicts
the average of what could come next: the place and the light right, and no one in it, because where
the character stands and how it poses are uncertain. The decoder then draws that average faithfully
(docs/history.md#visual-anchors). A deliberate deviation from the paper, on by default where a model ships
an anchor bank (``ShotDecoder.anchors``), replaces the engine's visual tokens before drawing:

- **continuation**: where the engine's prediction says the place and the light persist (its mean
  visual token is within ``gate`` of the mean token of what was shown last), the shot is drawn from
  what was shown: by default the visual tokens the previous turn was drawn from (``continue_from``
  "anchor"), or the last frame shown, re-encoded by the shot autoencoder ("frame", image-to-video
  continuation as the interactive world models do; it carries positions over, but the autoencoder's
  and the decoder's losses accumulate turn after turn and it measured worse). Characters, props and
  the place then come from real pixels, turn after turn.
  A persisting scene continues only while the turn names the characters the previous shot was drawn
  for (``same_characters``): a continued anchor shows who was in it, not who the turn names.
- **retrieval**: elsewhere (the first turn, a new place, a new time of day, other characters), the
  nearest first frame of a bank of true training shots in which exactly the turn's characters appear,
  nearest to the engine's prediction in coarse layout (the token grid pooled to ``pool``: the place and
  the light), drawn among the ``top_k`` nearest with the turn's seed: a sample consistent with the
  engine's mean, a non-parametric stand-in for a generative visual head. With ``scene_classes`` the
  scene is named first: the (place, time) whose mean bank entry is nearest to the prediction (the
  engine predicts a mean over futures, so it lies near its scene's mean, far more reliably than near
  any one frame of it), or, where the scene persists under other characters, the one of what was
  shown; the candidates are those of that scene where the bank has the turn's characters there.

- **the action** (``by_action``): a first frame carries its action's pose (sitting, lying, on a broom),
  and the decoder keeps the pose it starts from. So the engine's motion tokens are read as a verb
  (the nearest of the bank's motions, through E_a's text stream) and retrieval prefers the candidates
  whose shot shows that verb; with ``repose`` a persisting scene whose anchor shows another verb is
  drawn again from a shot of that verb in the same scene, where the bank has one ("reposed").

The engine's text tokens (the motion), its motion level and its state changes are kept. The history
fed back to the engine carries the s_a each shot was drawn from (``history`` "drawn"): what the player
saw, and real frames like the true s_a the engine was trained on. Measured: docs/history.md#visual-anchors.

Each anchor also carries the picture its tokens are (``Anchor.frame``), where the bank keeps pictures: the
first frame the game composes its own from.

On disk, ``shot_decoder/anchors/``: ``anchors.json`` (format, config, each entry's characters,
place, time and source shot) and ``anchors.safetensors`` (the entries' f_v: the autoencoder-latent
patches of the first frame, in int8 with one scale per token, a quarter of fp32; the first frames
themselves, WebP bytes in one uint8 tensor with their offsets, lossless or at a quality that keeps
them within a few grey levels, a bank without them draws from the tokens alone; and the motion
texts' f_md, the text encoder's tokens of each motion the bank shows, which anchors.json lists with
their verbs, a bank without them does not choose by action). Built by ``model pack --anchors DATA``
from the training world.
"""
from __future__ import annotations

import collections
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from animegamer.core.checkpoint import (
    atomic_dir,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
)
from animegamer.representation.action_encoder import ActionEncoder
from animegamer.representation.reference_encoder import LatentReference
from animegamer.world.dataset import WorldDataset

FORMAT = "animegamer-visual-anchors"
FORMAT_VERSION = 2  # 2: f_v in int8 with per-token scales, and the motions; 1 (fp16 f_v) still loads
CONFIG_NAME = "anchors.json"
WEIGHTS_NAME = "anchors.safetensors"


@dataclass
class AnchorConfig:
    continuation: bool = True
    retrieval: bool = True
    # Relative squared distance between the mean visual tokens of the engine's prediction and of the
    # last frame seen, below which the place and light are taken to persist (chosen on a world the
    # evaluation never plays: docs/history.md#visual-anchors).
    gate: float = 0.1
    # What a persisting scene continues from: "anchor", the visual tokens the previous turn was drawn
    # from (nothing accumulates; each turn of a scene starts from the same frame), or "frame", the last
    # frame shown, re-encoded (positions carry over; the autoencoder's and decoder's losses accumulate).
    continue_from: str = "anchor"
    # What the engine's history carries: "drawn", the s_a the shot was drawn from (what the player saw,
    # and real frames like the true s_a the engine was trained on), or "engine", its own prediction.
    history: str = "drawn"
    top_k: int = 2  # retrieval draws among this many nearest entries (seeded: the same turn, the same frame)
    pool: tuple[int, int] = (3, 3)  # the coarse layout retrieval compares: token grid pooled to rows x cols
    # Continue a persisting scene only when the turn names the characters its previous shot was drawn for;
    # otherwise retrieve them in that scene.
    same_characters: bool = True
    # Retrieval names the scene (place, time) by the nearest mean of the bank's entries of each scene
    # and keeps that scene's candidates where the bank has the turn's characters there.
    scene_classes: bool = True
    # Choose for the action as well (module doc); a bank without motions (older, or a film's clips before
    # annotation) cannot, and draws as without it.
    by_action: bool = True
    # With by_action, a persisting scene whose anchor shows another verb is drawn again from a shot of the
    # turn's verb in that scene ("reposed"); off, the scene continues from its anchor (its props and layout
    # stay; its pose too) and only retrieval chooses by action. Off by default: the other shot of the place
    # has other props and positions, and the consecutive shots of a scene stopped looking alike
    # (docs/history.md#anchors-chosen-for-the-action-2026-11-26-shipped).
    repose: bool = False

    def __post_init__(self) -> None:
        self.pool = tuple(int(p) for p in self.pool)  # JSON gives a list
        if self.gate <= 0:
            raise ValueError(f"AnchorConfig.gate must be > 0, got {self.gate}")
        if self.top_k < 1:
            raise ValueError(f"AnchorConfig.top_k must be >= 1, got {self.top_k}")
        if self.continue_from not in ("frame", "anchor"):
            raise ValueError(f"AnchorConfig.continue_from must be 'frame' or 'anchor', got {self.continue_from!r}")
        if self.history not in ("drawn", "engine"):
            raise ValueError(f"AnchorConfig.history must be 'drawn' or 'engine', got {self.history!r}")
        if self.continue_from == "anchor" and self.history != "drawn":
            raise ValueError("AnchorConfig.continue_from 'anchor' needs history 'drawn' (the drawn tokens are saved there)")
        if len(self.pool) != 2 or min(self.pool) < 1:
            raise ValueError(f"AnchorConfig.pool must be two positive ints, got {self.pool}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnchorConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"AnchorConfig got unknown fields {sorted(unknown)}")
        return cls(**d)


def relative_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """mean((a - b)^2) / mean(a^2): 0 = the same, 1 = as far as ``a`` is from zero. A vector gives one
    number; a batch (M, ...) one per row."""
    dims = tuple(range(1, a.dim())) if a.dim() > 1 else (0,)
    return ((a - b) ** 2).mean(dims) / (a ** 2).mean(dims).clamp_min(1e-8)


def frame_tensor(frame: np.ndarray) -> torch.Tensor:
    """uint8 (H, W, 3) -> (1, 3, H, W) in [-1, 1], the autoencoder's input."""
    return torch.from_numpy(np.ascontiguousarray(frame)).permute(2, 0, 1).float().div(127.5).sub(1)[None]


@torch.no_grad()
def frame_tokens(frame: np.ndarray, reference: LatentReference, visual: nn.Module) -> torch.Tensor:
    """E_a's visual tokens (n_visual, D) of one uint8 (H, W, 3) picture, through the decoder's own frame
    encoder: what a shot drawn from that picture starts from."""
    return visual(reference.patch_tokens(frame_tensor(frame)).to(next(visual.parameters())))[0]


def named_characters(instruction: str, characters: list[str]) -> list[str]:
    """The session's characters an instruction names (in the session's order); none named: the first."""
    named = [c for c in characters if re.search(rf"\b{re.escape(c)}\b", instruction, flags=re.IGNORECASE)]
    return named or list(characters[:1])


def encode_frame(frame: np.ndarray, quality: int | None = None) -> np.ndarray:
    """uint8 (H, W, 3) RGB -> WebP bytes (uint8 vector): lossless (None), a fifth of the raw size, or lossy
    at ``quality`` 1-100 (90: about a twelfth, 34 dB on the world's frames)."""
    if quality is not None and not 1 <= quality <= 100:
        raise ValueError(f"anchors: a frame quality is 1-100 (None: lossless), got {quality}")
    ok, data = cv2.imencode(".webp", np.ascontiguousarray(frame[..., ::-1]),
                            [int(cv2.IMWRITE_WEBP_QUALITY), 101 if quality is None else int(quality)])
    if not ok:
        raise ValueError(f"anchors: could not encode a {frame.shape} frame")
    return data.reshape(-1)


def quantize_tokens(f_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, n, d) -> int8 values and one fp32 scale per token (M, n, 1): what the bank stores."""
    scale = f_v.float().abs().amax(-1, keepdim=True).clamp_min(1e-8) / 127
    return torch.round(f_v.float() / scale).clamp(-127, 127).to(torch.int8), scale


def dequantize_tokens(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return values.float() * scale.float()


def decode_frame(data: np.ndarray) -> np.ndarray:
    """The inverse of ``encode_frame``."""
    frame = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if frame is None:
        raise ValueError("anchors: a bank frame does not decode (a damaged anchors.safetensors?)")
    return np.ascontiguousarray(frame[..., ::-1])


@dataclass
class Anchor:
    """The visual tokens to draw (n_visual, D), where they came from, and the gate distance (None at turn 0)."""

    tokens: torch.Tensor
    source: str
    distance: float | None = None
    entry: int | None = None  # the bank entry, for a retrieved anchor
    frame: np.ndarray | None = None  # the picture the tokens are (uint8 H x W x 3), where it is known
    verb: str | None = None  # the verb the engine's motion tokens were read as (``by_action``), else None
    scene: tuple[str, str] | None = None  # the (place, time) retrieval named (``scene_classes``), else None


@dataclass(frozen=True)
class Shown:
    """What the player saw last turn, which the next turn may go on from (None on a session's first turn; a field
    None where it is not known)."""

    frame: np.ndarray | None = None  # uint8 (H, W, 3): the turn's last frame as shown
    s_a: torch.Tensor | None = None  # (N, D): the s_a it was drawn from
    characters: list[str] | None = None  # who it was drawn for


class VisualAnchors(nn.Module):
    """A bank of true first frames (their f_v) with who is in them, and the rule that picks the anchor."""

    def __init__(self, f_v: torch.Tensor, entries: list[dict[str, Any]], grid: tuple[int, int],
                 config: AnchorConfig | None = None, frames: list[np.ndarray] | None = None,
                 motions: list[dict[str, str]] | None = None, motion_f_md: torch.Tensor | None = None) -> None:
        super().__init__()
        if f_v.dim() != 3 or f_v.shape[0] != len(entries) or not entries:
            raise ValueError(f"anchors need f_v (M, n_visual, d_visual) with one entry each, got {tuple(f_v.shape)} "
                             f"for {len(entries)} entries")
        if frames is not None and len(frames) != len(entries):
            raise ValueError(f"anchors: {len(frames)} frames for {len(entries)} entries")
        if (motions is None) != (motion_f_md is None) or (
                motions is not None and (motion_f_md.dim() != 3 or len(motions) != motion_f_md.shape[0] or not motions)):
            raise ValueError(f"anchors: motions need one f_md (K, n_text, d_text) each, got "
                             f"{None if motion_f_md is None else tuple(motion_f_md.shape)} for "
                             f"{None if motions is None else len(motions)} motions")
        # the motions the bank shows (text and verb) and their f_md: what reads the engine's motion as a verb
        self.motions = [dict(m) for m in motions] if motions is not None else None
        self.register_buffer("motion_f_md", motion_f_md.float() if motion_f_md is not None else None, persistent=False)
        self._verbs: list[str] = sorted({m["verb"] for m in self.motions}) if self.motions else []
        self._motion_tokens: torch.Tensor | None = None  # (K, n_text, D): E_a's text tokens of each motion
        self.frames = frames  # each entry's first frame as encode_frame bytes, or None (tokens only)
        self.grid = (int(grid[0]), int(grid[1]))  # the visual tokens' rows x cols on the frame
        if self.grid[0] * self.grid[1] != f_v.shape[1]:
            raise ValueError(f"anchors: a {self.grid[0]} x {self.grid[1]} token grid does not hold {f_v.shape[1]} tokens")
        self.config = config or AnchorConfig()
        self.register_buffer("f_v", f_v.float(), persistent=False)  # (M, n_visual, d_visual)
        self.entries = [dict(e) for e in entries]
        self._keys = [tuple(sorted(e["characters"])) for e in self.entries]
        # E_a's visual tokens of the bank pooled to the coarse layout, made on first use; the tokens
        # themselves are made for the entry drawn (a bank of thousands would hold hundreds of MB of them)
        self._pooled: torch.Tensor | None = None
        # the labelled scenes (place, time), at least two or none (a film's clips before annotation)
        labels = sorted({(e["place"], e["time"]) for e in self.entries if e.get("place") and e.get("time")})
        self._scene_labels: list[tuple[str, str]] = labels if len(labels) > 1 else []
        self._scene_means: torch.Tensor | None = None  # (S, D * rows * cols), made with the bank's tokens

    def __len__(self) -> int:
        return len(self.entries)

    # -- building and saving ---------------------------------------------------------------------
    @classmethod
    @torch.no_grad()
    def build(cls, data: str | Path | Sequence[str | Path], reference: LatentReference, split: str = "train",
              limit: int | None = None, config: AnchorConfig | None = None, progress: bool = True,
              per_scene: int | None = None,
              motion_features: Callable[[list[str]], torch.Tensor] | None = None,
              per_action: int | None = None, frame_quality: int | None = None) -> VisualAnchors:
        """The first frames of the ``split`` shots of one or more world datasets (at most ``limit``),
        encoded by the decoder's own visual reference. ``per_scene``: keep at most this many shots of
        each (characters, place, time), so that a bank of bounded size covers as many of them as the
        data shows (two-character scenes are rare in any one world). ``per_action``: at most this many
        of each (characters, place, time, verb), so that the bank shows each scene's cast in the poses
        of the actions the data has. ``motion_features``: motion texts -> their f_md (K, n_text,
        d_text), the decoder's text encoder; with it the bank keeps the motions its shots show
        (``by_action``). ``frame_quality``: the stored pictures' WebP quality (None: lossless); the
        tokens are made from the picture as stored."""
        sources = [data] if isinstance(data, (str, Path)) else list(data)
        for name, limit_ in (("per_scene", per_scene), ("per_action", per_action)):
            if limit_ is not None and limit_ < 1:
                raise ValueError(f"anchors: {name} must be >= 1, got {limit_}")
        rows, kept, acted = [], collections.Counter(), collections.Counter()
        for source in sources:
            world = WorldDataset(source)
            for row in world.split_rows(split):
                key = (tuple(sorted(row["characters"])), row.get("place"), row.get("time"))
                if (per_scene is None or kept[key] < per_scene) and (
                        per_action is None or acted[key + (row.get("motion"),)] < per_action):
                    kept[key] += 1
                    acted[key + (row.get("motion"),)] += 1
                    rows.append((world, source, row))
        rows = rows[: limit or None]
        if not rows:
            raise ValueError(f"{', '.join(map(str, sources))}: no {split} shots to build anchors from")
        f_v, entries, frames = [], [], []
        for world, source, row in tqdm(rows, desc="anchors", unit="shot", disable=not progress, dynamic_ncols=True):
            frames.append(encode_frame(world.frames(row)[0], frame_quality))
            first = decode_frame(frames[-1])  # the picture as the game will see it
            f_v.append(reference.patch_tokens(frame_tensor(first))[0].float())
            known = row.get("motion") and row.get("motion_text")  # a film's unannotated clip: None
            entries.append({"characters": list(row["characters"]), "place": row.get("place"),
                            "time": row.get("time"), "shot": row["shot"],
                            **({"motion": row["motion"], "motion_text": row["motion_text"]} if known else {}),
                            **({"data": Path(source).name} if len(sources) > 1 else {})})
        verb_of = {e["motion_text"]: e["motion"] for e in entries if "motion_text" in e}
        motions = [{"text": t, "verb": verb_of[t]} for t in sorted(verb_of)] if motion_features and verb_of else None
        motion_f_md = motion_features([m["text"] for m in motions]).float().half() if motions else None
        f_v = dequantize_tokens(*quantize_tokens(torch.stack(f_v)))  # as stored: a reloaded bank draws alike
        return cls(f_v, entries, reference._grid(*first.shape[:2]), config, frames, motions, motion_f_md)

    def frame(self, entry: int) -> np.ndarray | None:
        """The first frame of a bank entry (uint8 H x W x 3), or None for a bank of tokens only."""
        return None if self.frames is None else decode_frame(self.frames[entry])

    def save_pretrained(self, directory: str | Path) -> Path:
        values, scale = quantize_tokens(self.f_v)
        tensors = {"f_v_int8": values.contiguous(), "f_v_scale": scale.contiguous()}
        if self.frames is not None:
            offsets = np.cumsum([0] + [len(f) for f in self.frames])
            tensors["frames"] = torch.from_numpy(np.concatenate(self.frames))
            tensors["frame_offsets"] = torch.from_numpy(offsets.astype(np.int64))
        if self.motions is not None:
            tensors["motion_f_md"] = self.motion_f_md.half().contiguous()
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic(tensors, tmp / WEIGHTS_NAME)
            save_json_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "config": self.config.to_dict(),
                              "grid": list(self.grid), "entries": self.entries,
                              **({"motions": self.motions} if self.motions is not None else {})}, tmp / CONFIG_NAME)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> VisualAnchors:
        directory = Path(directory)
        meta = load_json(directory / CONFIG_NAME)
        if meta.get("format") != FORMAT or meta.get("format_version") not in (1, FORMAT_VERSION):
            raise ValueError(f"{directory}: expected {FORMAT} v1 to v{FORMAT_VERSION}, found {meta.get('format')} "
                             f"v{meta.get('format_version')}")
        tensors = load_safetensors(directory / WEIGHTS_NAME)
        frames = None
        if "frames" in tensors:
            data, offsets = tensors["frames"].numpy(), tensors["frame_offsets"].tolist()
            frames = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        # int8 with per-token scales; a bank saved before them holds f_v in fp16
        f_v = (dequantize_tokens(tensors["f_v_int8"], tensors["f_v_scale"]) if "f_v_int8" in tensors
               else tensors["f_v"].float())
        return cls(f_v, meta["entries"], meta["grid"], AnchorConfig.from_dict(meta["config"]), frames,
                   meta.get("motions"), tensors.get("motion_f_md"))

    # -- choosing ----------------------------------------------------------------------------------
    def _pool(self, tokens: torch.Tensor) -> torch.Tensor:
        """(M, n_visual, D) -> the token grid average-pooled to ``config.pool``, flat: (M, D * rows * cols)."""
        rows, cols = self.grid
        x = tokens.reshape(tokens.shape[0], rows, cols, -1).permute(0, 3, 1, 2)  # (M, D, rows, cols)
        return nn.functional.adaptive_avg_pool2d(x, self.config.pool).flatten(1)

    @torch.no_grad()
    def tokens(self, entries: int | list[int], visual: nn.Module) -> torch.Tensor:
        """E_a's visual tokens of bank entries: (n_visual, D) for one, (len, n_visual, D) for a list."""
        p = next(visual.parameters())
        one = isinstance(entries, int)
        out = visual(self.f_v[[entries] if one else entries].to(p)).float()
        return out[0] if one else out

    @torch.no_grad()
    def _bank(self, visual: nn.Module) -> torch.Tensor:
        """The bank's visual tokens pooled to the coarse layout (M, D * rows * cols), made on first use."""
        if self._pooled is None:
            self._pooled = torch.cat([self._pool(self.tokens(list(range(i, min(i + 512, len(self)))), visual))
                                      for i in range(0, len(self), 512)])
            of = [(e.get("place"), e.get("time")) for e in self.entries]
            self._scene_means = torch.stack([self._pooled[[i for i, s in enumerate(of) if s == lab]].mean(0)
                                             for lab in self._scene_labels]) if self._scene_labels else None
        return self._pooled

    def scene(self, tokens: torch.Tensor, visual: nn.Module) -> tuple[str, str] | None:
        """The (place, time) whose mean bank entry is nearest to visual tokens (n_visual, D) in the
        pooled layout; None without labelled scenes."""
        if not self._scene_labels:
            return None
        self._bank(visual)
        d = relative_distance(self._pool(tokens[None].float()).expand(len(self._scene_means), -1), self._scene_means)
        return self._scene_labels[int(torch.argmin(d))]

    def candidates(self, characters: list[str], scene: tuple[str, str] | None = None) -> list[int]:
        """Bank entries with exactly these characters; else with all of them; else with the first. With a
        ``scene`` (place, time), the entries of that scene among them where there are any."""
        want = tuple(sorted(characters))
        exact = [i for i, k in enumerate(self._keys) if k == want]
        every = [i for i, k in enumerate(self._keys) if set(want) <= set(k)]
        first = [i for i, k in enumerate(self._keys) if characters and characters[0] in k]
        for group in (exact, every, first):
            if scene is not None:
                here = [i for i in group if (self.entries[i].get("place"), self.entries[i].get("time")) == scene]
                if here:
                    return here
            if group:
                return group
        return list(range(len(self.entries)))

    @torch.no_grad()
    def verb(self, text_tokens: torch.Tensor, encoder: ActionEncoder) -> str | None:
        """The verb motion tokens (n_text, D), the engine's, read as: the verb of the bank's motion whose E_a text
        tokens are nearest; None for a bank without motions. An engine that says its motion text (its tokens are
        that text's own) is read exactly; the nearest verb's mean, read before, took 0.16 of them for another verb
        (experiments/engine_says_motion.py)."""
        if not self._verbs:
            return None
        if self._motion_tokens is None:
            c = encoder.config
            if tuple(self.motion_f_md.shape[1:]) != (c.n_text, c.d_text_in):
                raise ValueError(f"anchors: the bank's motions were encoded as {tuple(self.motion_f_md.shape[1:])} "
                                 f"text tokens, this decoder reads ({c.n_text}, {c.d_text_in}): rebuild the bank "
                                 "(model pack --anchors) with the decoder's text encoder")
            p = next(encoder.parameters())
            self._motion_tokens = encoder.text(self.motion_f_md.to(p)).float()  # (K, n_text, D)
        t = text_tokens.float().to(self._motion_tokens.device)
        k = int(torch.argmin(relative_distance(t[None].expand_as(self._motion_tokens), self._motion_tokens)))
        return self.motions[k]["verb"]

    def _draw(self, near_to: torch.Tensor, candidates: list[int], encoder: ActionEncoder,
              generator: torch.Generator | None) -> int:
        """Among ``candidates``, one of the ``top_k`` nearest to visual tokens (n_visual, D) in the pooled
        layout, drawn with ``generator`` (a CPU generator: the same draw on any device)."""
        pooled = self._bank(encoder.visual)
        idx = torch.tensor(candidates, device=pooled.device)
        d = relative_distance(self._pool(near_to[None].float().to(pooled.device)).expand(len(idx), -1), pooled[idx])
        near = idx[torch.argsort(d)[: self.config.top_k]].tolist()
        return near[int(torch.randint(len(near), (1,), generator=generator))]

    def _reposed(self, seen: torch.Tensor, verb: str, encoder: ActionEncoder,
                 generator: torch.Generator | None) -> int | None:
        """For a persisting scene whose anchor ``seen`` is a bank entry of another verb: an entry of the
        same characters and scene that shows ``verb``, nearest to ``seen``; else None (keep continuing)."""
        entry = self.entry_of(seen, encoder)
        if entry is None or self.entries[entry].get("motion") in (None, verb):
            return None
        e = self.entries[entry]
        same = [i for i, k in enumerate(self._keys) if k == self._keys[entry] and self.entries[i].get("motion") == verb
                and (self.entries[i].get("place"), self.entries[i].get("time")) == (e.get("place"), e.get("time"))]
        return self._draw(seen, same, encoder, generator) if same else None

    @torch.no_grad()
    def choose(self, s_a: torch.Tensor, n_text: int, encoder: ActionEncoder, reference: LatentReference | None,
               characters: list[str], shown: Shown | None = None,
               generator: torch.Generator | None = None) -> Anchor:
        """s_a: the engine's (N, D), its first ``n_text`` tokens the motion text's (which ``by_action`` reads as
        a verb), the rest visual; ``shown``: the last turn (None on a session's first; ``continue_from`` names
        which of its frame and its s_a's visual tokens is used). ``reference`` encodes ``shown.frame`` (needed only
        with one). ``shown.characters`` (``same_characters``; None: not known, any may continue)."""
        shown = shown or Shown()
        predicted, predicted_text = s_a[n_text:], s_a[:n_text]
        previous_tokens = shown.s_a[n_text:] if shown.s_a is not None else None
        cfg = self.config
        dev = next(encoder.parameters()).device  # the bank is encoded there; the engine's tokens come from the CPU
        predicted = predicted.float().to(dev)
        verb = self.verb(predicted_text, encoder) if cfg.by_action else None
        distance = None
        seen = None
        if cfg.continue_from == "frame" and shown.frame is not None:
            seen = frame_tokens(shown.frame, reference, encoder.visual).float()  # (n_visual, D)
        elif cfg.continue_from == "anchor" and previous_tokens is not None:
            seen = previous_tokens.float().to(dev)
        persists = False
        if seen is not None:
            distance = float(relative_distance(predicted.mean(0), seen.mean(0)))
            persists = cfg.continuation and distance < cfg.gate
            recast = (cfg.same_characters and shown.characters is not None
                      and sorted(shown.characters) != sorted(characters))
            if persists and not recast:
                pick = self._reposed(seen, verb, encoder, generator) if verb is not None and cfg.repose else None
                if pick is not None:
                    return Anchor(self.tokens(pick, encoder.visual), "reposed", distance, pick, self.frame(pick), verb)
                frame = shown.frame if cfg.continue_from == "frame" else None
                return Anchor(seen, "continued", distance, frame=frame, verb=verb)
        if not cfg.retrieval:
            return Anchor(predicted, "engine", distance, verb=verb)
        scene = self.scene(seen if persists else predicted, encoder.visual) if cfg.scene_classes else None
        candidates = self.candidates(characters, scene)
        acting = [i for i in candidates if verb is not None and self.entries[i].get("motion") == verb]
        pick = self._draw(predicted, acting or candidates, encoder, generator)
        return Anchor(self.tokens(pick, encoder.visual), "retrieved", distance, pick, self.frame(pick), verb, scene)

    @torch.no_grad()
    def entry_of(self, tokens: torch.Tensor, encoder: ActionEncoder) -> int | None:
        """The bank entry whose visual tokens these (n_visual, D) are (a retrieved anchor, saved with a turn and
        read back), or None: other tokens (a player's character, a frame re-encoded)."""
        pooled = self._bank(encoder.visual)
        tokens = tokens.float().to(pooled.device)
        best = int(torch.argmin(relative_distance(self._pool(tokens[None]).expand(len(pooled), -1), pooled)))
        # saved turns keep their tokens in fp16: a match is within its rounding, far below any two frames' distance
        found = self.tokens(best, encoder.visual)
        return best if float(relative_distance(tokens.flatten(), found.flatten())) < 1e-4 else None
