"""A local (paper) engine backbone loaded in 8 or 4 bits through bitsandbytes: LoRA trains on top of the
quantized weights (4 bits: QLoRA) through the command line, the frozen weights take a quarter / an eighth
of their fp32 bytes, and the packed engine plays with the same quantization. On this CPU (bitsandbytes
runs its 8- and 4-bit kernels on CPUs too); on a GPU the same layers load there."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

from animegamer.cli import main
from animegamer.engine.backbones import get_spec, load_causal_lm
from animegamer.engine.model import load_engine
from animegamer.game.session import Game
from animegamer.models.text_encoder import minilm_path
from tiny_game import CAST, RUN, tiny_models

torch.set_num_threads(1)
DECODER = tiny_models()[1]


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    path = tmp_path_factory.mktemp("quantize") / "mistral"
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)  # any tokenizer fits a test
    torch.manual_seed(0)
    MistralForCausalLM(MistralConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=4096)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _layer_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.model.layers.parameters())


@pytest.mark.parametrize("bits,layer,share", [("8bit", "Linear8bitLt", 0.6), ("4bit", "Linear4bit", 0.35)])
def test_the_backbone_loads_quantized_and_answers_like_the_full_one(mistral, bits, layer, share):
    full, _ = load_causal_lm(get_spec("paper", str(mistral)))
    quant, _ = load_causal_lm(get_spec("paper", str(mistral), bits))
    assert type(quant.model.layers[0].self_attn.q_proj).__name__ == layer
    assert type(full.model.layers[0].self_attn.q_proj).__name__ == "Linear"
    ids = torch.randint(0, 1000, (1, 16))
    with torch.no_grad():
        a, b = full(ids).logits.float(), quant(ids).logits.float()
    assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.95  # rounding, not noise
    assert _layer_bytes(quant) < share * _layer_bytes(full)  # of the bf16 layers' bytes (embeddings stay)


def test_quantize_is_for_a_local_backbone_and_says_so():
    with pytest.raises(ValueError, match="--quantize is for a local backbone"):
        get_spec("default", quantize="4bit")
    with pytest.raises(ValueError, match="quantize must be one of"):
        get_spec("paper", "/x", quantize="3bit")


def _train(mistral, out, *extra: str) -> dict:
    n, d = DECODER.config.n_tokens, DECODER.config.d_cond  # s_a shaped for the tiny decoder it plays with
    assert main(["train", "engine", "--preset", "paper", "--llm-path", str(mistral), *extra,
                 "--synthetic", "6", "--synthetic-turns", "3", "--rep-tokens", str(n), "--rep-dim", str(d),
                 "--steps", "3", "--batch-size", "2", "--no-progress", "--out", str(out), "--log-every", "1"]) == 0
    return json.loads((out / "run_config.json").read_text())


def test_qlora_trains_through_the_cli_and_plays_quantized(mistral, tmp_path):
    out = tmp_path / "engine"
    run = _train(mistral, out, "--quantize", "4bit")
    assert run["model_config"]["backbone_quantize"] == "4bit"
    # the memory printed at the start counts the 4-bit layers: three quarters of their bf16 bytes saved
    saved = _train(mistral, tmp_path / "bf16")["memory"]["frozen_bytes"] - run["memory"]["frozen_bytes"]
    assert saved > 0.6 * _layer_bytes(load_causal_lm(get_spec("paper", str(mistral)))[0])
    losses = [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    engine = load_engine(out / "final")
    assert engine.cfg.backbone_quantize == "4bit"
    assert type(engine.backbone.layers[0].self_attn.q_proj.base_layer).__name__ == "Linear4bit"  # LoRA on 4 bits
    eight = load_engine(out / "final", backbone_quantize="8bit")  # play may choose another quantization
    assert type(eight.backbone.layers[0].self_attn.q_proj.base_layer).__name__ == "Linear8bitLt"
    model = tmp_path / "model"
    shutil.copytree(out / "final", model / "engine")
    DECODER.save_pretrained(model / "shot_decoder")
    game = Game.load(model, store=tmp_path / "saves", cast=CAST)
    assert game.model_info["quantize"] == "4bit" and not getattr(game.engine, "_merged", False)  # adapters stay beside 4-bit weights
    turn = game.new_session(["Qiqi"], seed=1).step(RUN)
    assert turn.frames.shape[-1] == 3 and 1 <= turn.motion_level <= 5
