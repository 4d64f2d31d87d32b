"""The game: sessions over the engine + decoder (``session``), saved games (``store``), the web and
terminal front ends, and ``model pack``. Players and programs start from ``animegamer.Game``."""
