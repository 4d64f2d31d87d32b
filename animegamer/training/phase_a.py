"""Train the animation-shot decoder (E_a + CogVideoX transformer, v-prediction), phase a.

    animegamer train decoder --preset default --data DIR --vae runs/vae \\
        --out runs/decoder [--resume] [--config FILE] [--set KEY=VALUE] [--steps N ...]

What the decoder is made of is one typed config, ``DecoderPreset``, whose defaults are the shipped decoder's;
``--preset tiny|paper`` names other sizes, and a run that differs names the fields it changes in a YAML file
(``--config``; the paper's ablations are files in ``experiments/configs/``) or inline (``--set``).

1. Cache. The frozen encoders run ONCE per shot: autoencoder latents of the 17 frames, the visual
   reference f_v of the FIRST frame (the autoencoder latent in patches, ``visual_reference: latent``; or a
   vision tower's patch tokens with ``clip`` and ``--clip``; ``random_frame: true``: a random frame, the
   paper's ablation) and MiniLM token states f_md of the motion text. They go to ``OUT/cache/`` in parts
   of 256 shots (safetensors, fp16), so an interrupted cache build resumes where it stopped.
2. Warm-up stage (paper): the transformer is frozen; E_a, the motion-level (ofs) MLP and the
   condition projection learn (``OUT/warmup/``, ``warmup_stage_steps``, ``warmup_stage_lr``).
3. Joint stage: everything trains (``OUT/joint/``, ``--steps``, ``--lr`` ...), starting from the
   warm-up weights. Both stages use the generic loop (EMA, exact resume, log.jsonl, loss.png).
   ``--resume`` continues whichever stage was interrupted.

``--cache-only`` builds the cache and stops, so runs that differ only in training (``motion_level: false``)
can share it with ``--cache``. Note: ``--warmup-steps`` is the LEARNING-RATE warm-up of each stage (shared
flag of every phase); the paper's warm-up STAGE length is ``warmup_stage_steps``.

Output: ``OUT/joint/final/shot_decoder/`` is the ShotDecoder pipeline (EMA weights, fp32;
``ShotDecoder.from_pretrained``), ``OUT/joint/final/metrics.json`` holds the held-out v-loss with
and without the true condition, decode timings and peak memory, and ``OUT/samples/`` a few
held-out shots decoded from their TRUE s_a next to the ground truth (MP4 + GIF).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from animegamer.core.checkpoint import load_safetensors, save_json_atomic
from animegamer.core.overrides import apply_overrides, load_override_file, parse_set
from animegamer.core.runs import resolve_component, resolve_decoder
from animegamer.core.video_io import save_gif, save_mp4
from animegamer.decoder.diffusion import Denoiser, DiffusionConfig, collate_decoder, level_fractions
from animegamer.decoder.network import DecoderNet, decoder_preset, pretrained_transformer_fields
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig
from animegamer.decoder.speed import bench_decode
from animegamer.models.autoencoder import CONFIG_NAME as AE_CONFIG
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.models.vision_tower import CONFIG_NAME as VT_CONFIG
from animegamer.representation.reference_encoder import CONDITION_TEXT, KINDS
from animegamer.training.arguments import add_train_arguments, train_config_from_args
from animegamer.training.loop import TrainConfig, is_sharded, train
from animegamer.training.shot_cache import CacheInputs, CachedShots, build_cache, cache_encoders, cache_meta
from animegamer.world.dataset import ShotDataset


@dataclass(frozen=True)
class DecoderPreset:
    """Phase a at one size: the decoder network, what s_a is made of, the noise prior it trains with,
    the sampler stored with it and the training schedule. The defaults are the shipped decoder's;
    ``tiny`` and ``paper`` are named overrides, and a run changes a field with ``--config FILE`` or
    ``--set KEY=VALUE`` (the paper's ablations: ``experiments/configs/``)."""

    decoder: str = "default"  # decoder/network.py decoder_preset
    n_text: int = 16  # f_md tokens of the motion text (a caption needs about 70)
    # f_v: "latent" (the autoencoder latent of the first frame) or "clip" (a vision tower's, the paper's). The
    # vision tower this CPU can train does not name the characters well enough (representation/reference_encoder.py)
    visual_reference: str = "latent"
    reference_patch: int = 4  # latent reference: latent patch side per f_v token
    reference_channels: int = 16  # s_a's visual tokens also laid on the patch grid (decoder/network.py); 0 = off
    shared_noise: float = 0.0  # the share of the noise drawn once per shot (decoder/diffusion.py)
    # the level-matched noise prior, per motion level 1..5 (decoder/diffusion.py); None = shared_noise everywhere
    shared_noise_by_level: tuple[float, ...] | None = (0.995, 0.99, 0.95, 0.8, 0.3)
    # what the text stream f_md encodes: "motion" (the motion text beside the visual reference: s_a, the paper's)
    # or "caption" (the GC baseline's decoder: the shot's whole caption and NO visual reference)
    condition: str = "motion"
    random_frame: bool = False  # the paper's ablation: f_v from a random frame of the shot instead of the first
    motion_level: bool = True  # False: the paper's w/o f_ms ablation (no motion-level embedding)
    # the paper's warm-up stage (transformer frozen); 0 = none. None from scratch: with adaLN-zero init the frozen
    # transformer outputs 0, so the condition path gets no gradient at all; the stage is for a PRETRAINED transformer
    warmup_stage_steps: int = 0
    warmup_stage_lr: float = 1e-3
    sampler: SamplerConfig = field(default_factory=lambda: SamplerConfig(steps=6, guidance=2.0, autocast=True))
    # EMA 0.995 so a short run is not dominated by its initial weights
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        steps=6300, batch_size=8, lr=5e-4, weight_decay=0.0, warmup_steps=20, ema_decay=0.995,
        mixed_precision="bf16", log_every=20, save_every=250, grad_clip=1.0))

    def __post_init__(self) -> None:
        if self.condition not in CONDITION_TEXT:
            raise ValueError(f"condition must be one of {list(CONDITION_TEXT)}, got {self.condition!r}")
        if self.visual_reference not in KINDS:
            raise ValueError(f"visual_reference must be one of {list(KINDS)}, got {self.visual_reference!r}")
        if self.shared_noise_by_level is not None:  # DiffusionConfig's own check, before minutes of encoding
            object.__setattr__(self, "shared_noise_by_level",
                               tuple(level_fractions(list(self.shared_noise_by_level), "shared_noise_by_level")))
            if not self.motion_level:
                raise ValueError("shared_noise_by_level needs the motion level: set it to null with motion_level false")
        if self.condition == "caption" and (self.reference_channels or self.shared_noise_by_level is not None):
            raise ValueError("condition caption has no visual reference and no level prior: set reference_channels 0 "
                             "and shared_noise_by_level null")
        if self.n_text < 1 or self.reference_patch < 1 or self.reference_channels < 0 or self.warmup_stage_steps < 0:
            raise ValueError("n_text and reference_patch >= 1, reference_channels and warmup_stage_steps >= 0")

    @property
    def reference_kind(self) -> str:
        """What f_v is made from: the GC decoder has none (load_reference_encoder gives a constant token)."""
        return "none" if self.condition == "caption" else self.visual_reference


