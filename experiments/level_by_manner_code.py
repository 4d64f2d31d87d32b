"""experiments/level_in_layers.py with every shot drawn in one fixed manner code of an animator trained with
``manners`` (docs/layers.md, "Manner codes"): what each code draws, and what a perfect chooser would reach.

    CODE=0 .venv/bin/python experiments/level_by_manner_code.py --world runs/data/w9100 --n 96 --sprites RUN --out FILE.json

Arguments are level_in_layers.py's; CODE picks the code (0..manners-1).
"""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import torch

from animegamer.decoder.sprite_animator import SpriteAnimator


def main() -> None:
    code = int(os.environ["CODE"])
    SpriteAnimator.likely_manner = lambda self, s_a, level, role: torch.full(  # type: ignore[method-assign]
        (s_a.shape[0],), code, dtype=torch.long, device=s_a.device)
    sys.argv = ["level_in_layers.py", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).with_name("level_in_layers.py")), run_name="__main__")


if __name__ == "__main__":
    main()
