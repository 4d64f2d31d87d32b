"""AnimeGamer: infinite anime life simulation, open and trainable."""
import logging

__version__ = "0.1.0"

# Where bitsandbytes is installed (`--quantize`), diffusers and transformers import it with every model,
# and on CPUs with AVX512-BF16 it warns that an optional kernel package (fetched from the Hub, which this
# project never does) is missing, then runs its own CPU kernels. Silenced so that not every start says so.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

__all__ = ["Game"]


def __getattr__(name: str):
    # Lazy: `import animegamer` stays light (no torch / gradio) until the game is asked for.
    if name == "Game":
        from animegamer.game.session import Game

        return Game
    raise AttributeError(f"module 'animegamer' has no attribute {name!r}")
