"""training/memory.py: the memory estimate a run prints, and gradient checkpointing (same gradients, less
kept), through the loop and the CLI."""
from __future__ import annotations

import json

import pytest
import torch
from tiny_game import tiny_models
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from animegamer.cli import main
from animegamer.training.memory import enable_gradient_checkpointing, memory_estimate
from animegamer.world.dataset import RenderConfig, render_dataset

torch.set_num_threads(1)


def test_memory_estimate_counts_trained_frozen_and_ema():
    m = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 5).to(torch.bfloat16))  # 110 trained, 55 frozen in bf16
    trained = {id(p) for p in m[0].parameters()}
    est = memory_estimate(m, trained)
    assert (est["trained_params"], est["frozen_params"], est["frozen_bytes"]) == (110, 55, 110)
    assert est["total_bytes"] == 110 * 16 + 110
    assert memory_estimate(m, trained, ema=True)["total_bytes"] == 110 * 20 + 110
    tied = nn.Sequential(m[0], m[0])  # a weight used twice is held once
    assert memory_estimate(tied, trained)["trained_params"] == 110


def _grads(model: nn.Module, loss_fn) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss_fn(model).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gradient_checkpointing_keeps_the_gradients_of_an_llm():
    torch.manual_seed(0)
    llm = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2)).train()
    ids = torch.randint(0, 64, (2, 12))
    def loss(m):
        return m(input_ids=ids, labels=ids, use_cache=False).loss
    plain = _grads(llm, loss)
    assert enable_gradient_checkpointing(llm)
    assert llm.model.gradient_checkpointing
    checkpointed = _grads(llm, loss)
    assert plain.keys() == checkpointed.keys()
    assert all(torch.allclose(plain[k], checkpointed[k], atol=1e-6) for k in plain)


def test_every_part_of_the_game_models_can_checkpoint():
    engine, decoder = tiny_models()
    assert "backbone" in enable_gradient_checkpointing(engine)  # the LLM (transformers)
    parts = enable_gradient_checkpointing(decoder)
    assert "net.transformer" in parts and "autoencoder.vae" in parts  # diffusers' CogVideoX transformer, AutoencoderKL
    with pytest.raises(ValueError, match="supports it"):
        enable_gradient_checkpointing(nn.Linear(2, 2))


def test_train_cli_prints_the_estimate_and_checkpoints(tmp_path, capsys):
    world = tmp_path / "world"
    render_dataset(RenderConfig(sessions=4, turns=1, height=48, width=72, workers=1), world, progress=False)
    assert main(["train", "vae", "--preset", "tiny", "--data", str(world), "--out", str(tmp_path / "vae"),
                 "--steps", "2", "--no-progress", "--gradient-checkpointing"]) == 0
    assert "[train] memory per process" in capsys.readouterr().out
    run = json.loads((tmp_path / "vae" / "run_config.json").read_text())
    assert run["train_config"]["gradient_checkpointing"] is True and run["gradient_checkpointing"]
    assert run["memory"]["trained_params"] > 0 and run["memory"]["total_bytes"] >= 16 * run["memory"]["trained_params"]