PRESETS: dict[str, DecoderPreset] = {
    "tiny": DecoderPreset(
        decoder="tiny", n_text=8, visual_reference="clip", reference_patch=2, reference_channels=0,
        shared_noise_by_level=None, warmup_stage_steps=4, warmup_stage_lr=1e-3,
        sampler=SamplerConfig(steps=2, guidance=2.0, autocast=True),
        train=TrainConfig(steps=6, batch_size=2, lr=1e-3, warmup_steps=1, log_every=2, save_every=3, ema_decay=0.0)),
    "default": DecoderPreset(),
    # The paper's decoder: a pretrained CogVideoX transformer (--transformer DIR: its depth, heads and
    # patch come from the checkpoint), f_v from a CLIP vision tower (--clip), f_md from a local text
    # encoder (--text-encoder, T5 in the paper) in 30 tokens, the paper's warm-up stage (transformer
    # frozen: E_a and the motion embedding learn to speak to it) before joint training, 50 sampler
    # steps. Step counts and rates are starting values for a GPU run, not the paper's (it gives none);
    # gradient checkpointing is on (480 x 720 x 17 activations).
    "paper": DecoderPreset(
        decoder="paper", n_text=30, visual_reference="clip", reference_patch=2, reference_channels=0,
        shared_noise_by_level=None, warmup_stage_steps=1000, warmup_stage_lr=1e-4,
        sampler=SamplerConfig(steps=50, guidance=6.0, autocast=True),
        train=TrainConfig(steps=20000, batch_size=1, lr=2e-5, weight_decay=0.0, warmup_steps=200, ema_decay=0.0,
                          mixed_precision="bf16", log_every=20, save_every=500, grad_clip=1.0,
                          gradient_checkpointing=True)),
}


