"""The sprite animator trained against a patch discriminator (``train sprites --adversarial W --feature-matching W``).

Why: the animator is trained by L1 on the sprite, so a large pose change it cannot pin down (a character lying down
or sitting from standing) is drawn as the average of the poses it might be: a blur. A discriminator that tells the
world's sprites from the drawn ones, and the drawn ones' features matched to the true ones' (the LDM / SD-VAE
autoencoder recipe this project's ``train vae --adversarial`` follows), push the drawing towards one sharp pose.

The wrapper keeps the animator's own weights apart: the run's final/ holds the animator alone, as a plain run's does
(``SpriteAnimator.from_pretrained`` and ``model pack --sprites`` read it unchanged); its checkpoints hold both, so a
stopped run resumes with its discriminator. ``animator_state`` reads either.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from animegamer.core.checkpoint import save_safetensors_atomic
from animegamer.decoder.sprite_animator import WEIGHTS_NAME, SpriteAnimator
from animegamer.training.fit_autoencoder import PatchDiscriminator

PREFIX = "animator."  # the animator's keys in the wrapper's state


def animator_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A sprite animator's weights from a plain run's state or an adversarial run's (its discriminator left out)."""
    if not any(k.startswith(PREFIX) for k in state):
        return state
    return {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}


class AdversarialSprites(nn.Module):
    """forward(batch) -> the animator's loss + ``adversarial`` x the generator's hinge term + ``feature_matching`` x
    the discriminator features' L1, plus the discriminator's hinge loss on detached drawings: one optimiser step
    trains both sides (the discriminator's copy in the generator's terms takes no gradient)."""

    def __init__(self, animator: SpriteAnimator, adversarial: float, feature_matching: float) -> None:
        super().__init__()
        if adversarial < 0 or feature_matching < 0 or adversarial + feature_matching == 0:
            raise ValueError(f"adversarial sprites need a positive weight, got adversarial {adversarial}, "
                             f"feature matching {feature_matching}")
        self.animator = animator
        self.disc = PatchDiscriminator(channels=4)
        self.adversarial, self.feature_matching = adversarial, feature_matching

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss, logs, drawn, target = self.animator.graded(batch)
        fake, real = drawn * 2 - 1, target * 2 - 1  # premultiplied RGBA in [-1, 1]
        frozen = {k: v.detach() for k, v in self.disc.named_parameters()}
        fake_logits, fake_feats = functional_call(self.disc, frozen, (fake,))
        with torch.no_grad():
            _, real_feats = functional_call(self.disc, frozen, (real,))
        g_adv = -fake_logits.float().mean()
        fm = sum((f.float() - r.float()).abs().mean() for f, r in zip(fake_feats, real_feats)) / len(real_feats)
        d_real, _ = self.disc(real)
        d_fake, _ = self.disc(fake.detach())
        d_loss = F.relu(1.0 - d_real.float()).mean() + F.relu(1.0 + d_fake.float()).mean()
        total = loss + self.adversarial * g_adv + self.feature_matching * fm + d_loss
        return total, {**logs, "loss": float(total.detach()), "g_adv": float(g_adv.detach()),
                       "fm": float(fm.detach()), "d": float(d_loss.detach())}

    def config_dict(self) -> dict[str, Any]:
        """The animator's config (what final/ is read as), and the adversarial weights it was trained with."""
        return {**self.animator.config_dict(),
                "adversarial": {"adversarial": self.adversarial, "feature_matching": self.feature_matching}}

    def export_pretrained(self, directory: Path) -> None:
        # final/ holds the animator alone (called with the EMA weights in place), as a plain run's final/ does
        state = {k: v.detach().half() if v.is_floating_point() else v for k, v in self.animator.state_dict().items()}
        save_safetensors_atomic(state, Path(directory) / WEIGHTS_NAME)
