"""AnimeGamer: infinite anime life simulation, open and trainable."""
__version__ = "0.1.0"
