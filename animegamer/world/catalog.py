"""What the world contains, in one listing (`animegamer world catalog`)."""
from __future__ import annotations

from animegamer.world.cast import load_cast
from animegamer.world.motion_catalog import TIMES, load_motions
from animegamer.world.place_art import load_places


def catalog() -> dict[str, list]:
    cast = load_cast()
    places = load_places()
    motions, adverbs = load_motions()
    return {
        "cast": [{"name": c.name, "description": c.description} for c in cast.values()],
        "places": sorted(places),
        "times": list(TIMES),
        "motions": [m.phrase for m in motions.values() if not m.pair],
        "interactions": [m.phrase for m in motions.values() if m.pair],
        "adverbs": [a for a in adverbs if a],
    }
