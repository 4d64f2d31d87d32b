"""`animegamer convert release`: the published AnimeGamer checkpoints (TencentARC/AnimeGamer) -> a model
directory this game plays (`animegamer play --model DIR`). Read docs/RELEASE.md first.

    animegamer convert release --mllm checkpoints/AnimeGamer/MLLM-Qiqi/pytorch_model.bin \\
        --decoder checkpoints/AnimeGamer/VDM_Decoder-Qiqi --mistral checkpoints/Mistral-7B-Instruct-v0.1 \\
        --cogvideox checkpoints/CogVideoX-2b --out models/qiqi

What is read, and where it goes:
- MLLM (a state dict of the release's ``ContinuousLVLM_Video``: ``llm.`` = a peft model on Mistral,
  ``input_resampler.proj.{0,2}``, ``output_resampler.proj.{0,2}``): the LoRA adapters, the resized
  token table and LM head, the retrained RMSNorms and the resamplers -> ``engine/`` of a
  ``ReleaseEngine`` (engine/release_engine.py) over the user's own Mistral-7B-Instruct-v0.1, which is
  not copied (only its config.json is read here).
- Decoder (a SAT checkpoint: ``latest`` + ``N/mp_rank_00_model_states.pt`` holding ``module``; the
  transformer under ``model.diffusion_model.``): the CogVideoX-2B layout renamed to diffusers'
  ``CogVideoXTransformer3DModel`` (the renames diffusers' convert_cogvideox_to_diffusers documents:
  fused qkv split in three, the 12-way adaLN of each block split into norm1 / norm2), its SAT LoRA
  (``matrix_A.i`` / ``matrix_B.i``, scale alpha / r with SAT's alpha 1) merged into the weights; the
  motion-scope MLP ``flow_embed`` -> the ofs embedding (its sinusoid at the transformer's width and the
  release's table of flow values per level: ``DecoderConfig.ofs_sinusoid_dim``, ``motion_ofs_values``);
  E_a (``patch_embed.text_proj`` / ``ip_proj`` + ``txt_mix_layer_norm`` / ``ip_mix_layer_norm``) ->
  ``ActionEncoder``, whose E_a(zeros) is the release's unconditional branch. The release feeds the MLLM's
  s_a straight into the token sequence, so the transformer's own ``text_proj`` is the identity.
- CogVideoX-2B's VAE (a local diffusers folder) -> the shot autoencoder, scaled by its own scaling factor.
- The release's sampler (``ReleaseSamplerSettings``): 50 steps of a stochastic DPM-Solver++(2M) on its
  SNR-shifted schedule, dynamic guidance up to 7, 17 frames at 8 fps, 480 x 720.

A key the mapping needs and the checkpoint lacks, a key it does not know, or a shape that does not fit
is an error naming the key. Nothing downloads.
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from animegamer.core.checkpoint import atomic_dir, save_json_atomic, save_safetensors_atomic
from animegamer.core.errors import UserFacingError
from animegamer.core.runs import ENGINE_CONFIG, ENGINE_WEIGHTS
from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.network import DecoderConfig, DecoderNet
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig
from animegamer.engine.release_engine import (
    N_ADDED,
    RELEASE_ENGINE_KIND,
    RELEASE_ENGINE_VERSION,
    RELEASE_FAITHFUL,
    RELEASE_FLOW_BY_LEVEL,
    ReleaseEngineConfig,
)
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config

GiB = 1024 ** 3
LORA_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
SAT_PREFIX = "model.diffusion_model."
# SAT keys with no place in the game: its unused text/vocab tables, the mix layer norm of a 1280-wide CLIP
# (unused with the release's 768), rotary tables; the fixed sin-cos table is compared, not copied
SAT_IGNORED = re.compile(r"^(transformer\.word_embeddings\.|transformer\.position_embeddings\.|"
                         r"mixins\.patch_embed\.output_mix_layer_norm\.|mixins\.pos_embed\.freqs_)")


class ReleaseFormatError(ValueError):
    """A release checkpoint that is not what the mapping expects; the message names the key."""


@dataclass
class ReleaseSamplerSettings:
    """The release's sampler (VDM_Decoder/configs/cogvideox_2b.yaml, inference.yaml) and how it maps here:
    v-prediction on scaled-linear betas (0.00085..0.012, 1000 steps) shifted by 3 in SNR, then rescaled
    to zero terminal SNR (``ZeroSNRDDPMDiscretization(shift_scale=3)`` -> ``DiffusionConfig.snr_shift``); 50
    steps of a stochastic DPM-Solver++(2M) (``VPSDEDPMPP2MSampler`` -> diffusers' "sde-dpmsolver++"); dynamic
    CFG 1 + 6 (1 - cos(pi x ** 5)) / 2 (``DynamicCFG(scale 6, exp 5)``), where the release passes x = (50 - t) / 50
    with t the DDPM timestep, not the step: ``guidance_schedule`` "cosine" (x = step / 50) or, faithful, "release".
    Not the same to the number: the timesteps (the release spaces them its own way, here "trailing") and the
    random numbers of the noise."""

    steps: int = 50
    guidance: float = 6.0
    dynamic_cfg_exp: float = 5.0
    snr_shift: float = 3.0
    height: int = 480
    width: int = 720
    frames: int = 17
    fps: int = 8

    def sampler_config(self, steps: int | None = None, faithful: bool = False) -> SamplerConfig:
        return SamplerConfig(steps=steps or self.steps, guidance=self.guidance, solver="sde-dpmsolver++",
                             guidance_schedule="release" if faithful else "cosine", guidance_exp=self.dynamic_cfg_exp)

    def diffusion_config(self) -> DiffusionConfig:
        return DiffusionConfig(snr_shift=self.snr_shift)


@dataclass
class ReleaseImportConfig:
    mllm: str  # the release's MLLM state dict (pytorch_model.bin / .safetensors, or its folder)
    decoder: str  # the release's SAT decoder checkpoint (its folder with `latest`, or the .pt)
    mistral: str  # the local Mistral-7B-Instruct-v0.1 folder the MLLM was trained on
    cogvideox: str  # a local diffusers CogVideoX-2B folder (or its vae/)
    out: str
    window: int | None = None  # history turns the engine sees; None = 3, or the release's 1 when faithful
    faithful: bool = False  # every switch as the release's inference does it (engine/release_engine.py)
    decoder_lora_scale: float | None = None  # SAT LoRA merge scale; None = SAT's alpha / r = 1 / r
    sample_steps: int | None = None  # None = the release's 50
    height: int | None = None  # shot size in pixels; None = the release's 480 x 720
    width: int | None = None
    fp16: bool = True  # store the decoder in fp16 (the engine's table keeps the checkpoint's dtype)
    trust_pickle: bool = False  # let torch unpickle non-tensor content of the checkpoints (see _read_state_dict)
    sampler: ReleaseSamplerSettings = field(default_factory=ReleaseSamplerSettings)

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 0:
            raise ValueError(f"ReleaseImportConfig.window must be >= 0, got {self.window}")
        if self.decoder_lora_scale is not None and self.decoder_lora_scale <= 0:
            raise ValueError(f"ReleaseImportConfig.decoder_lora_scale must be > 0, got {self.decoder_lora_scale}")


# ---------------------------------------------------------------------- reading


def _read_state_dict(path: Path, trust_pickle: bool = False) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors, memory-mapped where torch can. A pickle holding more than tensors (a SAT /
    DeepSpeed checkpoint keeps its run's arguments beside them) is refused unless ``trust_pickle``:
    unpickling runs code, so only for files from a source the user trusts."""
    if path.suffix == ".safetensors":
        return load_file(str(path))
    try:
        sd = torch.load(str(path), map_location="cpu", weights_only=not trust_pickle, mmap=True)
    except RuntimeError as e:
        if "mmap" not in str(e):
            raise
        sd = torch.load(str(path), map_location="cpu", weights_only=not trust_pickle)  # an old, non-zip file
    except Exception as e:  # noqa: BLE001  (torch raises UnpicklingError or others for non-tensor content)
        if trust_pickle:
            raise
        raise ReleaseFormatError(f"{path}: holds more than tensors ({type(e).__name__}); if it is the release's own "
                                 "file, convert with --trust-pickle (unpickling runs code from the file)") from None
    if isinstance(sd, dict) and "module" in sd and isinstance(sd["module"], dict):  # SAT / DeepSpeed
        sd = sd["module"]
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ReleaseFormatError(f"{path}: not a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in sd.items()}


def mllm_file(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if path.is_dir():
        found = [p for p in (path / "pytorch_model.bin", path / "model.safetensors") if p.is_file()]
        if not found:
            raise FileNotFoundError(f"{path}: no pytorch_model.bin (the release's MLLM-Qiqi/pytorch_model.bin)")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such MLLM checkpoint")
    return path


def sat_file(path: str | Path) -> Path:
    """The SAT checkpoint file: ``path`` itself, or under a folder with ``latest`` (an iteration number)."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if (path / "latest").is_file():
        path = path / (path / "latest").read_text().strip()
    found = sorted(path.glob("mp_rank_00_model_states.pt")) + sorted(path.glob("*.safetensors"))
    if not found:
        raise FileNotFoundError(f"{path}: no mp_rank_00_model_states.pt (the release's VDM_Decoder-Qiqi folder "
                                "holds `latest` and a folder of that number)")
    return found[0]


def mistral_config(path: str | Path) -> dict[str, Any]:
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{path}: no config.json (a local Mistral-7B-Instruct-v0.1 folder)")
    c = json.loads(config.read_text())
    if c.get("model_type") not in ("mistral", "llama"):
        raise ReleaseFormatError(f"{path}: model_type {c.get('model_type')!r}, not a Mistral")
    return c


# ---------------------------------------------------------------------- the MLLM


def _take(sd: dict[str, torch.Tensor], used: set[str], where: Path, *names: str) -> torch.Tensor:
    """The first of ``names`` in ``sd`` (the release's peft versions spell some keys two ways)."""
    for n in names:
        if n in sd:
            used.add(n)
            return sd[n]
    raise ReleaseFormatError(f"{where}: missing key {names[0]!r}" + (f" (or {names[1:]})" if names[1:] else ""))


def _check(name: str, t: torch.Tensor, shape: tuple[int, ...], where: Path) -> torch.Tensor:
    if tuple(t.shape) != tuple(shape):
        raise ReleaseFormatError(f"{where}: key {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t


def map_mllm(sd: dict[str, torch.Tensor], mistral: dict[str, Any], where: Path,
             rep_tokens: int = 226, rep_dim: int = 1920) -> tuple[dict[str, torch.Tensor], int]:
    """The release's MLLM state dict -> (ReleaseEngine weights by name, LoRA rank). Every key the engine
    needs is checked for presence and shape against the Mistral config; keys of the release's own model
    that the engine does not read (the frozen base projections, peft's copies of the original norms) are
    skipped; anything else is an error naming it."""
    H, L, F = int(mistral["hidden_size"]), int(mistral["num_hidden_layers"]), int(mistral["intermediate_size"])
    kv = int(mistral.get("num_key_value_heads", mistral["num_attention_heads"]))
    hd = int(mistral.get("head_dim") or H // int(mistral["num_attention_heads"]))
    V = int(mistral["vocab_size"]) + N_ADDED
    used: set[str] = set()
    p = "llm.base_model.model."
    out: dict[str, torch.Tensor] = {}
    out["backbone.embed_tokens.weight"] = _check("embed_tokens", _take(sd, used, where, p + "model.embed_tokens.weight"),
                                                 (V, H), where)
    out["lm_head.weight"] = _check("lm_head", _take(sd, used, where, p + "lm_head.weight"), (V, H), where)
    dims = {"self_attn.q_proj": (H, hd * int(mistral["num_attention_heads"])), "self_attn.k_proj": (H, kv * hd),
            "self_attn.v_proj": (H, kv * hd), "self_attn.o_proj": (hd * int(mistral["num_attention_heads"]), H),
            "mlp.gate_proj": (H, F), "mlp.up_proj": (H, F), "mlp.down_proj": (F, H)}
    rank = int(_take(sd, used, where, f"{p}model.layers.0.self_attn.q_proj.lora_A.default.weight",
                     f"{p}model.layers.0.self_attn.q_proj.lora_A.weight").shape[0])
    for i in range(L):
        layer = f"{p}model.layers.{i}."
        for proj, (d_in, d_out) in dims.items():
            for ab, shape in (("A", (rank, d_in)), ("B", (d_out, rank))):
                name = f"{layer}{proj}.lora_{ab}.default.weight"
                t = _take(sd, used, where, name, f"{layer}{proj}.lora_{ab}.weight")
                out[f"backbone.layers.{i}.{proj}.lora_{ab}.default.weight"] = _check(name, t, shape, where)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            name = f"{layer}{norm}.modules_to_save.default.weight"
            t = _take(sd, used, where, name, f"{layer}{norm}.weight")
            out[f"backbone.layers.{i}.{norm}.weight"] = _check(name, t, (H,), where)
    out["backbone.norm.weight"] = _check("norm", _take(sd, used, where, f"{p}model.norm.modules_to_save.default.weight",
                                                       f"{p}model.norm.weight"), (H,), where)
    for ours, theirs, (d_in, d_out) in (("in_resampler", "input_resampler", (rep_dim, H)),
                                        ("out_resampler", "output_resampler", (H, rep_dim))):
        for j, shape in ((0, (d_out, d_in)), (2, (d_out, d_out))):
            for kind, s in (("weight", shape), ("bias", shape[:1])):
                name = f"{theirs}.proj.{j}.{kind}"
                out[f"{ours}.{j}.{kind}"] = _check(name, _take(sd, used, where, name), s, where)
    skipped = re.compile(r"^llm\.base_model\.model\.model\.(layers\.\d+\.(self_attn|mlp)\.\w+_proj\.(base_layer\.)?"
                         r"(weight|bias)|(layers\.\d+\.)?\w*norm\.(original_module\.)?weight)$")
    unknown = sorted(k for k in sd if k not in used and not skipped.match(k))
    if unknown:
        raise ReleaseFormatError(f"{where}: unexpected key {unknown[0]!r} ({len(unknown)} unexpected in all): "
                                 "not the release's MLLM layout")
    return out, rank


# ---------------------------------------------------------------------- the decoder


def merge_sat_lora(sd: dict[str, torch.Tensor], scale: float | None) -> dict[str, torch.Tensor]:
    """SAT LoRA (``X.original.weight``, ``X.matrix_A.i`` (r, in), ``X.matrix_B.i`` (out_i, r)) -> ``X.weight``
    = original + concat_i(B_i @ A_i) * scale along the output rows (SAT's own merge). Other keys unchanged."""
    out = {k: v for k, v in sd.items() if ".matrix_A." not in k and ".matrix_B." not in k
           and not k.endswith(".original.weight") and not k.endswith(".original.bias")}
    for key in [k for k in sd if k.endswith(".original.weight")]:
        base = key[: -len(".original.weight")]
        a = [sd[f"{base}.matrix_A.{i}"] for i in range(3) if f"{base}.matrix_A.{i}" in sd]
        b = [sd[f"{base}.matrix_B.{i}"] for i in range(3) if f"{base}.matrix_B.{i}" in sd]
        if len(a) != len(b):
            raise ReleaseFormatError(f"{base}: {len(a)} matrix_A but {len(b)} matrix_B")
        w = sd[key].float()
        if a:
            s = scale if scale is not None else 1.0 / a[0].shape[0]
            w = w + torch.cat([bi.float() @ ai.float() for ai, bi in zip(a, b)]) * s  # (out, in)
        out[f"{base}.weight"] = w
        if f"{base}.original.bias" in sd:
            out[f"{base}.bias"] = sd[f"{base}.original.bias"]
    return out


def sat_transformer(sd: dict[str, torch.Tensor], lora_scale: float | None, where: Path) -> dict[str, torch.Tensor]:
    """The transformer's keys of a SAT checkpoint, prefix dropped, LoRA merged (the VAE, T5 and CLIP are not read)."""
    dit = {k[len(SAT_PREFIX):]: v for k, v in sd.items() if k.startswith(SAT_PREFIX)}
    if not dit:
        raise ReleaseFormatError(f"{where}: no {SAT_PREFIX}* keys (not a SAT CogVideoX checkpoint)")
    return merge_sat_lora(dit, lora_scale)


def decoder_config_from_sat(dit: dict[str, torch.Tensor], latent_hw: tuple[int, int], where: Path) -> DecoderConfig:
    """The DecoderConfig the checkpoint fixes: depth, width, heads, timestep width, patch, channels, E_a."""
    need = ("mixins.patch_embed.proj.weight", "mixins.adaln_layer.query_layernorm_list.0.weight", "time_embed.0.weight",
            "mixins.patch_embed.text_proj.0.weight", "mixins.patch_embed.ip_proj.0.weight")
    for k in need:
        if k not in dit:
            raise ReleaseFormatError(f"{where}: missing key {SAT_PREFIX + k!r}")
    proj = dit["mixins.patch_embed.proj.weight"]  # (width, C', p, p)
    width, channels, patch = proj.shape[0], proj.shape[1], proj.shape[2]
    head_dim = dit["mixins.adaln_layer.query_layernorm_list.0.weight"].shape[0]
    layers = len({k.split(".")[2] for k in dit if k.startswith("transformer.layers.")})
    return DecoderConfig(
        num_layers=layers, num_heads=width // head_dim, head_dim=head_dim,
        time_embed_dim=dit["time_embed.0.weight"].shape[0], latent_channels=channels, num_frames=17,
        temporal_compression=4, latent_height=latent_hw[0], latent_width=latent_hw[1], patch_size=patch,
        n_text=30, n_visual=196, d_text_in=dit["mixins.patch_embed.text_proj.0.weight"].shape[1],
        d_visual_in=dit["mixins.patch_embed.ip_proj.0.weight"].shape[1], cond_dim=width, adaln_zero_init=False,
        e_a_gelu="none", norm_eps=1e-6, ofs_sinusoid_dim=width, motion_ofs_values=list(RELEASE_FLOW_BY_LEVEL))


def _sat_source(name: str, width: int) -> tuple[str, slice | list[int] | None]:
    """Our DecoderNet key -> (the SAT key, the rows of it) for everything but text_proj (the identity)."""
    t = name.removeprefix("transformer.")
    m = re.match(r"transformer_blocks\.(\d+)\.(.+)$", t)
    if m:
        i, rest = m.group(1), m.group(2)
        L = f"transformer.layers.{i}."
        kind = rest.rsplit(".", 1)[1]
        qkv = {"attn1.to_q": 0, "attn1.to_k": 1, "attn1.to_v": 2}
        for ours, j in qkv.items():
            if rest.startswith(ours + "."):
                return f"{L}attention.query_key_value.{kind}", slice(j * width, (j + 1) * width)
        if rest.startswith(("norm1.linear.", "norm2.linear.")):  # SAT's 12 chunks: msa 0-2, mlp 3-5, text msa 6-8, text mlp 9-11
            chunks = (0, 1, 2, 6, 7, 8) if rest.startswith("norm1") else (3, 4, 5, 9, 10, 11)
            rows = [r for c in chunks for r in range(c * width, (c + 1) * width)]
            return f"mixins.adaln_layer.adaLN_modulations.{i}.1.{kind}", rows
        simple = {"norm1.norm": f"{L}input_layernorm", "norm2.norm": f"{L}post_attention_layernorm",
                  "attn1.norm_q": f"mixins.adaln_layer.query_layernorm_list.{i}",
                  "attn1.norm_k": f"mixins.adaln_layer.key_layernorm_list.{i}",
                  "attn1.to_out.0": f"{L}attention.dense", "ff.net.0.proj": f"{L}mlp.dense_h_to_4h",
                  "ff.net.2": f"{L}mlp.dense_4h_to_h"}
        module = rest.rsplit(".", 1)[0]
        if module in simple:
            return f"{simple[module]}.{kind}", None
        raise ReleaseFormatError(f"no SAT source for {name!r}")
    head = {"patch_embed.proj": "mixins.patch_embed.proj", "time_embedding.linear_1": "time_embed.0",
            "time_embedding.linear_2": "time_embed.2", "ofs_embedding.linear_1": "flow_embed.0",
            "ofs_embedding.linear_2": "flow_embed.2", "norm_final": "transformer.final_layernorm",
            "norm_out.linear": "mixins.final_layer.adaLN_modulation.1", "norm_out.norm": "mixins.final_layer.norm_final",
            "proj_out": "mixins.final_layer.linear",
            "action_encoder.text.fc1": "mixins.patch_embed.text_proj.0",
            "action_encoder.text.fc2": "mixins.patch_embed.text_proj.2",
            "action_encoder.text.norm": "mixins.patch_embed.txt_mix_layer_norm",
            "action_encoder.visual.fc1": "mixins.patch_embed.ip_proj.0",
            "action_encoder.visual.fc2": "mixins.patch_embed.ip_proj.2",
            "action_encoder.visual.norm": "mixins.patch_embed.ip_mix_layer_norm"}
    module, kind = (name if name.startswith("action_encoder.") else t).rsplit(".", 1)
    if module in head:
        return f"{head[module]}.{kind}", None
    raise ReleaseFormatError(f"no SAT source for {name!r}")


def map_sat_decoder(dit: dict[str, torch.Tensor], net: DecoderNet, where: Path) -> dict[str, torch.Tensor]:
    """SAT transformer keys -> a full DecoderNet state dict. Missing, unknown or misshapen keys are errors naming them."""
    width = net.config.width
    out, used = {}, set()
    for name, own in net.state_dict().items():
        if name.startswith("transformer.patch_embed.text_proj."):  # the release puts s_a in the sequence as it is
            out[name] = torch.eye(width) if name.endswith("weight") else torch.zeros(width)
            continue
        key, rows = _sat_source(name, width)
        if key not in dit:
            raise ReleaseFormatError(f"{where}: missing key {SAT_PREFIX + key!r} (for {name})")
        used.add(key)
        t = dit[key] if rows is None else dit[key][rows]
        if tuple(t.shape) != tuple(own.shape):
            raise ReleaseFormatError(f"{where}: key {SAT_PREFIX + key!r} gives {name} shape {tuple(t.shape)}, "
                                     f"expected {tuple(own.shape)}")
        out[name] = t.float()
    table = dit.get("mixins.pos_embed.pos_embedding")
    if table is not None:  # the release's fixed sin-cos table must be the one diffusers builds
        used.add("mixins.pos_embed.pos_embedding")
        ours = net.transformer.patch_embed.pos_embedding
        if table.shape != ours.shape or not torch.allclose(table.float(), ours.float(), atol=1e-4):
            raise ReleaseFormatError(f"{where}: key {SAT_PREFIX}mixins.pos_embed.pos_embedding {tuple(table.shape)} "
                                     f"differs from the table of a {net.config.latent_height} x "
                                     f"{net.config.latent_width} latent {tuple(ours.shape)}: wrong --height/--width?")
    unknown = sorted(k for k in dit if k not in used and not SAT_IGNORED.match(k))
    if unknown:
        raise ReleaseFormatError(f"{where}: unexpected key {SAT_PREFIX + unknown[0]!r} ({len(unknown)} unexpected "
                                 "in all): not the release's decoder layout")
    return out


# ---------------------------------------------------------------------- memory


def memory_estimate(mistral: dict[str, Any], decoder: DecoderConfig, lora_rank: int = 32) -> dict[str, float]:
    """GiB to play, per part: the engine's Mistral in bf16 (its table and head at 32284 rows, LoRA and
    resamplers in fp32), the decoder transformer and E_a in fp32 (as ShotDecoder loads them), the
    VAE (about 0.2 B parameters, fp32). Activations not counted."""
    H, L, F = int(mistral["hidden_size"]), int(mistral["num_hidden_layers"]), int(mistral["intermediate_size"])
    kv = int(mistral.get("num_key_value_heads", mistral["num_attention_heads"])) * (H // int(mistral["num_attention_heads"]))
    V = int(mistral["vocab_size"]) + N_ADDED
    layer = H * H * 2 + H * kv * 2 + 3 * H * F
    base = L * layer + 2 * V * H
    lora = L * lora_rank * (2 * (H + H) + 2 * (H + kv) + 3 * (H + F))
    resamplers = decoder.width * H + H * H + H * decoder.width + decoder.width ** 2
    w, T = decoder.width, decoder.time_embed_dim
    dit = decoder.num_layers * (4 * w * w + 8 * w * w + 6 * T * w * 2) + 2 * T * w + w * w
    e_a = decoder.d_text_in * w + decoder.d_visual_in * w + 2 * w * w
    return {"engine_gb": (base * 2 + (lora + resamplers) * 4) / GiB, "decoder_gb": (dit + e_a) * 4 / GiB,
            "vae_gb": 0.22e9 * 4 / GiB}


def print_memory(mistral: dict[str, Any], decoder: DecoderConfig, lora_rank: int = 32) -> dict[str, float]:
    m = memory_estimate(mistral, decoder, lora_rank)
    print(f"[release] to play: engine {m['engine_gb']:.1f} GiB (bf16 Mistral + fp32 LoRA/resamplers; 8-bit / 4-bit "
          f"about {m['engine_gb'] * 0.55:.1f} / {m['engine_gb'] * 0.33:.1f}), decoder {m['decoder_gb']:.1f} GiB "
          f"(fp32), VAE {m['vae_gb']:.1f} GiB; activations at 480 x 720 come on top", flush=True)
    return m


class ReleaseMemoryError(ValueError, UserFacingError):
    """The converted release will not fit where it is to be loaded."""


def available_gib(device: torch.device) -> float:
    """Free memory where the parts will live: the GPU's free memory, or the host's MemAvailable (inf if unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / GiB
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / GiB
    except OSError:
        pass
    return float("inf")


QUANTIZED_SHARE = {None: 1.0, "8bit": 0.55, "4bit": 0.33}  # of the bf16 engine (table and head stay bf16)


def check_release_memory(model_dir: str | Path, device: torch.device, quantize: str | None = None) -> dict[str, float]:
    """Print what a converted release needs and refuse, naming the numbers, where the device (or the host it
    loads through) has less free. Called by Game.load before anything is loaded."""
    root = Path(model_dir)
    engine = json.loads((root / "engine" / ENGINE_CONFIG).read_text())["config"]
    dcfg = DecoderConfig.from_dict(json.loads((root / "shot_decoder" / "shot_decoder.json").read_text())["decoder"])
    m = print_memory(mistral_config(engine["backbone_path"]), dcfg, int(engine["lora_rank"]))
    quantize = quantize or engine.get("backbone_quantize")
    engine_gb = m["engine_gb"] * QUANTIZED_SHARE[quantize]
    need = engine_gb + m["decoder_gb"] + m["vae_gb"]
    free = available_gib(device)
    if need > free:
        raise ReleaseMemoryError(
            f"this model needs about {need:.1f} GiB on {device} (engine {engine_gb:.1f}, decoder {m['decoder_gb']:.1f}, "
            f"VAE {m['vae_gb']:.1f}; activations on top) but {free:.1f} GiB is free there"
            + ("" if quantize == "4bit" else "; try --quantize 8bit or 4bit (a GPU)") + " (docs/RELEASE.md, Memory)")
    if device.type != "cpu":  # each part is read on the host, then moved: the largest one passes through it
        host_need, host = max(0.0 if quantize else engine_gb, m["decoder_gb"]), available_gib(torch.device("cpu"))
        if host_need > host:
            raise ReleaseMemoryError(f"loading this model passes about {host_need:.1f} GiB through host memory, "
                                     f"which has {host:.1f} GiB free (docs/RELEASE.md, Memory)")
    return {**m, "need_gb": need, "free_gb": free}


# ---------------------------------------------------------------------- convert


def convert_release(cfg: ReleaseImportConfig) -> Path:
    """The four sources -> ``cfg.out`` (engine/, shot_decoder/, model.json), committed as one directory."""
    mistral = mistral_config(cfg.mistral)
    mpath, dpath = mllm_file(cfg.mllm), sat_file(cfg.decoder)
    ae_cfg_dir = Path(cfg.cogvideox).expanduser()
    if (ae_cfg_dir / "vae" / "config.json").is_file():
        ae_cfg_dir = ae_cfg_dir / "vae"
    if not (ae_cfg_dir / "config.json").is_file():
        raise FileNotFoundError(f"{cfg.cogvideox}: no config.json nor vae/config.json (CogVideoX-2B's diffusers folder)")
    vae = json.loads((ae_cfg_dir / "config.json").read_text())
    if vae.get("_class_name") != "AutoencoderKLCogVideoX":
        raise ReleaseFormatError(f"{ae_cfg_dir}: {vae.get('_class_name')!r}, not an AutoencoderKLCogVideoX")
    spatial = 2 ** (len(vae["block_out_channels"]) - 1)
    height, width = cfg.height or cfg.sampler.height, cfg.width or cfg.sampler.width
    if height % (spatial * 2) or width % (spatial * 2):
        raise ValueError(f"--height/--width must be multiples of {spatial * 2} for this VAE, got {height} x {width}")

    dit = sat_transformer(_read_state_dict(dpath, cfg.trust_pickle), cfg.decoder_lora_scale, dpath)
    dcfg = decoder_config_from_sat(dit, (height // spatial, width // spatial), dpath)
    if dcfg.latent_channels != int(vae["latent_channels"]):
        raise ReleaseFormatError(f"{dpath}: the transformer reads {dcfg.latent_channels} latent channels, the VAE "
                                 f"in {ae_cfg_dir} makes {vae['latent_channels']}")
    print_memory(mistral, dcfg)
    net = DecoderNet(dcfg)
    net.load_state_dict(map_sat_decoder(dit, net, dpath), strict=True)
    del dit
    ae = ShotAutoencoder(autoencoder_config(
        "paper", pretrained_path=str(ae_cfg_dir), block_out_channels=tuple(vae["block_out_channels"]),
        layers_per_block=int(vae["layers_per_block"]), latent_channels=int(vae["latent_channels"]),
        norm_num_groups=int(vae["norm_num_groups"]), temporal_ratio=int(vae.get("temporal_compression_ratio", 4))))
    decoder = ShotDecoder(net, ae, cfg.sampler.diffusion_config(), cfg.sampler.sampler_config(cfg.sample_steps,
                                                                                               cfg.faithful))

    sd, rank = map_mllm(_read_state_dict(mpath, cfg.trust_pickle), mistral, mpath, dcfg.n_tokens, dcfg.d_cond)
    # every turn starts with the tokenizer's <s> (the release: tokenizer.bos_token_id, 1 for Mistral)
    bos = AutoTokenizer.from_pretrained(str(Path(cfg.mistral).expanduser()), local_files_only=True).bos_token_id
    if bos is None:
        bos = mistral.get("bos_token_id")
    if bos is None:
        raise ReleaseFormatError(f"{cfg.mistral}: its tokenizer has no bos token (Mistral's <s>)")
    ecfg = ReleaseEngineConfig(backbone_path=str(Path(cfg.mistral).expanduser().resolve()),
                               base_vocab=int(mistral["vocab_size"]), bos_token_id=int(bos), rep_tokens=dcfg.n_tokens,
                               rep_dim=dcfg.d_cond, lora_rank=rank, lora_alpha=float(rank),  # the release: 32 / 32
                               **(RELEASE_FAITHFUL if cfg.faithful else {}))
    if cfg.window is not None:
        ecfg.window = cfg.window
    with atomic_dir(cfg.out) as tmp:
        save_safetensors_atomic(sd, tmp / "engine" / ENGINE_WEIGHTS, metadata={"kind": RELEASE_ENGINE_KIND})
        save_json_atomic({"format_version": RELEASE_ENGINE_VERSION, "kind": RELEASE_ENGINE_KIND,
                          "config": ecfg.to_dict()}, tmp / "engine" / ENGINE_CONFIG)
        decoder.save_pretrained(tmp / "shot_decoder", dtype=torch.float16 if cfg.fp16 else None)
        save_json_atomic({"release": {"mllm": str(mpath), "decoder": str(dpath), "mistral": ecfg.backbone_path,
                                      "cogvideox": str(ae_cfg_dir), "faithful": cfg.faithful,
                                      "sampler": asdict(cfg.sampler), "fps": cfg.sampler.fps}},
                         tmp / "model.json")
    return Path(cfg.out)


def register_release(csub: argparse._SubParsersAction) -> None:
    """`convert release` under `animegamer convert` (training/convert.py declares the group)."""
    p = csub.add_parser("release", help="the published AnimeGamer checkpoints -> a model directory (docs/RELEASE.md)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mllm", required=True, help="MLLM-Qiqi/pytorch_model.bin (or its folder)")
    p.add_argument("--decoder", required=True, help="VDM_Decoder-Qiqi (the SAT folder with `latest`) or its .pt")
    p.add_argument("--mistral", required=True, help="local Mistral-7B-Instruct-v0.1 folder (read at play time)")
    p.add_argument("--cogvideox", required=True, help="local diffusers CogVideoX-2B folder (its vae/ is copied)")
    p.add_argument("--out", required=True, help="model directory to write (replaced atomically)")
    p.add_argument("--window", type=int, default=None,
                   help="history turns the engine sees (default 3; the release, and --faithful: 1)")
    p.add_argument("--faithful", action="store_true",
                   help="play as the release's inference does: window 1, s_a read three tokens late, state text "
                        "parsed on spaces, the social delta drawn as the level (default: corrected)")
    p.add_argument("--sample-steps", type=int, default=None, help="sampler steps (default: the release's 50)")
    p.add_argument("--height", type=int, default=None, help="shot height in pixels (default 480)")
    p.add_argument("--width", type=int, default=None, help="shot width in pixels (default 720)")
    p.add_argument("--decoder-lora-scale", type=float, default=None,
                   help="scale of the decoder's SAT LoRA when merged (default: SAT's alpha / r = 1 / r)")
    p.add_argument("--fp32", action="store_true", help="store the decoder in fp32 (default fp16)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="unpickle checkpoints that hold more than tensors (SAT keeps its arguments in its .pt); "
                        "only for files from a source you trust")
    p.set_defaults(func=_run_release)


def _run_release(args: argparse.Namespace) -> int:
    cfg = ReleaseImportConfig(mllm=args.mllm, decoder=args.decoder, mistral=args.mistral, cogvideox=args.cogvideox,
                              out=args.out, window=args.window, faithful=args.faithful,
                              decoder_lora_scale=args.decoder_lora_scale, sample_steps=args.sample_steps,
                              height=args.height, width=args.width, fp16=not args.fp32,
                              trust_pickle=args.trust_pickle)
    out = convert_release(cfg)
    print(f"convert release: -> {out} (play it: animegamer play --model {out})")
    return 0
