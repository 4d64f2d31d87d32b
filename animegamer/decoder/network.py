"""D_a, the animation-shot decoder network: E_a + diffusers' CogVideoXTransformer3DModel.

Paper (AnimeGamer, sec. 3.2): CogVideoX with s_a in place of the T5 text features, and the motion
scope f_ms (a level 1..5) through a sinusoidal embedding + MLP whose last layer is zero-initialised,
ADDED to the timestep embedding. diffusers' CogVideoX transformer has exactly that hook: the
``ofs`` embedding (``ofs_proj`` = sinusoidal ``Timesteps``, ``ofs_embedding`` = ``TimestepEmbedding``
MLP, summed into ``emb``). Its output width is ``ofs_embed_dim`` and it is added to the timestep
embedding of width ``time_embed_dim``, so the two must be equal (checked in the config).

How our shapes map onto the CogVideoX 1.0 layout (the 2B model; verified against diffusers 0.42):
- The shot autoencoder already packs time 4x (17 frames -> 5 latent frames), so
  ``patch_size_t=None`` (the 1.0 Conv2d patchifier, spatial patch 2) and
  ``temporal_compression_ratio=4``, ``sample_frames=17``: the 3D sin-cos position table then has
  (17 - 1) // 4 + 1 = 5 frames, exactly our latent length. (patch_size_t would need an even latent
  length and RoPE, i.e. the 1.5 layout.)
- ``sample_height/width`` = the LATENT size (12 x 18 for 96 x 144 shots), so the position table is
  built once at init instead of on every forward.
- ``use_rotary_positional_embeddings=False`` (2B layout). With sin-cos positions diffusers adds a
  table of length ``max_text_seq_length + patches`` to the joint sequence, so the condition length
  must be EXACTLY ``max_text_seq_length`` = N = n_text + n_visual (the paper's 226 is the same
  constraint). The condition tokens get zero positions.
- ``text_embed_dim`` = the width of s_a (E_a's d_model): ``patch_embed.text_proj`` maps it to the
  transformer width.

Spatial reference (``reference_channels`` > 0; a deliberate addition, CogVideoX-I2V style): the
visual tokens of s_a are ALSO projected (one Linear per token -> C_r x p x p) and unpatchified into
a (C_r, h, w) map on the transformer's own patch grid, which is concatenated to the noisy latent of
every latent frame (``in_channels`` = C' + C_r, as CogVideoX-I2V concatenates the image latent).
Why: through the joint attention alone, a small decoder trained on a CPU budget draws the right
colours but no character (docs/TRAINING.md); with the reference laid over the patch it belongs to,
"keep this frame and animate it" is a local operation. The map is a function of s_a only, so the
engine's predicted s_a drives it at game time and the CFG null branch is still E_a(zeros). It needs
the visual tokens on the patch grid: n_visual = (h / patch) x (w / patch). Measured (off by
default): far better shots from the TRUE s_a, worse ones from the engine's predicted s_a, which it
copies faithfully (docs/history.md#a-spatial-reference-for-the-decoder).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from diffusers import CogVideoXTransformer3DModel
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from safetensors.torch import load_file
from torch import nn

from animegamer.representation.action_encoder import ActionEncoder, ActionEncoderConfig

log = logging.getLogger(__name__)

NUM_MOTION_LEVELS = 5


@dataclass
class DecoderConfig:
    # Default: 6 layers x 256 wide (~9M parameters, ~19 MB fp16). Chosen over 8 x 384 (25M) so the
    # shipped weights stay small and a CPU hour buys ~2.5x more training steps.
    num_layers: int = 6
    num_heads: int = 4
    head_dim: int = 64
    time_embed_dim: int = 256  # also the width of the motion-level (ofs) embedding
    latent_channels: int = 16  # C' of the shot autoencoder (4 per frame x 4 packed frames)
    num_frames: int = 17  # pixel frames per shot
    temporal_compression: int = 4  # done by the autoencoder: 17 frames -> 5 latent frames
    latent_height: int = 24  # 96 / 4 (the default autoencoder is 4x spatial)
    latent_width: int = 36  # 144 / 4
    patch_size: int = 4  # 5 x 6 x 9 = 270 video tokens, the same count as 8x latents with patch 2
    n_text: int = 16
    n_visual: int = 54  # the default vision tower: 96 x 144 frames, patch 16 -> 6 x 9 tokens
    d_text_in: int = 384
    d_visual_in: int = 256
    cond_dim: int = 0  # width of s_a; 0 means "the transformer width"
    reference_channels: int = 0  # > 0: s_a's visual tokens also enter as a spatial map (module doc)
    use_motion_level: bool = True  # False = the paper's "w/o f_ms" ablation (no ofs embedding)
    adaln_zero_init: bool = True  # DiT-style: zero the blocks' modulation and the output layer
    spatial_interpolation_scale: float = 1.875
    temporal_interpolation_scale: float = 1.0
    pretrained_path: str | None = None  # local CogVideoX transformer dir (paper scale); never downloaded
    # The published release's decoder (training/release_import.py), where it is not diffusers' layout:
    e_a_gelu: str = "tanh"  # E_a's GELU ("none": exact, the release's)
    # width of the motion level's sinusoid before its MLP; 0 = time_embed_dim (diffusers' ofs). The release
    # embeds it at the transformer's width (1920 -> 512 -> 512), as it embeds the timestep.
    ofs_sinusoid_dim: int = 0
    # the number the motion level 1..5 is embedded as; None = the level itself. The release: its table
    # of optical-flow magnitudes (0.5, 2.5, 10, 15, 40).
    motion_ofs_values: list[float] | None = None
    norm_eps: float = 1e-5  # the blocks' LayerNorms (diffusers' default); the release's SAT model uses 1e-6

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        non_negative = ("cond_dim", "reference_channels", "ofs_sinusoid_dim")
        positive = [f.name for f in fields(self) if f.type in ("int", int) and f.name not in non_negative]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"DecoderConfig.{name} must be a positive int, got {value!r}")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ValueError(f"DecoderConfig.{name} must be >= 0 (0 = off / the width), got {getattr(self, name)}")
        if (self.num_frames - 1) % self.temporal_compression:
            raise ValueError(
                f"DecoderConfig.num_frames - 1 must be divisible by temporal_compression="
                f"{self.temporal_compression}, got num_frames={self.num_frames}"
            )
        for name in ("latent_height", "latent_width"):
            if getattr(self, name) % self.patch_size:
                raise ValueError(
                    f"DecoderConfig.{name} must be divisible by patch_size={self.patch_size}, "
                    f"got {getattr(self, name)}"
                )
        if self.e_a_gelu not in ("tanh", "none"):
            raise ValueError(f"DecoderConfig.e_a_gelu must be 'tanh' or 'none', got {self.e_a_gelu!r}")
        if self.motion_ofs_values is not None:
            self.motion_ofs_values = [float(v) for v in self.motion_ofs_values]
            if len(self.motion_ofs_values) != NUM_MOTION_LEVELS:
                raise ValueError(f"DecoderConfig.motion_ofs_values must be {NUM_MOTION_LEVELS} numbers (levels 1..5), "
                                 f"got {self.motion_ofs_values}")
        if self.reference_channels and self.n_visual != self.patch_grid[0] * self.patch_grid[1]:
            raise ValueError(
                f"DecoderConfig.reference_channels needs the visual tokens on the patch grid: n_visual must be "
                f"{self.patch_grid[0]} x {self.patch_grid[1]} = {self.patch_grid[0] * self.patch_grid[1]}, "
                f"got {self.n_visual}"
            )

    @property
    def patch_grid(self) -> tuple[int, int]:
        """(rows, cols) of the transformer's spatial patches on one latent frame."""
        return self.latent_height // self.patch_size, self.latent_width // self.patch_size

    @property
    def width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def d_cond(self) -> int:
        return self.cond_dim or self.width

    @property
    def n_tokens(self) -> int:
        return self.n_text + self.n_visual

    @property
    def latent_frames(self) -> int:
        return (self.num_frames - 1) // self.temporal_compression + 1

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        """(F, C', h, w) of one shot's latent."""
        return (self.latent_frames, self.latent_channels, self.latent_height, self.latent_width)

    def action_encoder_config(self) -> ActionEncoderConfig:
        return ActionEncoderConfig(
            d_text_in=self.d_text_in,
            d_visual_in=self.d_visual_in,
            n_text=self.n_text,
            n_visual=self.n_visual,
            d_model=self.d_cond,
            gelu=self.e_a_gelu,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DecoderConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"DecoderConfig got unknown fields {sorted(unknown)}")
        return cls(**d)


