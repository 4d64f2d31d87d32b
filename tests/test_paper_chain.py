"""The paper's pipeline from local checkpoints of the paper's own classes (tiny random ones here):
`convert vae` (AutoencoderKLCogVideoX) and `convert clip` (CLIPVisionModelWithProjection) make the runs
`train decoder --preset paper --transformer DIR --text-encoder DIR` reads (CogVideoXTransformer3DModel,
T5EncoderModel); the decoder takes its architecture from the transformer and the paper's warm-up stage
keeps the transformer frozen while E_a learns; then `train engine --preset paper --llm-path DIR`
(MistralForCausalLM + LoRA), `train adapt`, `model pack`, and one turn of play."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from diffusers import AutoencoderKLCogVideoX, CogVideoXTransformer3DModel
from transformers import (AutoTokenizer, CLIPVisionConfig, CLIPVisionModelWithProjection, MistralConfig,
                          MistralForCausalLM, T5Config, T5EncoderModel)

from animegamer.cli import main
from animegamer.core.checkpoint import load_safetensors
from animegamer.game.session import Game
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.models.text_encoder import minilm_path
from animegamer.models.vision_tower import VisionTower
from animegamer.recipes.runner import launcher, load_recipe, run_recipe
from animegamer.world.dataset import RenderConfig, render_dataset

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper_decoder")
    world = root / "world"
    render_dataset(RenderConfig(sessions=20, turns=2, height=48, width=72, workers=1), world, progress=False)
    torch.manual_seed(7)
    n = 3  # CogVideoX's 3D VAE at three levels: 4x spatial, 4x temporal (17 -> 5 frames), 4 latent channels
    AutoencoderKLCogVideoX(block_out_channels=(8, 8, 16), layers_per_block=1, latent_channels=4, norm_num_groups=4,
                           down_block_types=("CogVideoXDownBlock3D",) * n, up_block_types=("CogVideoXUpBlock3D",) * n,
                           temporal_compression_ratio=4).save_pretrained(root / "cogvideox" / "vae")
    CLIPVisionModelWithProjection(CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8,
        projection_dim=16)).save_pretrained(root / "clip_hf")
    transformer = CogVideoXTransformer3DModel(  # the paper's class, tiny: 2 layers x 2 heads x 8
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, time_embed_dim=16,
        text_embed_dim=32, num_layers=2, sample_width=18, sample_height=12, sample_frames=17, patch_size=2,
        max_text_seq_length=8, use_rotary_positional_embeddings=False, use_learned_positional_embeddings=False)
    transformer.save_pretrained(root / "cogvideox" / "transformer")  # laid out as a CogVideoX pipeline dir
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)  # any tokenizer fits a test
    T5EncoderModel(T5Config(vocab_size=tokenizer.vocab_size, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                            num_heads=2)).save_pretrained(root / "t5")
    tokenizer.save_pretrained(root / "t5")
    assert main(["convert", "vae", str(root / "cogvideox"), "--out", str(root / "vae")]) == 0  # a pipeline dir: vae/
    assert main(["convert", "clip", str(root / "clip_hf"), "--out", str(root / "clip")]) == 0
    return {"root": root, "world": world}


def test_converted_parts_are_the_checkpoints(parts, capsys):
    root = parts["root"]
    ae = ShotAutoencoder.from_pretrained(root / "vae" / "final" / "autoencoder")
    source = AutoencoderKLCogVideoX.from_pretrained(root / "cogvideox" / "vae")
    assert ae.cfg.kind == "cogvideox" and ae.spatial_ratio == 4 and ae.latent_channels == 4
    assert all(torch.equal(v.half().float(), ae.vae.state_dict()[k].float()) for k, v in source.state_dict().items())
    assert ae.latent_scale.item() == pytest.approx(source.config.scaling_factor)
    tower = VisionTower.from_pretrained(root / "clip" / "final" / "vision_tower")
    clip = CLIPVisionModelWithProjection.from_pretrained(root / "clip_hf")
    assert tower.cfg.input_size == (32, 32) and tower.n_visual == 16 and tower.cfg.image_mean is not None
    assert all(torch.equal(v.half().float(), tower.clip.state_dict()[k].float()) for k, v in clip.state_dict().items())
    capsys.readouterr()
    assert main(["convert", "vae", str(root / "clip_hf"), "--out", str(root / "bad")]) == 2
    assert "'clip_vision_model', not a diffusers AutoencoderKLCogVideoX" in capsys.readouterr().err
    assert main(["convert", "clip", str(root / "world"), "--out", str(root / "bad")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert not (root / "bad").exists()


def _argv(parts, out: str, *extra: str) -> list[str]:
    r = parts["root"]
    return ["train", "decoder", "--preset", "paper", "--data", str(parts["world"]), "--vae", str(r / "vae"),
            "--clip", str(r / "clip"), "--out", str(r / out), "--samples", "0", "--eval-shots", "2",
            "--batch-size", "2", "--no-progress", *extra]


def test_paper_decoder_starts_from_a_local_cogvideox_transformer(parts):
    root = parts["root"]
    assert main(_argv(parts, "dec", "--transformer", str(root / "cogvideox"), "--text-encoder", str(root / "t5"),
                      "--set", "warmup_stage_steps=2", "--warmup-only")) == 0
    final = root / "dec" / "warmup" / "final" / "shot_decoder"
    cfg = json.loads((final / "shot_decoder.json").read_text())["decoder"]
    assert (cfg["num_layers"], cfg["num_heads"], cfg["head_dim"], cfg["time_embed_dim"], cfg["patch_size"]) == \
        (2, 2, 8, 16, 2)  # the checkpoint's architecture, not the preset's 30 x 30 x 64
    assert cfg["n_text"] == 30 and cfg["pretrained_path"] is None  # the paper's 30 text tokens; weights now inside
    assert cfg["d_text_in"] == 16  # f_md is the T5 encoder's token states
    assert cfg["n_visual"] == 16 and cfg["latent_channels"] == 4  # f_v: the CLIP's 4 x 4 patches; CogVideoX latents
    assert (cfg["num_frames"], cfg["latent_height"], cfg["latent_width"]) == (17, 12, 18)  # 17 x 48 x 72 -> 5 x 12 x 18
    assert json.loads((final / "autoencoder" / "autoencoder.json").read_text())["kind"] == "cogvideox"
    ours = load_safetensors(final / "shot_decoder.safetensors")
    theirs = load_safetensors(next((root / "cogvideox" / "transformer").glob("*.safetensors")))
    blocks = [k for k in theirs if k.startswith("transformer_blocks.")]
    assert blocks and all(torch.equal(ours[f"transformer.{k}"].float(), theirs[k].float()) for k in blocks)  # frozen
    run = json.loads((root / "dec" / "warmup" / "run_config.json").read_text())
    assert run["train_config"]["gradient_checkpointing"] is True


def test_paper_decoder_says_what_is_missing(parts, capsys):
    with pytest.raises(SystemExit, match="--transformer DIR is needed"):
        main(_argv(parts, "no_transformer"))
    empty = parts["root"] / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no config.json"):
        main(_argv(parts, "empty_transformer", "--transformer", str(empty)))


def test_paper_recipe_trains_packs_and_plays(parts, tmp_path):
    """`recipe paper` on the tiny checkpoints: world data, convert, the decoder's warm-up and joint stages,
    the paper's engine (a Mistral-class checkpoint under LoRA) on its s_a, phase c on the engine's
    predictions, the pack; the model plays a turn."""
    root = parts["root"]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    llm = tmp_path / "mistral"
    MistralForCausalLM(MistralConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=4096)).save_pretrained(llm)
    tokenizer.save_pretrained(llm)
    recipe = load_recipe("paper", {
        "cogvideox": str(root / "cogvideox"), "clip": str(root / "clip_hf"), "t5": str(root / "t5"), "llm": str(llm),
        "sessions": "20", "turns": "2", "height": "48", "width": "72", "decoder_steps": "2", "warmup_steps": "2",
        "engine_steps": "2", "adapt_steps": "2", "batch_size": "2", "engine_batch": "2", "eval_shots": "4",
        "engine_eval": "--no-closed-loop --eval-windows 1", "sample_steps": "2"})
    report = run_recipe(recipe, tmp_path / "runs", progress=False)
    assert [r["status"] for r in report] == ["ran"] * len(recipe.steps)
    runs = tmp_path / "runs"
    assert json.loads((runs / "decoder" / "joint" / "final" / "shot_decoder" / "shot_decoder.json").read_text()
                      )["decoder"]["num_layers"] == 2  # the CogVideoX checkpoint's depth
    engine_run = json.loads((runs / "engine" / "run_config.json").read_text())
    mem = engine_run["memory"]
    assert mem["frozen_bytes"] < 4 * mem["frozen_params"]  # the frozen backbone trained in bf16
    here = "cuda" if torch.cuda.is_available() else "cpu"  # every phase trains on a GPU where there is one
    assert engine_run["launch"]["device"].startswith(here)
    game = Game.load(runs / "model", store=tmp_path / "saves", device="auto")  # and the model plays there
    backbone = game.engine.backbone
    assert backbone.embed_tokens.weight.dtype == torch.bfloat16  # held in bf16 in play too
    assert all(p.dtype == torch.float32 for n, p in backbone.named_parameters() if "lora_" in n)
    turn = game.new_session([game.cast[0]], seed=1).step(f"{game.cast[0]} waves")
    assert turn.frames.shape == (17, 48, 72, 3) and 1 <= turn.motion_level <= 5
    launched = dataclasses.replace(recipe.steps[3], launch="-m accelerate.commands.launch --num_processes 2")
    assert launcher(launched, {})[1:] == ["-m", "accelerate.commands.launch", "--num_processes", "2", "-m", "animegamer"]
