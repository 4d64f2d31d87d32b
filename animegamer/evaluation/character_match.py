"""Naming who is on screen in clips by their likeness to reference pictures, one per character.

    gallery = ReferenceGallery.from_dir("refs/", CharacterReID.from_pretrained(REID_PATH))   # refs/Qiqi.png, ...
    names, scores = gallery.name(frames)                                                      # e.g. ["Qiqi"], [0.93]

Each reference picture (the character alone on a plain background, in the world's style) is read into the
character generator's parameters (`world/character_fit.py`, as `characters add --image` does), and the world
renders that character doing a few actions in a few places: one picture becomes a gallery of posed frames
in scenes, which the re-identification network (`models/character_reid.py`, trained on hundreds of drawn
characters, none of them these) embeds as it embeds the clips. A clip is named after the nearest
reference; a second name is added when a second reference is about as near (two characters on screen).
The network was trained on the world's pictures: it names characters drawn in the world's style, and on
another film its names are a first guess for a person to check (docs/results.md#your-own-films measures both).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from animegamer.game.characters import figure_mask, read_picture
from animegamer.models.character_reid import CharacterReID
from animegamer.world.character_fit import fit_character
from animegamer.world.character_gen import random_character
from animegamer.world.instructions import Action
from animegamer.world.shot import render_action

GALLERY_ACTIONS = (("wave", "", "meadow", "day"), ("walk", "", "town", "day"), ("read", "calmly", "bedroom", "night"),
                   ("run", "quickly", "forest", "day"), ("dance", "happily", "beach", "sunset"),
                   ("jump", "", "station", "night"))
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
SECOND_NAME_GAP = 0.02  # a second reference this close in cosine to the nearest one is named too
EVERY = 4  # every 4th frame of a clip or gallery shot is embedded


@dataclass
class ReferenceGallery:
    names: list[str]
    embeddings: torch.Tensor  # (N, dim): one unit vector per reference, from its rendered gallery
    fit_errors: dict[str, float]  # how well each picture was redrawn by the generator (0 = exactly)
    reid: CharacterReID

    @classmethod
    def from_pictures(cls, pictures: dict[str, np.ndarray], reid: CharacterReID, progress: bool = False
                      ) -> ReferenceGallery:
        """``pictures``: name -> uint8 RGB picture of that character alone on a plain background."""
        if len(pictures) < 1:
            raise ValueError("no reference pictures")
        h, w = reid.size
        embs, errors = [], {}
        for i, (name, picture) in enumerate(tqdm(pictures.items(), desc="references", disable=not progress)):
            fit = fit_character(picture, figure_mask(picture), random_character(i, name))
            errors[name] = fit.error
            frames = np.concatenate([render_action(Action((name,), verb, adverb, place, time), height=h, width=w, seed=k,
                                                   extra_cast={name: fit.spec})[::EVERY]
                                     for k, (verb, adverb, place, time) in enumerate(GALLERY_ACTIONS)])
            embs.append(reid.embed(frames))
        return cls(list(pictures), torch.stack(embs), errors, reid)

    @classmethod
    def from_dir(cls, directory: str | Path, reid: CharacterReID, progress: bool = False) -> ReferenceGallery:
        """One picture per character in ``directory``, named by its file name (``Qiqi.png`` is Qiqi)."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"{directory}: no such directory of reference pictures")
        files = sorted(p for p in directory.iterdir() if p.suffix.lower() in PICTURE_SUFFIXES)
        if not files:
            raise ValueError(f"{directory}: no pictures ({', '.join(PICTURE_SUFFIXES)}); put one picture per "
                             "character there, named after the character (Qiqi.png)")
        return cls.from_pictures({p.stem: read_picture(p) for p in files}, reid, progress)

    def scores(self, frames: np.ndarray) -> torch.Tensor:
        """Cosine similarity of a clip (uint8 (T, H, W, 3)) to every reference: (N,)."""
        return self.embeddings @ self.reid.embed(frames[::EVERY])

    def name(self, frames: np.ndarray) -> tuple[list[str], list[float]]:
        """Who is on screen: the nearest reference, and the second nearest when it is about as near."""
        s = self.scores(frames)
        order = torch.argsort(s, descending=True).tolist()
        picked = order[:1] + [j for j in order[1:2] if s[order[0]] - s[j] <= SECOND_NAME_GAP]
        return [self.names[j] for j in picked], [float(s[j]) for j in picked]
