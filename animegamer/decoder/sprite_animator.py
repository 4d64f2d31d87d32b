"""The sprite animator: a network that draws one character doing the verb, frame by frame, from a picture of
that character, on a small canvas that follows its feet. A shot is then layered: the place, each character's
drawn sprite where its feet go, the place's foreground.

Why a canvas per character (measured, docs/framenet.md): in a 96 x 144 frame a character stands ~40 px tall and
the action is a few limbs a few pixels wide, ~2 % of the frame's pixels. The whole-frame drawers (FrameNet,
FlowPaint) spend their loss and their CPU on scenery and camera pans and, within the training this CPU gives a
session, never got to the limbs; the true chained DIS flow at that scale is a smooth blob around the character,
so a flow target cannot teach a limb either. On an 80 x 80 canvas centred on the feet every sample is a character,
always at the same place and scale, and the pose change is a large share of what is drawn. The game's stage
already knows each character's cut-out and where its feet stand, so play has the layers this needs.

One frame a forward: the frame's index (1..16), the motion level, the character's role (alone, the
subject of a pair action, its partner) and the input's noise-augmentation level in the embedding, s_a in
cross-attention at the coarse levels and its mean token in the embedding. The input sprite is given in place
(premultiplied RGBA). Per frame the network draws a per-pixel flow, a painted sprite and a mask between them:
the sprite = (1 - mask) * input moved along the flow + mask * painted, so what the input holds (the face, the
clothes' colours) is carried, and what it does not (an arm raised, a body lying down) is painted; plus the
feet's move (a stride, a jump's lift) as two numbers. Before the flow, the whole body is moved by one affine per
frame (``body_warp``: a lean to lying down, a sit's drop, a fall), learned against where the world draws the body,
so a pose far from the input's is carried sharp rather than painted. Trained by regression on the world's
sprite tracks (``world/sprite_tracks.py``): a verb's poses follow from the verb, the adverb and the time, so there is no
unknown phase to average away (the world's phase varies by at most a seventh of a cycle).

All sprites face right; play mirrors the input of a left-facing character and mirrors back what is drawn.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from animegamer.core.checkpoint import load_json, load_safetensors, run_dir, save_model_dir
from animegamer.decoder.unet_blocks import UNetLevel, fourier, norm, warp

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT = "animegamer-sprite-animator"
OUT_CHANNELS = 2 + 1 + 4  # flow (dx, dy), mask, painted RGBA
REFERENCE_CHANNELS = 2 + 1  # the reference's flow and its mask logit (``reference_warp``)
REFERENCE_MASK_BIAS = -4.0  # a run without the reference warp gains one nearly closed: it draws nearly as before
BODY_PARAMS = 2 * 6  # the body warp's affine (2 x 3) for the input and for the reference


@dataclass
class SpriteAnimatorConfig:
    frames: int = 17  # frames of a shot, the first one given
    height: int = 80  # the canvas (world/sprite_tracks.py: SPRITE_H x SPRITE_W, feet at row 66, centre column)
    width: int = 80
    stem: int = 4  # space-to-depth factor: 80 x 80 -> 20 x 20 (0.75 s a step of 8 tracks x 4 frames on 2 cores;
    # at 2, 40 x 40, three times that)
    channels: tuple[int, ...] = (64, 128, 192)
    blocks: int = 2
    attention_from: int = 1  # cross-attention to s_a at levels >= this
    heads: int = 4
    emb_dim: int = 256
    cond_dim: int = 256  # s_a's width (the shipped E_a's)
    levels: int = 5
    roles: int = 3  # alone, the subject of a pair action, its partner
    # the character's reference cut-out (standing, the way the input faces) given beside the input pose: who the
    # character is comes from a clean picture every turn, so a scene that goes on from drawn sprites cannot drift
    # away from it (reference-guided animation, as Animate Anyone's reference net; the input gives only the pose)
    reference: bool = True
    # the reference cut-out is also moved along a flow of its own and mixed in (softmax over the moved input, the
    # moved reference and the painted sprite): a face's few pixels are carried from a clean picture every turn, not
    # repainted through the network from a drawn one (a repainted face turned into a blob of hair in one turn)
    reference_warp: bool = True
    # a whole-body move drawn as one affine warp of the input (and of the reference) before the per-pixel flow,
    # learned against where the world puts the body (``world/sprite_tracks.sprite_body``): lying down, a fall or a
    # sit's drop is a rotation and a shift of the whole body, which the affine carries sharp; regressed through a
    # per-pixel flow or painted, it came out a blur (docs/layers.md, "The body's move as one warp")
    body_warp: bool = True
    flow_scale: float = 4.0  # pixels per unit of the flow output
    offset_scale: float = 16.0  # pixels per unit of the feet's move (a wild run travels ~8 px a frame)
    mask_bias: float = -3.0  # the mask starts nearly closed: the untrained network copies its input
    # training
    moving_weight: float = 4.0  # extra weight on canvas pixels that differ from the input (the pose change)
    # extra weight on the verb's marks (food in the hand, a book, zzz, notes, hearts, sparkles: a few dozen pixels
    # of 6400 that name the verb; weighed as any moving pixel, they were painted faintly or not at all:
    # docs/layers.md, "The verb's marks")
    mark_weight: float = 16.0
    offset_weight: float = 1.0
    body_weight: float = 1.0  # the body warp's error (pixels over the drawn body, in offset_scale units)
    # in training the input and the reference are moved along where the world put the body (its exact affine),
    # the head learning the affine on its own: moved along the network's own (1-2 px off), a sharp lying body
    # cost more L1 than a blurred painted one, and the mix went on painting it (docs/layers.md)
    true_body: bool = True
    aug_max: float = 0.1  # input noise augmentation: in play a continuing scene starts from a drawn sprite
    standing_share: float = 0.4  # share of training inputs that are the character standing (a scene's start)
    # share of training inputs that are the network's own drawing (no gradient) of the last frame of another shot
    # of the same character and look: in play a scene that goes on starts from such a drawing, of another verb.
    # Trained only on true first frames of its own verb, the network copied its own blur and a previous verb's
    # pose into every later turn (a sitter's blurred head stayed for 40 turns, docs/layers.md)
    went_on_share: float = 0.3
    frames_per_track: int = 4  # frames drawn per track and training step
    # from the character standing or another shot's last frame, graded against the shot drawn from phase 0: those
    # inputs do not show where in its cycle the world began the shot (a walker's stride, when a dancer turns), so
    # against the shot's own phase the target is an average over phases, and L1 draws the average (a dancer
    # smeared across her turn). From phase 0 there is one motion to learn. Needs the tracks at phase 0
    # (``phase_sprites.sprite_tensors(canonical=True)``); only training reads it
    canonical_start: bool = True
    # share of training tracks replaced by the same shot played in another adverb's manner, asked at the level
    # that reads from them, with the shot's own s_a (``phase_sprites.SpriteShots``): the level is then the only
    # input that says how much to move; only training reads it
    level_swap_share: float = 0.5
    # frame 0 is drawn too (trained at index 0): a scene that starts shows its characters already in the verb's
    # pose at frame 0, as the world's shots start, instead of the stage's standing cut-out, whose jump to the pose
    # at frame 1 read as one or two levels more motion than asked (docs/layers.md)
    first_frame: bool = True
    # weight of the frame-to-frame change loss: the frames are drawn in pairs of neighbours (i, i + 1) and the drawn
    # sprite's change between them (mean absolute, per pair) is graded against the true track's, relative to the
    # batch's true change. Play's level is read from how much the drawing moves; an L1 regressor unsure of a thin
    # limb draws it still, a level calmer than its track (docs/layers.md, "... the change loss in play"). 0: off. The
    # shipped animator had it for its last 2000 steps only (docs/history.md)
    change_weight: float = 0.05
    # the least true change a pair counts for in the change loss's denominator (mean absolute change of a pair of
    # frames): a batch whose true frames all hold still would otherwise divide by ~0 (docs/layers.md)
    change_floor: float = 1e-3

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        unit = self.stem * 2 ** (len(self.channels) - 1)
        if self.frames < 2 or self.height % unit or self.width % unit:
            raise ValueError(f"SpriteAnimatorConfig: frames >= 2 and height, width multiples of {unit}, got "
                             f"{self.frames}, {self.height}x{self.width}")
        if self.reference_warp and not self.reference:
            raise ValueError("SpriteAnimatorConfig: reference_warp needs reference")
        if self.body_warp and not self.reference_warp:
            raise ValueError("SpriteAnimatorConfig: body_warp needs reference_warp")
        if any(c % self.heads or c % 8 for c in self.channels) or self.blocks < 1:
            raise ValueError(f"SpriteAnimatorConfig: channels must be multiples of 8 and of heads, blocks >= 1, got "
                             f"{self.channels}, {self.heads}, {self.blocks}")
        if self.change_weight < 0 or self.change_floor <= 0 or (self.change_weight and self.frames_per_track % 2):
            raise ValueError(f"SpriteAnimatorConfig: change_weight >= 0, change_floor > 0, and with a change_weight an "
                             f"even frames_per_track (pairs of neighbouring frames), got {self.change_weight}, "
                             f"{self.change_floor}, {self.frames_per_track}")
        shares = (self.standing_share, self.went_on_share)
        if not 1 <= self.frames_per_track <= self.frames - 1 or min(shares) < 0 or sum(shares) > 1:
            raise ValueError(f"SpriteAnimatorConfig: frames_per_track in 1..{self.frames - 1}, standing_share and "
                             f"went_on_share >= 0 summing to <= 1, got {self.frames_per_track}, {shares}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"channels": list(self.channels)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpriteAnimatorConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"SpriteAnimatorConfig: unknown fields {sorted(unknown)}")
        return cls(**d)


SPRITE_ANIMATOR_PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tiny": dict(frames=5, height=16, width=16, stem=2, channels=(16, 32), blocks=1, heads=2, emb_dim=32, cond_dim=16,
                 frames_per_track=2),
}


def sprite_animator_preset(name: str, **overrides: Any) -> SpriteAnimatorConfig:
    if name not in SPRITE_ANIMATOR_PRESETS:
        raise ValueError(f"unknown sprite animator preset {name!r}; choose from {sorted(SPRITE_ANIMATOR_PRESETS)}")
    return SpriteAnimatorConfig(**{**SPRITE_ANIMATOR_PRESETS[name], **overrides})


@dataclass(frozen=True)
class FrameCue:
    """What one drawn frame is asked, per row: s_a (M, N, D), the motion level (M,), the frame's index in the shot
    (M,), the role (M,: alone, a pair's subject, its partner) and the noise augmentation of the input (M,)."""

    s_a: torch.Tensor
    level: torch.Tensor
    index: torch.Tensor
    role: torch.Tensor
    aug: torch.Tensor

    def rows(self, part: slice) -> FrameCue:
        """The same cue for rows ``part`` only."""
        return FrameCue(self.s_a[part], self.level[part], self.index[part], self.role[part], self.aug[part])


class SpriteAnimatorNet(nn.Module):
    """forward(sprite, reference, s_a, level, index, role, aug) -> (offset (M, 2), flow (M, 2, H, W), mask logit
    (M, 1, H, W), paint (M, 4, H, W), and with ``reference_warp`` the reference's flow (M, 2, H, W) and mask logit
    (M, 1, H, W), and with ``body_warp`` the body's move (M, 12): ``body_affines``); the sprite and its reference
    in [-1, 1] (premultiplied RGBA scaled), flows and offset in their scales' units, paint in [0, 1] units before
    clamping."""

    def __init__(self, config: SpriteAnimatorConfig) -> None:
        super().__init__()
        self.config = cfg = config
        e, s = cfg.emb_dim, cfg.stem
        self.aug_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.level_emb = nn.Embedding(cfg.levels + 1, e)  # index 0 unused: levels are 1..5
        self.index_emb = nn.Embedding(cfg.frames, e)  # index 0 unused: frame 0 is given
        self.role_emb = nn.Embedding(cfg.roles, e)
        self.cond_proj = nn.Sequential(nn.LayerNorm(cfg.cond_dim), nn.Linear(cfg.cond_dim, e))
        self.cond_norm = nn.LayerNorm(cfg.cond_dim)
        c0 = cfg.channels[0]
        self.conv_in = nn.Conv2d((8 if cfg.reference else 4) * s * s, c0, 3, padding=1)
        self.down, self.downsample, self.up, self.up_conv = (nn.ModuleList() for _ in range(4))
        c_prev = c0
        for i, c in enumerate(cfg.channels):
            self.down.append(UNetLevel(c_prev, c, cfg, i >= cfg.attention_from, cfg.blocks))
            last = i == len(cfg.channels) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(c, c, 3, stride=2, padding=1))
            c_prev = c
        self.mid = UNetLevel(c_prev, c_prev, cfg, True, 1)
        for i in reversed(range(len(cfg.channels))):
            c = cfg.channels[i]
            self.up_conv.append(nn.Conv2d(c_prev, c_prev, 3, padding=1))
            self.up.append(UNetLevel(c_prev + c, c, cfg, i >= cfg.attention_from, cfg.blocks))
            c_prev = c
        self.offset = nn.Linear(cfg.channels[-1], 2)  # the feet's move, from the coarsest features
        nn.init.zeros_(self.offset.weight)
        nn.init.zeros_(self.offset.bias)
        if cfg.body_warp:  # the body's move from the input's (the reference's) pose: zero = no move
            c = cfg.channels[-1]
            self.body = nn.Sequential(nn.Linear(c, c), nn.SiLU(), nn.Linear(c, BODY_PARAMS))
            nn.init.zeros_(self.body[2].weight)
            nn.init.zeros_(self.body[2].bias)
        self.norm_out = norm(c0)
        out = OUT_CHANNELS + (REFERENCE_CHANNELS if cfg.reference_warp else 0)
        self.conv_out = nn.Conv2d(c0, out * s * s, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        with torch.no_grad():  # pixel_shuffle takes channel c's s*s sub-pixels from [c s^2, (c+1) s^2)
            self.conv_out.bias.zero_()
            self.conv_out.bias[2 * s * s: 3 * s * s] = cfg.mask_bias
            if cfg.reference_warp:
                self.conv_out.bias[(OUT_CHANNELS + 2) * s * s:] = REFERENCE_MASK_BIAS

    def forward(self, sprite: torch.Tensor, reference: torch.Tensor | None, s_a: torch.Tensor, level: torch.Tensor,
                index: torch.Tensor, role: torch.Tensor, aug: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cfg = self.config
        if cfg.reference:
            if reference is None:
                raise ValueError("this sprite animator draws from a reference cut-out: pass one")
            sprite = torch.cat([sprite, reference], dim=1)
        emb = (self.aug_mlp(fourier(aug, cfg.emb_dim)) + self.level_emb(level) + self.index_emb(index)
               + self.role_emb(role) + self.cond_proj(s_a.mean(dim=1)))
        emb = F.silu(emb)  # (M, E)
        cond = self.cond_norm(s_a)  # (M, N, D)
        x = self.conv_in(F.pixel_unshuffle(sprite, cfg.stem))
        skips = []
        for stage, down in zip(self.down, self.downsample):
            x = stage(x, emb, cond)
            skips.append(x)
            x = down(x)
        x = self.mid(x, emb, cond)
        pooled = x.mean(dim=(2, 3))
        offset = self.offset(pooled)  # (M, 2)
        body = (self.body(pooled),) if cfg.body_warp else ()  # (M, 12)
        for stage, conv in zip(self.up, self.up_conv):
            skip = skips.pop()
            if x.shape[-2:] != skip.shape[-2:]:
                x = conv(F.interpolate(x, size=skip.shape[-2:], mode="nearest"))
            x = stage(torch.cat([x, skip], dim=1), emb, cond)
        x = F.pixel_shuffle(self.conv_out(F.silu(self.norm_out(x))), cfg.stem)  # (M, 7 or 10, H, W)
        return (offset, x[:, :2], x[:, 2:3], x[:, 3:7], *((x[:, 7:9], x[:, 9:10]) if cfg.reference_warp else ()),
                *body)


def load_into(model: "SpriteAnimator", state: dict[str, torch.Tensor]) -> None:
    """Weights of another run into ``model`` (``train sprites --init``): a run drawn without a reference cut-out
    starts one that has it with the reference's input weights at zero, so it draws exactly as before; a run without
    the reference warp gains one that moves the reference as the input is moved, its mask nearly closed."""
    own, state = model.state_dict(), dict(state)
    key = "net.conv_in.weight"
    if key in state and state[key].shape != own[key].shape and state[key].shape[1] * 2 == own[key].shape[1]:
        state[key] = torch.cat([state[key], torch.zeros_like(state[key])], dim=1)
    ss = model.config.stem ** 2
    w, b = "net.conv_out.weight", "net.conv_out.bias"
    gains_warp = own[w].shape[0] == (OUT_CHANNELS + REFERENCE_CHANNELS) * ss
    if w in state and state[w].shape[0] == OUT_CHANNELS * ss and gains_warp:
        mask_w = torch.zeros_like(state[w][:ss])
        mask_b = torch.full_like(state[b][:ss], REFERENCE_MASK_BIAS)
        state[w] = torch.cat([state[w], state[w][:2 * ss], mask_w])  # the reference's flow starts as the input's
        state[b] = torch.cat([state[b], state[b][:2 * ss], mask_b])
    missing = set(own) - set(state)
    if missing - {k for k in own if k.startswith("net.body.")}:
        raise ValueError(f"--init: the weights lack {sorted(missing)[:4]}")
    # a run without the body warp gains one at zero (no move)
    state.update({k: own[k] for k in missing})
    model.load_state_dict({k: v.float() for k, v in state.items()})


def body_affines(params: torch.Tensor, height: int, width: int,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The body head's (M, 12) -> the backward affines (M, 2, 3) of the input and of the reference: a drawn pixel q
    takes the body from L (q - c) + c + t of the picture (pixels), c the canvas's centre, L = I + the first four
    numbers, t = ``scale`` x the last two; all zero is no move."""
    p = params.float().reshape(-1, 2, 6)
    lin = torch.eye(2, device=p.device) + p[..., :4].reshape(-1, 2, 2, 2)  # (M, 2, 2, 2)
    centre = torch.tensor([(width - 1) / 2, (height - 1) / 2], device=p.device)
    shift = centre + p[..., 4:] * scale - (lin @ centre[:, None])[..., 0]  # (M, 2, 2)
    affine = torch.cat([lin, shift[..., None]], dim=-1)  # (M, 2, 2, 3)
    return affine[:, 0], affine[:, 1]


def true_affine(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Body matrices (M, 2, 3) of a source picture and a target frame (``world/sprite_tracks.sprite_body``) -> the
    backward affine (M, 2, 3): where in the source the target's body point at each pixel is."""
    last = torch.tensor([0.0, 0.0, 1.0], device=source.device).expand(source.shape[0], 1, 3)
    s = torch.cat([source.float(), last], dim=1)
    t = torch.cat([target.float(), last], dim=1)
    return (s @ torch.linalg.inv(t))[:, :2]


def affine_error(pred: torch.Tensor, truth: torch.Tensor, coverage: torch.Tensor) -> torch.Tensor:
    """Mean distance (pixels, L1 over x and y) between where two affines (M, 2, 3) take the pixels of the drawn body
    (``coverage`` (M, H, W) > 0.05; the whole canvas where it is empty)."""
    m, h, w = coverage.shape
    ys, xs = torch.meshgrid(torch.arange(h, device=pred.device, dtype=torch.float32),
                            torch.arange(w, device=pred.device, dtype=torch.float32), indexing="ij")
    q = torch.stack([xs, ys, torch.ones_like(xs)]).reshape(3, -1)  # (3, HW)
    dist = ((pred.float() - truth.float()) @ q).abs().sum(dim=1)  # (M, HW)
    weight = (coverage.reshape(m, -1) > 0.05).float() + 1e-4
    return ((dist * weight).sum(dim=1) / weight.sum(dim=1)).mean()


def frame_change(frames: torch.Tensor, tracks: int, per_track: int) -> torch.Tensor:
    """Frames (tracks x per_track, C, H, W) drawn in pairs of neighbours -> each pair's mean absolute change
    (tracks x per_track / 2,)."""
    pairs = frames.reshape(tracks * per_track // 2, 2, -1)
    return (pairs[:, 1] - pairs[:, 0]).abs().mean(dim=1)


def to_unit(sprites: torch.Tensor) -> torch.Tensor:
    """uint8 (..., H, W, 4) -> float (..., 4, H, W) in [0, 1]."""
    return sprites.movedim(-1, -3).float().div(255)


class SpriteAnimator(nn.Module):
    """SpriteAnimatorNet with its training loss (``forward``) and its drawing (``draw``)."""

    def __init__(self, net: SpriteAnimatorNet) -> None:
        super().__init__()
        self.net = net
        self.config = net.config

    def config_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "net": self.config.to_dict()}

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = torch.float16) -> Path:
        return save_model_dir(directory, self.state_dict(), {"model_config": self.config_dict()}, dtype,
                              WEIGHTS_NAME, CONFIG_NAME)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu") -> "SpriteAnimator":
        """From a directory with config.json + model.safetensors: a `train sprites` run, its final/, or a packed
        decoder's sprite_animator/."""
        d = run_dir(path, "sprite animator", CONFIG_NAME)
        meta = load_json(d / CONFIG_NAME).get("model_config", {})
        if meta.get("format") != FORMAT:
            raise ValueError(f"{d}: not a sprite animator (format {meta.get('format')!r})")
        model = cls(SpriteAnimatorNet(SpriteAnimatorConfig.from_dict(
            {"reference": False, "reference_warp": False, "body_warp": False, "canonical_start": False,
             "first_frame": False, **meta["net"]})))
        model.load_state_dict({k: v.float() for k, v in load_safetensors(d / WEIGHTS_NAME).items()})
        return model.to(device).eval()

    def frame(self, sprite: torch.Tensor, reference: torch.Tensor | None, cue: FrameCue, seen: torch.Tensor | None = None,
              mode: str = "bilinear", body: tuple[torch.Tensor, torch.Tensor] | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """sprite and reference (M, 4, H, W) in [0, 1] -> (the drawn sprite (M, 4, H, W) in [0, 1], the feet's move
        (M, 2) in pixels, +x right, +y up, and with ``body_warp`` the body's backward affines (M, 2, 3) from the
        input and from the reference, else None). ``seen``: the network's view of the input (noise-augmented in
        training); ``body``: the affines to move the input and the reference along instead of the network's (the
        world's, in training: ``true_body``)."""
        cfg = self.config
        seen = sprite if seen is None else seen
        offset, flow, mask, paint, *ref = self.net(seen * 2 - 1, None if reference is None else reference * 2 - 1,
                                                   cue.s_a, cue.level, cue.index, cue.role, cue.aug)
        affines = body_affines(ref[2], cfg.height, cfg.width, cfg.offset_scale) if cfg.body_warp else None
        along = body if body is not None else affines
        moved = warp(sprite, flow.float() * cfg.flow_scale, mode, None if along is None else along[0])
        if ref:  # softmax over the moved input (logit 0), the painted sprite and the moved reference
            ref_flow, ref_mask = ref[:2]
            w = torch.softmax(torch.cat([torch.zeros_like(mask), mask, ref_mask], dim=1).float(), dim=1)
            ref_moved = warp(reference, ref_flow.float() * cfg.flow_scale, mode, None if along is None else along[1])
            drawn = w[:, :1] * moved + w[:, 1:2] * paint.float() + w[:, 2:] * ref_moved
        else:
            m = torch.sigmoid(mask.float())
            drawn = (1 - m) * moved + m * paint.float()
        alpha = drawn[:, 3:].clamp(0, 1)
        colour = torch.minimum(drawn[:, :3].clamp(0, 1), alpha)  # premultiplied: no colour where nothing is drawn
        return torch.cat([colour, alpha], dim=1), offset.float() * cfg.offset_scale, affines

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """batch: rgba uint8 (B, T, H, W, 4), standing uint8 (B, H, W, 4), offset (B, T, 2) pixels, s_a (B, N, D),
        motion_level (B,), role (B,), and a donor shot of the same character and look (``donor_first`` uint8
        (B, H, W, 4), ``donor_s_a``, ``donor_level``, ``donor_role``); with ``body_warp`` where the world put the
        body (``body`` (B, T, 2, 3), ``standing_body`` (B, 2, 3), ``donor_last_body`` (B, 2, 3):
        ``world/sprite_tracks.sprite_body``); with ``mark_weight`` ``marks`` uint8 (B, T, H, W)
        (``sprite_tracks.verb_marks``). ``frames_per_track`` random frames of each track (with ``change_weight``
        in pairs of neighbours) are drawn and graded, from the track's frame 0, the character standing
        (``standing_share``) or the network's own drawing of the donor's last frame (``went_on_share``)."""
        cfg = self.config
        rgba, dev = batch["rgba"], batch["rgba"].device
        b, k = rgba.shape[0], cfg.frames_per_track
        first = 0 if cfg.first_frame else 1
        if cfg.change_weight:  # pairs of neighbouring frames (i, i + 1)
            starts = torch.stack([torch.randperm(cfg.frames - first - 1, device=dev)[:k // 2] + first
                                  for _ in range(b)])
            index = torch.stack([starts, starts + 1], dim=-1).flatten(1)  # (B, K)
        else:
            index = torch.stack([torch.randperm(cfg.frames - first, device=dev)[:k] + first for _ in range(b)])
        track = torch.arange(b, device=dev)[:, None].expand(b, k)
        reference = to_unit(batch["standing"])
        pick = torch.rand(b, device=dev)
        standing = pick < cfg.standing_share
        went_on = (pick >= cfg.standing_share) & (pick < cfg.standing_share + cfg.went_on_share)
        truths = self.targets(batch, standing | went_on)
        target = to_unit(truths["rgba"][track, index]).flatten(0, 1)  # (BK, 4, H, W)
        offset_true = truths["offset"][track, index].float().flatten(0, 1)  # (BK, 2)
        source = torch.where(standing[:, None, None, None], reference, to_unit(rgba[:, 0]))
        if went_on.any():
            source = source.clone()
            source[went_on] = self.went_on_input(batch, reference, went_on)
        aug = torch.rand(b, device=dev) * cfg.aug_max
        seen = (source + aug[:, None, None, None] * torch.randn_like(source)).clamp(0, 1)
        rep = lambda x: x.repeat_interleave(k, dim=0)  # noqa: E731  per track -> per drawn frame
        source_r = rep(source)
        truth = None
        if cfg.body_warp:  # where the world put the body: from the input's pose and the reference's to this frame
            body_t = truths["body"][track, index].flatten(0, 1)  # (BK, 2, 3)
            source_body = torch.where(standing[:, None, None], batch["standing_body"], batch["body"][:, 0])
            source_body = torch.where(went_on[:, None, None], batch["donor_last_body"], source_body)
            truth = (true_affine(rep(source_body), body_t), true_affine(rep(batch["standing_body"]), body_t))
        moving = ((target - source_r).abs().amax(dim=1, keepdim=True) > 0.05).float()
        weight = 1 + cfg.moving_weight * moving
        if cfg.mark_weight and "marks" in truths:
            weight = weight + cfg.mark_weight * truths["marks"][track, index].flatten(0, 1)[:, None].float() / 255
        weight = weight / weight.mean(dim=(1, 2, 3), keepdim=True)
        ref_r = rep(reference) if cfg.reference else None
        cue = FrameCue(rep(batch["s_a"].float()), rep(batch["motion_level"].long()), index.flatten(),
                       rep(batch["role"].long()), rep(aug))
        body_in = truth if cfg.true_body else None
        drawn, offset, affines = self.frame(source_r, ref_r, cue, rep(seen), body=body_in)
        picture = ((drawn - target).abs() * weight).mean()
        copy = ((source_r - target).abs() * weight).mean()  # what copying the input would cost: learning is the gap
        feet = (offset - offset_true).abs().mean() / cfg.offset_scale
        loss = picture + cfg.offset_weight * feet
        logs = {"picture": float(picture.detach()), "copy": float(copy), "feet": float(feet.detach()),
                "feet_still": float(offset_true.abs().mean() / cfg.offset_scale)}
        if cfg.change_weight:
            change = frame_change(drawn, b, k)
            true_change = frame_change(target, b, k)
            scale = true_change.sum().clamp(min=cfg.change_floor * len(true_change))
            change_error = (change - true_change).abs().sum() / scale
            loss = loss + cfg.change_weight * change_error
            logs |= {"change_error": float(change_error.detach()),
                     "change_ratio": float(change.detach().sum() / scale)}
        if affines is not None and truth is not None:  # the body's move, against where the world put the body
            coverage = target[:, 3]
            body = (affine_error(affines[0], truth[0], coverage) + affine_error(affines[1], truth[1], coverage)) / 2
            loss = loss + cfg.body_weight * body / cfg.offset_scale
            logs["body_px"] = float(body.detach())
        return loss, {"loss": float(loss.detach()), **logs}

    def targets(self, batch: dict[str, torch.Tensor], unseen: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per track, the frames it is graded against (``rgba``, ``offset``, ``body``, ``marks``): the shot's own,
        or with ``canonical_start``, for the tracks ``unseen`` (bool (B,): the input is the character standing or
        another shot's last frame, which do not show where in its cycle the shot began), the same shot drawn
        from phase 0 (the batch's ``canonical_*``)."""
        own = {key: batch[key] for key in ("rgba", "offset", "body", "marks") if key in batch}
        if not (self.config.canonical_start and "canonical_rgba" in batch):
            return own
        return {key: torch.where(unseen.view(-1, *[1] * (value.dim() - 1)), batch[f"canonical_{key}"], value)
                for key, value in own.items()}

    @torch.no_grad()
    def went_on_input(self, batch: dict[str, torch.Tensor], reference: torch.Tensor,
                      rows: torch.Tensor) -> torch.Tensor:
        """The network's own drawing of the donor shot's last frame from its first, for the tracks ``rows`` (bool
        (B,)): what a scene that goes on starts from in play (``decoder/layered.py``)."""
        first = to_unit(batch["donor_first"][rows])
        n = first.shape[0]
        s_a, level = batch["donor_s_a"][rows].float(), batch["donor_level"][rows].long()
        role = batch["donor_role"][rows].long()
        cue = FrameCue(s_a, level, torch.full((n,), self.config.frames - 1, device=first.device), role,
                       torch.zeros(n, device=first.device))
        last, _, _ = self.frame(first, reference[rows] if self.config.reference else None, cue)
        return last.clamp(0, 1)

    @torch.no_grad()
    def draw(self, sprite: torch.Tensor, reference: torch.Tensor | None, s_a: torch.Tensor, level: torch.Tensor,
             role: torch.Tensor, aug: float = 0.0, mode: str = "bicubic",
             chunk: int = 16, start: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """sprite and the character's reference cut-out (B, 4, H, W) in [0, 1] (premultiplied RGBA, facing as the
        role's track: right, a pair's partner left), s_a (B, N, D), level (B,), role (B,) -> frames start..T-1
        (B, T', 4, H, W) in [0, 1] and the feet (B, T', 2) in pixels, x their move from frame 0, y their lift
        (``start`` 0: frame 0 drawn too, for an animator trained to, ``first_frame``). Deterministic: a character's
        verb at an adverb has one motion in the world)."""
        cfg = self.config
        if not (start == 1 or (start == 0 and cfg.first_frame)):
            raise ValueError(f"draw(start={start}): frames from 1, or from 0 for an animator trained with first_frame")
        b, t = sprite.shape[0], cfg.frames - start
        index = torch.arange(start, cfg.frames, device=sprite.device).repeat(b)  # (B*T',)
        rep = lambda x: x.repeat_interleave(t, dim=0)  # noqa: E731
        sprite_r, ref_r = rep(sprite), rep(reference) if self.config.reference else None
        cue = FrameCue(rep(s_a.float()), rep(level.long()), index, rep(role.long()),
                       torch.full((b * t,), float(aug), device=sprite.device))
        drawn, offsets = [], []
        for i in range(0, b * t, chunk):
            part = slice(i, i + chunk)
            d, o, _ = self.frame(sprite_r[part], None if ref_r is None else ref_r[part], cue.rows(part), mode=mode)
            drawn.append(d)
            offsets.append(o)
        return (torch.cat(drawn).reshape(b, t, 4, *sprite.shape[-2:]).clamp(0, 1),
                torch.cat(offsets).reshape(b, t, 2))