def preset_from_args(args: argparse.Namespace) -> DecoderPreset:
    """The named preset with the run's ``--config`` files, then its ``--set`` pairs, applied in order."""
    preset = PRESETS[args.preset]
    for path in args.config or []:
        preset = apply_overrides(preset, load_override_file(path), f"--config {path}")
    return apply_overrides(preset, parse_set(args.set or []), "--set")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser, list(PRESETS))
    parser.add_argument("--config", action="append", metavar="FILE",
                        help="a YAML file of DecoderPreset fields replacing the preset's (e.g. experiments/configs/"
                             "no_motion_level.yaml); repeatable, applied in order")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="one DecoderPreset field replacing the preset's, after --config (e.g. "
                             "reference_channels=0, shared_noise_by_level=null); repeatable")
    parser.add_argument("--clip", default=None,
                        help="vision tower (with --visual-reference clip): a `train clip` run dir, its final/, or "
                             "the vision_tower/ dir")
    parser.add_argument("--vae", required=True,
                        help="autoencoder: a `train vae` run dir, its final/, or the autoencoder/ dir")
    parser.add_argument("--transformer", default=None, metavar="DIR",
                        help="start the decoder from a local diffusers CogVideoX transformer (e.g. CogVideoX-2B's "
                             "transformer/ folder); its depth, heads and patch replace the preset's (--preset paper "
                             "needs it)")
    parser.add_argument("--text-encoder", default=None,
                        help="local transformers text encoder dir (default: bundled all-MiniLM-L6-v2)")
    parser.add_argument("--cache", default=None, help="feature cache dir (default: OUT/cache)")
    parser.add_argument("--freeze-action-encoder", action="store_true",
                        help="joint stage: keep E_a as the warm-up stage left it, so phase b can train on the "
                             "warm-up's E_a (warmup/final/shot_decoder) while the transformer keeps training")
    parser.add_argument("--init", default=None, metavar="SHOT_DECODER",
                        help="start from this decoder's weights (a `train decoder` run dir or shot_decoder/; same "
                             "shapes): e.g. continue with --freeze-action-encoder after a run that learned E_a")
    parser.add_argument("--warmup-only", action="store_true",
                        help="stop after the warm-up stage (rerun with --resume for the joint stage); with "
                             "--freeze-action-encoder, phase b can start on warmup/final/shot_decoder meanwhile")
    parser.add_argument("--eval-shots", type=int, default=64, help="held-out (val) shots for the eval loss")
    parser.add_argument("--samples", type=int, default=4, help="held-out shots decoded to OUT/samples")
    parser.add_argument("--cache-only", action="store_true",
                        help="build the feature cache (OUT/cache or --cache) and stop: runs that differ only in "
                             "training options (e.g. motion_level=false) can then share it with --cache")


