"""Typed batches passed from the data loaders to the trainable modules.

Every trainable part exposes ``forward(batch) -> (loss, logs)`` on one of these, so the one
generic training loop (animegamer.training.loop) serves all phases.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ShotBatch:
    """A batch of world shots with their annotations (phase a: clip, autoencoder, decoder)."""

    frames: torch.Tensor  # (B, T, 3, H, W) float32 in [-1, 1]
    motion_text: list[str]  # the short motion description, e.g. "quickly run"
    caption: list[str]  # what the first frame shows: characters, place, time, props, motion
    motion_level: torch.Tensor  # (B,) int64 in 1..5, from DIS flow on the pixels
    character: list[str] = field(default_factory=list)  # first character's name per shot
    place: list[str] = field(default_factory=list)  # place key per shot, e.g. "town"
    verb: list[str] = field(default_factory=list)  # motion key per shot, e.g. "run"
    characters: list[list[str]] = field(default_factory=list)  # every character on screen, per shot
    time: list[str] = field(default_factory=list)  # time of day per shot: day, sunset, night

    def to(self, device: torch.device | str) -> "ShotBatch":
        return ShotBatch(
            frames=self.frames.to(device),
            motion_text=self.motion_text,
            caption=self.caption,
            motion_level=self.motion_level.to(device),
            character=self.character,
            place=self.place,
            verb=self.verb,
            characters=self.characters,
            time=self.time,
        )

    def __len__(self) -> int:
        return self.frames.shape[0]
