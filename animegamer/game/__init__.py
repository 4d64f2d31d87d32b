"""The game: sessions over the engine + decoder, saved games, the web and terminal front ends."""
from animegamer.game.session import Game, GameInputError, GameSession, Turn
from animegamer.game.store import SessionStore, StoreError

__all__ = ["Game", "GameInputError", "GameSession", "SessionStore", "StoreError", "Turn"]
