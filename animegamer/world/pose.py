"""One frame of a character's body: what `character_art.draw_character` draws.

Angles are in degrees in the character's own frame, so a pose reads the same whether
the character faces right or left (`facing` mirrors the picture):
  limbs   0 = hanging straight down, +90 = pointing forward (toward where the character
          faces), 180 = straight up, -90 = pointing backward. Elbows add to the shoulder
          angle (positive bends the forearm forward/up); knees subtract from the hip
          angle (positive bends the shin backward, like a real knee).
  lean    rotation of the whole body about the hips: +tilts the head forward, 90 = lying
          on the front, -90 = lying on the back (face up).
The "lead" arm/leg is the one on the side the character faces (drawn in front of the
body); the "rear" ones are drawn behind it in a shadow tone.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

EYES = ("open", "closed", "happy", "wide")
MOUTHS = ("closed", "open", "smile", "talk", "grin")
ITEMS = ("none", "broom", "book", "food")
EFFECTS = ("none", "zzz", "notes", "hearts", "sweat", "sparkle", "dust")


@dataclass(frozen=True)
class Pose:
    lean: float = 0.0            # deg, whole-body rotation about the hips
    bob: float = 0.0             # extra vertical offset, character heights, + = up
    sit: bool = False            # sitting on the ground (short skirt hem, no standing pelvis)
    lead_shoulder: float = 8.0   # deg, see module doc
    lead_elbow: float = 10.0
    rear_shoulder: float = -8.0
    rear_elbow: float = 10.0
    lead_hip: float = 4.0
    lead_knee: float = 0.0
    rear_hip: float = -4.0
    rear_knee: float = 0.0
    head_tilt: float = 0.0       # deg, + tilts the head forward (nod)
    head_turn: float = 0.0       # -1 (looks back over the shoulder) .. +1 (looks ahead)
    eyes: str = "open"           # open | closed | happy (^^) | wide
    mouth: str = "smile"         # closed | open | smile | talk | grin
    item: str = "none"           # none | broom | book | food (in the lead hand / both hands)
    on_broom: bool = False       # riding a broomstick (broom drawn under the hips)
    submerge: float = 0.0        # 0..1 fraction of the body's height under the water line
    facing: int = 1              # +1 faces right, -1 faces left
    effect: str = "none"         # zzz | notes | hearts | sweat | sparkle | dust
    effect_phase: float = 0.0    # 0..1, animates the effect (floating zzz, ...)
    blush: bool = False
    squash: float = 1.0          # vertical squash-and-stretch of the body (jump anticipation)

    def __post_init__(self) -> None:
        if self.eyes not in EYES:
            raise ValueError(f"Pose.eyes: got {self.eyes!r}, expected one of {EYES}")
        if self.mouth not in MOUTHS:
            raise ValueError(f"Pose.mouth: got {self.mouth!r}, expected one of {MOUTHS}")
        if self.item not in ITEMS:
            raise ValueError(f"Pose.item: got {self.item!r}, expected one of {ITEMS}")
        if self.effect not in EFFECTS:
            raise ValueError(f"Pose.effect: got {self.effect!r}, expected one of {EFFECTS}")
        if self.facing not in (1, -1):
            raise ValueError(f"Pose.facing: got {self.facing!r}, expected +1 or -1")

    def mirrored(self) -> "Pose":
        return replace(self, facing=-self.facing)


STAND = Pose()
