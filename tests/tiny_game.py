"""Shared tiny models for the game tests (importable: pytest puts tests/ on sys.path)."""
from __future__ import annotations

import torch

from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.network import DecoderNet, decoder_preset
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig
from animegamer.engine.model import GameEngine, engine_config
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config

CAST = ["Qiqi", "Mika", "Ren"]  # a small cast for the game tests
RUN = "Character: Qiqi; Motion: quickly run; Background: day town."


def tiny_models() -> tuple[GameEngine, ShotDecoder]:
    """A random tiny engine and a tiny decoder whose s_a shapes match (seeded)."""
    torch.manual_seed(0)
    dcfg = decoder_preset("tiny")
    decoder = ShotDecoder(DecoderNet(dcfg), ShotAutoencoder(autoencoder_config("tiny")).eval(),
                          DiffusionConfig(), SamplerConfig(steps=2, guidance=2.0))
    engine = GameEngine(engine_config("tiny", rep_tokens=dcfg.n_tokens, rep_dim=dcfg.d_cond)).eval()
    return engine, decoder
