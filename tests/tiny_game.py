"""Shared tiny models for the game tests (importable: pytest puts tests/ on sys.path)."""
from __future__ import annotations

import functools
import sys

import pytest
import torch

from animegamer.decoder.anchors import AnchorConfig, VisualAnchors
from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.network import DecoderNet, decoder_preset
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig
from animegamer.decoder.stage import Stage
from animegamer.engine.model import GameEngine, engine_config
from animegamer.game import pack
from animegamer.decoder.stage import world_stage
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
from animegamer.world import character_art, character_fit, character_gen, place_art, shot, stage_art

CAST = ["Qiqi", "Mika", "Ren"]  # a small cast for the game tests
RUN = "Character: Qiqi; Motion: quickly run; Background: day town."


def tiny_models() -> tuple[GameEngine, ShotDecoder]:
    """A random tiny engine and a tiny decoder whose s_a shapes match (seeded), with the world's stage (the
    player's own characters stand in its places)."""
    torch.manual_seed(0)
    dcfg = decoder_preset("tiny")
    decoder = ShotDecoder(DecoderNet(dcfg), ShotAutoencoder(autoencoder_config("tiny")).eval(),
                          DiffusionConfig(), SamplerConfig(steps=2, guidance=2.0), stage=world_stage_96())
    engine = GameEngine(engine_config("tiny", rep_tokens=dcfg.n_tokens, rep_dim=dcfg.d_cond)).eval()
    return engine, decoder


@functools.lru_cache(maxsize=1)
def continuing_anchors(decoder: ShotDecoder) -> ShotDecoder:
    """A bank of three stored shots in town whose gate keeps every later turn in the scene (it continues)."""
    keys = [["Qiqi"], ["Mika"], ["Mika", "Qiqi"]]
    f_v = torch.randn(len(keys), decoder.config.n_visual, decoder.config.d_visual_in,
                      generator=torch.Generator().manual_seed(3))
    entries = [{"characters": k, "place": "town", "time": "day", "shot": f"s{i}"} for i, k in enumerate(keys)]
    decoder.anchors = VisualAnchors(f_v, entries, (2, 2), AnchorConfig(gate=1e6))
    return decoder


def world_stage_96() -> Stage:
    """The world's stage at the shipped frame size (drawn once per test process): the game resizes what it
    composes to a tiny decoder's frames."""
    return world_stage((96, 144))


def forbid_world_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every drawing function of the world renderer raise, wherever a loaded module holds it: the game
    must play from learned models and stored pictures only (the renderer makes training data)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the world renderer was called during play")

    names = ("draw_character", "character_portrait", "reference_sheet", "render_turn", "render_action",
             "render_cutout", "render_session", "PlaceScene", "place_picture", "place_pictures",
             "character_sprite", "cast_sprites", "world_stage", "fit_character")
    originals = {id(getattr(m, n)) for m in (character_art, character_gen, shot, place_art, stage_art, pack,
                                             character_fit) for n in names if hasattr(m, n)}
    for module in [m for k, m in sys.modules.items() if k.startswith("animegamer") and m is not None]:
        for n in names:
            if id(getattr(module, n, None)) in originals:
                monkeypatch.setattr(module, n, refuse)
