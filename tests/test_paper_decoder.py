"""`train decoder --preset paper --transformer DIR --text-encoder DIR`: the decoder starts from a local
diffusers CogVideoX transformer and reads the motion text with a local T5 encoder (here tiny random
ones of the paper's own classes); it takes its architecture from the transformer, and the paper's
warm-up stage keeps the transformer frozen while E_a learns."""
from __future__ import annotations

import json

import pytest
import torch
from diffusers import CogVideoXTransformer3DModel
from transformers import AutoTokenizer, T5Config, T5EncoderModel

from animegamer.cli import main
from animegamer.core.checkpoint import load_safetensors
from animegamer.models.text_encoder import minilm_path
from animegamer.world.dataset import RenderConfig, render_dataset

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper_decoder")
    world = root / "world"
    render_dataset(RenderConfig(sessions=8, turns=1, height=48, width=72, workers=1), world, progress=False)
    for phase in ("clip", "vae"):
        assert main(["train", phase, "--preset", "tiny", "--data", str(world), "--out", str(root / phase),
                     "--steps", "2", "--no-progress"]) == 0
    torch.manual_seed(7)
    transformer = CogVideoXTransformer3DModel(  # the paper's class, tiny: 2 layers x 2 heads x 8
        num_attention_heads=2, attention_head_dim=8, in_channels=8, out_channels=8, time_embed_dim=16,
        text_embed_dim=32, num_layers=2, sample_width=18, sample_height=12, sample_frames=17, patch_size=2,
        max_text_seq_length=8, use_rotary_positional_embeddings=False, use_learned_positional_embeddings=False)
    transformer.save_pretrained(root / "cogvideox" / "transformer")  # laid out as a CogVideoX pipeline dir
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)  # any tokenizer fits a test
    T5EncoderModel(T5Config(vocab_size=tokenizer.vocab_size, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                            num_heads=2)).save_pretrained(root / "t5")
    tokenizer.save_pretrained(root / "t5")
    return {"root": root, "world": world}


def _argv(parts, out: str, *extra: str) -> list[str]:
    r = parts["root"]
    return ["train", "decoder", "--preset", "paper", "--data", str(parts["world"]), "--vae", str(r / "vae"),
            "--clip", str(r / "clip"), "--out", str(r / out), "--samples", "0", "--eval-shots", "2",
            "--batch-size", "2", "--no-progress", *extra]


def test_paper_decoder_starts_from_a_local_cogvideox_transformer(parts):
    root = parts["root"]
    assert main(_argv(parts, "dec", "--transformer", str(root / "cogvideox"), "--text-encoder", str(root / "t5"),
                      "--warmup-stage-steps", "2", "--warmup-only")) == 0
    final = root / "dec" / "warmup" / "final" / "shot_decoder"
    cfg = json.loads((final / "shot_decoder.json").read_text())["decoder"]
    assert (cfg["num_layers"], cfg["num_heads"], cfg["head_dim"], cfg["time_embed_dim"], cfg["patch_size"]) == \
        (2, 2, 8, 16, 2)  # the checkpoint's architecture, not the preset's 30 x 30 x 64
    assert cfg["n_text"] == 30 and cfg["pretrained_path"] is None  # the paper's 30 text tokens; weights now inside
    assert cfg["d_text_in"] == 16  # f_md is the T5 encoder's token states
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