DECODER_PRESETS: dict[str, DecoderConfig] = {
    # tests: 5-frame 8 x 8 shots -> 2 latent frames of 8 x 4 x 4 (the "tiny" autoencoder)
    "tiny": DecoderConfig(
        num_layers=1, num_heads=2, head_dim=8, time_embed_dim=16, latent_channels=8,
        num_frames=5, latent_height=4, latent_width=4, patch_size=2, n_text=3, n_visual=4,
        d_text_in=8, d_visual_in=8, adaln_zero_init=False,
    ),
    # sized for a turn on a 2-core CPU (a forward in about 0.1 s at batch 1), 17 x 96 x 144 shots
    "default": DecoderConfig(),
    # CogVideoX-2B (30 x 1920, 480 x 720, 17 frames) + the paper's 30 T5 + 196 CLIP tokens x 1920
    "paper": DecoderConfig(
        num_layers=30, num_heads=30, head_dim=64, time_embed_dim=512, latent_channels=16,
        num_frames=17, latent_height=60, latent_width=90, patch_size=2, n_text=30, n_visual=196,
        d_text_in=4096, d_visual_in=768, cond_dim=1920, adaln_zero_init=False,
    ),
}


def decoder_preset(name: str, **overrides: Any) -> DecoderConfig:
    if name not in DECODER_PRESETS:
        raise ValueError(f"unknown decoder preset {name!r}; choose one of {sorted(DECODER_PRESETS)}")
    return replace(DECODER_PRESETS[name], **overrides)