# -- feature cache -----------------------------------------------------------------------------
class DecoderTrainModule(nn.Module):
    """Wraps the Denoiser for the loop; stage "warmup" trains only E_a + motion MLP + text_proj."""

    def __init__(self, denoiser: Denoiser, autoencoder: nn.Module, stage: str, freeze_action_encoder: bool = False,
                 sampler: SamplerConfig | None = None) -> None:
        super().__init__()
        self.sampler = sampler or SamplerConfig()  # stored with the exported decoder
        if stage not in ("warmup", "joint"):
            raise ValueError(f"stage must be 'warmup' or 'joint', got {stage!r}")
        self.denoiser, self.stage = denoiser, stage
        self.freeze_action_encoder = freeze_action_encoder and stage == "joint"
        self._ae = (autoencoder,)  # not a submodule: frozen, not in the training checkpoints
        denoiser.net.set_warmup(stage == "warmup")
        if self.freeze_action_encoder:
            denoiser.net.action_encoder.requires_grad_(False)

    def forward(self, batch):
        return self.denoiser(batch)

    def trainable_parameters(self):
        net = self.denoiser.net
        if self.stage == "warmup":
            return net.warmup_parameters()
        return [p for p in net.parameters() if p.requires_grad]

    def shot_decoder(self) -> ShotDecoder:
        return ShotDecoder(self.denoiser.net, self._ae[0], self.denoiser.config, self.sampler)

    def export_pretrained(self, directory: Path) -> None:
        self.shot_decoder().save_pretrained(Path(directory) / "shot_decoder")

    def config_dict(self) -> dict:
        return {"stage": self.stage, "freeze_action_encoder": self.freeze_action_encoder,
                "decoder": self.denoiser.net.config.to_dict(), "diffusion": self.denoiser.config.to_dict()}


def eval_loss(denoiser, dataset, n: int, seed: int = 0) -> dict[str, float]:
    """Held-out v-loss at fixed timesteps / noise: with the true s_a and with the null branch."""

    with torch.no_grad():
        return _eval_loss(denoiser, dataset, n, seed)


def _eval_loss(denoiser, dataset, n: int, seed: int) -> dict[str, float]:
    n = min(n, len(dataset))
    if n == 0:
        return {}
    g = torch.Generator().manual_seed(seed)
    was = denoiser.training
    denoiser.eval()
    cond, null = [], []
    for s in range(0, n, 8):
        b = collate_decoder([dataset[i] for i in range(s, min(n, s + 8))])
        t = torch.randint(0, denoiser.config.num_train_timesteps, (len(b),), generator=g)
        noise = denoiser.noise_for(b, g)  # iid noise (exactly torch.randn) unless the decoder has a shared prior
        # the plain v-loss, comparable across decoders whatever extra loss terms they trained with
        cond.append(denoiser(b, timesteps=t, noise=noise)[1]["v_loss"])
        z = type(b)(b.latents, torch.zeros_like(b.f_md), torch.zeros_like(b.f_v), b.motion_level)
        null.append(denoiser(z, timesteps=t, noise=noise)[1]["v_loss"])
    denoiser.train(was)
    return {"val_loss": sum(cond) / len(cond), "val_loss_null_condition": sum(null) / len(null), "val_shots": n}


def write_samples(decoder, val_cache: CachedShots, val_shots, out_dir: Path, n: int, seed: int = 0) -> list[str]:
    """Decode n held-out shots from their TRUE s_a; save [true | decoded] side by side."""

    paths = []
    ea = decoder.net.action_encoder
    for i in range(min(n, len(val_cache))):
        item = val_cache[i]
        with torch.no_grad():
            s_a = ea(item["f_md"][None], item["f_v"][None])[0]  # (N, D)
        pred = decoder(s_a, int(item["motion_level"]), torch.Generator().manual_seed(seed + i))  # (T, H, W, 3)
        true = val_shots[int(val_cache.tensors["index"][i])]["frames"].numpy()  # (T, H, W, 3)
        both = np.concatenate([true, pred], axis=2)
        stem = out_dir / f"val_{i:03d}_level{int(item['motion_level'])}"
        save_mp4(both, stem.with_suffix(".mp4"), fps=8)
        save_gif(both, stem.with_suffix(".gif"), fps=8)
        paths.append(str(stem.with_suffix(".mp4")))
    return paths


