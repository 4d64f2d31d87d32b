"""Fixtures the game tests share: tiny random models (built once per test module) and a game on them."""
from __future__ import annotations

import pytest
from tiny_game import CAST, tiny_models

from animegamer.game.session import Game


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture
def game(models, tmp_path):
    return Game.from_models(*models, store=tmp_path / "saves", cast=CAST)
