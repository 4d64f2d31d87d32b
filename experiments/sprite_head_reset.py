"""A sprite animator run's weights with its output head put back to an untrained one's: how the shipped body-warp
run was started (docs/layers.md, "The body's move as one warp").

    .venv/bin/python experiments/sprite_head_reset.py runs/sprites_body/checkpoints/step_00002000 runs/sprites_body_reset
    bin/animegamer train sprites --data runs/data/train400 --init runs/sprites_body_reset --out runs/sprites_body2 ...

A run that gains the body warp from one trained without it (``train sprites --init``) learns the affine within a
few hundred steps (1-2 px on the body), but the mix between the moved input, the moved reference and the painted
sprite stays where the old run had it: a body lying down is still painted (weights ~0.7 on the painted sprite,
a blur) beside a sharp warped one. With the head's last convolution zero and its mask biases as at the start,
the mix starts from the moved input, so the warped body is drawn from the first step and the features the run
learned are kept.
"""
from __future__ import annotations

import sys

from animegamer.decoder.sprite_animator import SpriteAnimator, SpriteAnimatorNet
from animegamer.evaluation.drawn_shots import load_animator


def main() -> int:
    source, out = sys.argv[1], sys.argv[2]
    trained = load_animator(source)
    fresh = SpriteAnimator(SpriteAnimatorNet(trained.config))
    state = trained.state_dict()
    state.update({k: v for k, v in fresh.state_dict().items() if k.startswith("net.conv_out.")})
    trained.load_state_dict(state)
    trained.save_pretrained(out)
    print(f"{source} -> {out}: net.conv_out reset")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