def pretrained_transformer_fields(path: str | Path) -> dict[str, Any]:
    """The DecoderConfig fields a local diffusers CogVideoX transformer dir fixes (depth, heads, head
    width, timestep width, patch), and ``pretrained_path``: the paper preset takes its architecture
    from the checkpoint it starts from. The shot shape, s_a and the motion level stay the run's."""
    path = Path(path).expanduser()
    if (path / "transformer").is_dir():  # a whole CogVideoX pipeline dir: its transformer
        path = path / "transformer"
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{path}: no config.json; give a local diffusers CogVideoXTransformer3DModel dir "
                                "(CogVideoX-2B's transformer/ folder: config.json and *.safetensors)")
    c = json.loads(config.read_text())
    if c.get("_class_name", "CogVideoXTransformer3DModel") != "CogVideoXTransformer3DModel":
        raise ValueError(f"{path}: a {c.get('_class_name')}, not a CogVideoXTransformer3DModel")
    try:
        return {"num_layers": int(c["num_layers"]), "num_heads": int(c["num_attention_heads"]),
                "head_dim": int(c["attention_head_dim"]), "time_embed_dim": int(c["time_embed_dim"]),
                "patch_size": int(c["patch_size"]), "pretrained_path": str(path)}
    except KeyError as e:
        raise ValueError(f"{path}/config.json has no {e.args[0]!r}: not a CogVideoX transformer config") from None


