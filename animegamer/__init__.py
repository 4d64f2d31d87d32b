"""AnimeGamer: infinite anime life simulation, open and trainable."""
__version__ = "0.1.0"

__all__ = ["Game"]


def __getattr__(name: str):
    # Lazy: `import animegamer` stays light (no torch / gradio) until the game is asked for.
    if name == "Game":
        from animegamer.game.session import Game

        return Game
    raise AttributeError(f"module 'animegamer' has no attribute {name!r}")