def run(args: argparse.Namespace) -> int:
    preset = preset_from_args(args)
    cfg = train_config_from_args(preset.train, args)
    out = Path(args.out)
    progress = not args.no_progress
    vae_dir = resolve_component(args.vae, AE_CONFIG, "autoencoder")
    kind = preset.reference_kind
    if kind == "clip":
        if args.clip is None:
            raise SystemExit("train decoder: visual_reference clip needs --clip (a `train clip` run)")
        clip_dir = resolve_component(args.clip, VT_CONFIG, "vision_tower")
    else:  # the autoencoder's own latent is the reference (or there is none): nothing else to train or ship
        clip_dir = vae_dir
    ae = ShotAutoencoder.from_pretrained(vae_dir).float().eval().requires_grad_(False)
    if preset.decoder == "paper" and args.transformer is None:
        raise SystemExit("train decoder --preset paper: --transformer DIR is needed (a local diffusers CogVideoX "
                         "transformer, e.g. CogVideoX-2B's transformer/ folder; nothing is downloaded)")
    try:
        pretrained = pretrained_transformer_fields(args.transformer) if args.transformer else {}
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"train decoder --transformer: {e}") from None

    # 1. cache (train + held-out val)
    cache_root = Path(args.cache) if args.cache else out / "cache"
    train_shots = ShotDataset(args.data, "train", limit=args.limit)
    try:
        val_shots = ShotDataset(args.data, "val", limit=max(args.eval_shots, args.samples))
    except ValueError:  # no val split in this dataset
        val_shots = None
    todo = [("train", train_shots, args.limit)] + ([("val", val_shots, max(args.eval_shots, args.samples))]
                                                  if val_shots is not None else [])
    caches: dict[str, CachedShots] = {}
    encoders: dict = {}

    def meta_of(split: str, limit: int | None) -> dict:
        return cache_meta(args.data, split, limit, clip_dir, vae_dir, CacheInputs(
            text_encoder=args.text_encoder, n_text=preset.n_text, random_frame=preset.random_frame,
            reference_patch=preset.reference_patch if kind == "latent" else None, condition=preset.condition))

    def get_encoders() -> dict:  # loaded once, for whichever split needs them first
        if not encoders:
            encoders.update(cache_encoders(meta_of("train", None), ae))
        return encoders

    for split, shots, limit in todo:
        cdir = cache_root / (split if limit is None else f"{split}_{limit}")
        build_cache(shots, get_encoders, cdir, meta_of(split, limit), seed=cfg.seed, progress=progress)
        caches[split] = CachedShots(cdir)
    encoders.clear()  # free the tower and MiniLM before training
    if args.cache_only:
        print(f"[decoder] cache ready: {cache_root}")
        return 0
    train_ds = caches["train"]
    init = ShotDecoder.from_pretrained(resolve_decoder(args.init)) if args.init else None
    # a fine-tune keeps the latent normalisation its network learned, whatever the new data's
    mean, std = ((init.diffusion.latent_shift, 1.0 / init.diffusion.latent_scale) if init is not None
                 else train_ds.latent_stats())
    t = train_ds.tensors

    # 2. model: shapes come from the cache (autoencoder, tower and text encoder decide them)
    f, c, h, w = t["latents"].shape[1:]
    dcfg = decoder_preset(
        preset.decoder, latent_channels=c, num_frames=(f - 1) * ae.temporal_ratio + 1, latent_height=h,
        latent_width=w, temporal_compression=ae.temporal_ratio, n_text=t["f_md"].shape[1],
        d_text_in=t["f_md"].shape[2], n_visual=t["f_v"].shape[1], d_visual_in=t["f_v"].shape[2],
        use_motion_level=preset.motion_level, reference_channels=preset.reference_channels, **pretrained,
    )
    # the kl2d autoencoder packs `temporal_ratio` frames per latent frame in its channels (pack_time)
    groups = ae.temporal_ratio if ae.cfg.kind == "kl2d" else 1
    by_level = list(preset.shared_noise_by_level) if preset.shared_noise_by_level is not None else None
    try:
        diff = DiffusionConfig(latent_shift=mean, latent_scale=1.0 / max(std, 1e-6), shared_noise=preset.shared_noise,
                               shared_noise_by_level=by_level, noise_frame_groups=groups)
    except ValueError as e:
        raise SystemExit(f"train decoder: {e}") from None
    sampler = preset.sampler  # stored with the decoder; `model pack` chooses the game's
    if init is not None and (dataclasses.replace(init.config, reference_channels=dcfg.reference_channels) != dcfg
                             or init.config.reference_channels not in (0, dcfg.reference_channels)):
        # the same config, or the same without the spatial reference (it is added, zero-initialised)
        raise ValueError(f"--init {args.init}: its decoder config differs from this run's ({init.config} vs {dcfg})")

    def fresh_denoiser() -> Denoiser:
        torch.manual_seed(cfg.seed)  # the init must be reproducible: resume reloads only trainable tensors
        denoiser = Denoiser(DecoderNet(dcfg), diff)
        if init is not None:  # before any resume: a resumed run reloads only its trainable tensors on top of this
            denoiser.net.init_from(init.net)
        return denoiser

    denoiser = fresh_denoiser()
    if init is not None:
        print(f"[decoder] initialised from {args.init}")
    print(f"[decoder] {len(train_ds)} cached shots, latents {tuple(t['latents'].shape[1:])} (mean {mean:.3f}, "
          f"std {std:.3f}), s_a {dcfg.n_tokens} x {dcfg.d_cond}, "
          f"{sum(p.numel() for p in denoiser.parameters()) / 1e6:.1f}M params")

    # 3. warm-up stage: transformer frozen
    warm_steps = preset.warmup_stage_steps
    results = {}
    if warm_steps > 0:
        wcfg = dataclasses.replace(
            cfg, steps=warm_steps, lr=preset.warmup_stage_lr,
            warmup_steps=min(cfg.warmup_steps, max(1, warm_steps // 10)),
            save_every=min(cfg.save_every, warm_steps) if cfg.save_every else 0,
            # No EMA in this short stage: the joint stage continues from the LIVE weights, so warmup/final
            # must hold the same E_a (phase b may train on it, --freeze-action-encoder).
            ema_decay=0.0,
        )
        warmup = DecoderTrainModule(denoiser, ae, "warmup", sampler=sampler)
        results["warmup"] = train(warmup, train_ds, collate_decoder, wcfg, out / "warmup",
                                  resume=args.resume)
        if is_sharded(denoiser):
            # FSDP sharded the network in place, and a network is sharded once: the joint stage takes a
            # fresh one holding the same weights (the same init, then the warm-up's trained tensors)
            denoiser = fresh_denoiser()
            trained = load_safetensors(Path(results["warmup"]["final_dir"]) / "model.safetensors")
            unexpected = DecoderTrainModule(denoiser, ae, "warmup", sampler=sampler).load_state_dict(
                trained, strict=False).unexpected_keys
            if unexpected:
                raise KeyError(f"the warm-up's weights do not fit the joint stage's network: {unexpected[:5]}")
    if args.warmup_only:
        if warm_steps <= 0:
            raise ValueError("--warmup-only needs a warm-up stage (--set warmup_stage_steps=N, N > 0)")
        print(f"[decoder] warm-up stage done: {results['warmup']['final_dir']}; rerun with --resume for the joint stage")
        return 0
    # 4. joint stage
    module = DecoderTrainModule(denoiser, ae, "joint", freeze_action_encoder=args.freeze_action_encoder, sampler=sampler)
    results["joint"] = train(module, train_ds, collate_decoder, cfg, out / "joint", resume=args.resume)

    # 5. evaluation of the exported (EMA) pipeline
    final = Path(results["joint"]["final_dir"])
    decoder = ShotDecoder.from_pretrained(final / "shot_decoder")
    metrics: dict = {"train": {k: {m: r[m] for m in ("step", "loss", "seconds")} for k, r in results.items()},
                     "decoder_config": dcfg.to_dict(), "diffusion": diff.to_dict()}
    if "val" in caches:
        metrics["eval"] = eval_loss(Denoiser(decoder.net, decoder.diffusion), caches["val"], args.eval_shots)
        if args.samples:
            metrics["samples"] = write_samples(decoder, caches["val"], val_shots, out / "samples", args.samples)
    metrics["speed"] = bench_decode(decoder, n=3)
    save_json_atomic(metrics, final / "metrics.json")
    print(f"[decoder] done: {final / 'shot_decoder'}\n{json.dumps(metrics.get('eval', {}))}\n"
          f"{json.dumps(metrics['speed'])}")
    return 0