def build_transformer(cfg: DecoderConfig) -> CogVideoXTransformer3DModel:
    model = CogVideoXTransformer3DModel(
        num_attention_heads=cfg.num_heads,
        attention_head_dim=cfg.head_dim,
        in_channels=cfg.latent_channels + cfg.reference_channels,
        out_channels=cfg.latent_channels,
        time_embed_dim=cfg.time_embed_dim,
        ofs_embed_dim=cfg.time_embed_dim if cfg.use_motion_level else None,
        text_embed_dim=cfg.d_cond,
        num_layers=cfg.num_layers,
        sample_width=cfg.latent_width,
        sample_height=cfg.latent_height,
        sample_frames=cfg.num_frames,
        patch_size=cfg.patch_size,
        patch_size_t=None,
        temporal_compression_ratio=cfg.temporal_compression,
        max_text_seq_length=cfg.n_tokens,
        spatial_interpolation_scale=cfg.spatial_interpolation_scale,
        temporal_interpolation_scale=cfg.temporal_interpolation_scale,
        use_rotary_positional_embeddings=False,
        use_learned_positional_embeddings=False,
        norm_eps=cfg.norm_eps,
    )
    if cfg.use_motion_level and cfg.ofs_sinusoid_dim:  # the level's sinusoid at another width than its MLP's
        model.ofs_proj = Timesteps(cfg.ofs_sinusoid_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        model.ofs_embedding = TimestepEmbedding(cfg.ofs_sinusoid_dim, cfg.time_embed_dim)
    return model


def load_pretrained_transformer(model: nn.Module, path: str | Path) -> dict[str, list[str]]:
    """Copy every same-named, same-shaped tensor of a local diffusers CogVideoX transformer dir.

    What does not fit (the new ofs/motion MLP, a text_proj of another width) keeps its init and is
    reported. Reads safetensors only (single or sharded); never touches the network.
    """

    path = Path(path)
    if (path / "transformer").is_dir():
        path = path / "transformer"
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors under {path} (expected a diffusers transformer dir)")
    own = model.state_dict()
    loaded, mismatched = [], []
    for f in files:
        for k, v in load_file(str(f)).items():
            if k in own and own[k].shape == v.shape:
                own[k].copy_(v)
                loaded.append(k)
            else:
                mismatched.append(k)
    missing = [k for k in own if k not in set(loaded)]
    log.info("pretrained transformer %s: %d loaded, %d new, %d skipped", path, len(loaded), len(missing), len(mismatched))
    return {"loaded": loaded, "missing": missing, "mismatched": mismatched}


class DecoderNet(nn.Module):
    """The pure network: E_a (condition) + the CogVideoX transformer (denoiser body).

    ``forward(x_t, timestep, s_a, motion_level) -> model output`` (v-prediction in our denoiser).
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.action_encoder = ActionEncoder(config.action_encoder_config())
        self.transformer = build_transformer(config)
        # s_a's visual tokens -> a C_r x p x p patch each (None without a spatial reference)
        p = config.patch_size
        self.reference_proj = (nn.Linear(config.d_cond, config.reference_channels * p * p)
                               if config.reference_channels else None)
        if config.pretrained_path:
            load_pretrained_transformer(self.transformer, config.pretrained_path)
        elif config.adaln_zero_init:
            self._adaln_zero_init()
        self.zero_init_motion_embedding()

    @torch.no_grad()
    def zero_init_motion_embedding(self) -> None:
        """The paper zero-initialises the motion MLP's last layer: at init the motion level adds 0."""
        emb = self.transformer.ofs_embedding
        if emb is not None:
            nn.init.zeros_(emb.linear_2.weight)
            nn.init.zeros_(emb.linear_2.bias)

    @torch.no_grad()
    def _adaln_zero_init(self) -> None:
        # From scratch only (a deliberate deviation, DiT's adaLN-Zero): every block starts as the
        # identity and the output as zero, which trains faster and more stably than default init.
        t = self.transformer
        for block in t.transformer_blocks:
            for norm in (block.norm1, block.norm2):
                nn.init.zeros_(norm.linear.weight)
                nn.init.zeros_(norm.linear.bias)
        nn.init.zeros_(t.proj_out.weight)
        nn.init.zeros_(t.proj_out.bias)

    def reference_map(self, s_a: torch.Tensor) -> torch.Tensor:
        """s_a (B, N, D) -> its visual tokens laid out on the latent grid, (B, C_r, h, w)."""
        c = self.config
        gh, gw, p = *c.patch_grid, c.patch_size
        z = self.reference_proj(s_a[:, c.n_text:])  # (B, gh * gw, C_r * p * p)
        z = z.reshape(-1, gh, gw, c.reference_channels, p, p).permute(0, 3, 1, 4, 2, 5)  # (B, C_r, gh, p, gw, p)
        return z.reshape(-1, c.reference_channels, gh * p, gw * p)  # (B, C_r, h, w)

    @torch.no_grad()
    def init_from(self, other: "DecoderNet") -> None:
        """Copy every tensor of ``other``: a decoder of the same config, or the same WITHOUT the spatial
        reference (as CogVideoX-I2V starts from the text-to-video weights): then the patch embedding's
        new input channels start at zero, so at init this decoder computes exactly what ``other`` does."""
        own = self.state_dict()
        for k, v in other.state_dict().items():
            if k == "transformer.patch_embed.proj.weight" and own[k].shape != v.shape:
                own[k].zero_()
                own[k][:, : v.shape[1]] = v  # (width, C' + C_r, p, p): old channels first
            else:
                own[k].copy_(v)

    def forward(
        self,
        x_t: torch.Tensor,
        timestep: torch.Tensor,
        s_a: torch.Tensor,
        motion_level: torch.Tensor | None,
    ) -> torch.Tensor:
        c = self.config
        if x_t.shape[1:] != c.latent_shape:
            raise ValueError(f"x_t must be (B, {', '.join(map(str, c.latent_shape))}), got {tuple(x_t.shape)}")
        if s_a.shape[1:] != (c.n_tokens, c.d_cond):
            raise ValueError(f"s_a must be (B, {c.n_tokens}, {c.d_cond}), got {tuple(s_a.shape)}")
        ofs = None
        if c.use_motion_level:
            if motion_level is None:
                raise ValueError("this decoder is motion-conditioned: pass motion_level (B,) in 1..5")
            ofs = motion_level.to(device=x_t.device, dtype=torch.float32).reshape(-1)  # (B,)
            if c.motion_ofs_values is not None:  # level 1..5 -> the number it was trained as
                ofs = torch.tensor(c.motion_ofs_values, device=x_t.device)[ofs.long() - 1]  # (B,)
        x_in = x_t
        if c.reference_channels:  # the same reference map beside every latent frame
            ref = self.reference_map(s_a).to(x_t.dtype)  # (B, C_r, h, w)
            x_in = torch.cat([x_t, ref[:, None].expand(-1, x_t.shape[1], -1, -1, -1)], dim=2)  # (B, F, C'+C_r, h, w)
        out = self.transformer(
            hidden_states=x_in,  # (B, F, C' (+ C_r), h, w)
            encoder_hidden_states=s_a,  # (B, N, D)
            timestep=timestep,  # (B,)
            ofs=ofs,  # (B,) motion level -> sinusoid -> MLP, added to the timestep embedding
            return_dict=False,
        )[0]
        return out  # (B, F, C', h, w)

    def warmup_parameters(self) -> list[nn.Parameter]:
        """Trained in the warm-up step (transformer frozen): E_a, the motion MLP and the condition
        input projection (text_proj: it is new whenever s_a's width differs from the checkpoint's);
        with a spatial reference also its projection and the patch embedding (new input channels)."""
        params = list(self.action_encoder.parameters())
        t = self.transformer
        params += list(t.patch_embed.text_proj.parameters())
        if t.ofs_embedding is not None:
            params += list(t.ofs_embedding.parameters())
        if self.reference_proj is not None:  # the spatial reference and the input channels it feeds
            params += list(self.reference_proj.parameters()) + list(t.patch_embed.proj.parameters())
        return params

    def set_warmup(self, warmup: bool) -> None:
        """Freeze everything but ``warmup_parameters`` (warmup=True), or unfreeze all (joint step)."""
        keep = {id(p) for p in self.warmup_parameters()}
        for p in self.parameters():
            p.requires_grad_(not warmup or id(p) in keep)
