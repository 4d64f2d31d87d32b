"""`convert release` on tiny checkpoints written in the published AnimeGamer release's own key names and
layout (TencentARC/AnimeGamer: the MLLM's ContinuousLVLM_Video state dict with a peft model on Mistral, and
the SAT CogVideoX decoder checkpoint), scaled down but of the same structure.

The references below are written from the release's code (VDM_Decoder/dit_video_concat.py, the SAT
transformer, MLLM/src/models_clm/models.py, inference_MLLM.py), independently of the converted classes:
the converted decoder, E_a, resamplers and engine must compute what they compute, to 1e-5."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLCogVideoX, DDPMScheduler
from fastapi.testclient import TestClient
from peft import LoraConfig, get_peft_model
from torch import nn
from tokenizers import Tokenizer, models, normalizers, trainers
from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

from animegamer.cli import main
from animegamer.decoder.diffusion import DiffusionConfig
from animegamer.decoder.network import decoder_preset
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.sampler import SamplerConfig, guidance_at
from animegamer.engine.backbones import HFTokenizer
from animegamer.engine.release_engine import load_release_engine, release_instruction_ids, release_text_values
from animegamer.engine.sequence import TurnRecord
from animegamer.game.api import ServeConfig, create_app
from animegamer.game.session import Game
from animegamer.models.text_encoder import minilm_path
from animegamer.training import release_import
from animegamer.training.release_import import (
    ReleaseFormatError,
    ReleaseMemoryError,
    ReleaseImportConfig,
    convert_release,
    memory_estimate,
    merge_sat_lora,
)

torch.set_num_threads(1)

W, HEADS, T_EMB, LAYERS, C, P = 16, 2, 16, 2, 4, 2  # the decoder: 2 layers x 2 heads x 8, 4 latent channels
D_T5, D_CLIP, N_TEXT, N_VIS = 12, 10, 30, 196  # E_a's inputs (the release: 4096 and 768 wide), 30 + 196 tokens
SHOT_H, SHOT_W = 32, 48  # a 4x VAE: latents 8 x 12, patches 4 x 6, 5 latent frames
LAT_H, LAT_W, FRAMES = SHOT_H // 4, SHOT_W // 4, 5
SAT_LORA_R = 4
H_LLM, LORA_R = 32, 4
FLOW = (0.5, 2.5, 10.0, 15.0, 40.0)  # the release's cuculate_level
CHARACTER = "Character: Qiqi; Motion: quickly run; Background: day town."


# ---------------------------------------------------------------------- the release's layouts, tiny


class _Projection(nn.Module):  # the release's ProjectionLayer: .proj = Linear, GELU, Linear
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(d_in, d_out), nn.GELU(), nn.Linear(d_out, d_out))


class _ReleaseMLLM(nn.Module):  # the release's ContinuousLVLM_Video: its parameters, named as its
    def __init__(self, llm: nn.Module) -> None:
        super().__init__()
        self.llm = llm
        self.input_resampler = _Projection(W, H_LLM)
        self.output_resampler = _Projection(H_LLM, W)


def sat_sincos_3d(dim: int, h: int, w: int, t: int, interp: float = 1.875) -> np.ndarray:
    """dit_video_concat.get_3d_sincos_pos_embed, as the release computes it: (t, h*w, dim)."""
    def one_d(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    spatial, temporal = dim // 4 * 3, dim // 4
    gw, gh = np.meshgrid(np.arange(w, dtype=np.float32) / interp, np.arange(h, dtype=np.float32) / interp)
    emb_s = np.concatenate([one_d(spatial // 2, gw), one_d(spatial // 2, gh)], axis=1)  # grid[0] is w
    emb_t = one_d(temporal, np.arange(t, dtype=np.float32))
    return np.concatenate([np.repeat(emb_t[:, None], h * w, 1), np.repeat(emb_s[None], t, 0)], axis=-1)


def sat_decoder_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    """The transformer part of the release's SAT checkpoint (keys under model.diffusion_model.), LoRA unmerged."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=0.2):
        return torch.randn(*shape, generator=g) * s
    sd = {"time_embed.0.weight": r(T_EMB, W), "time_embed.0.bias": r(T_EMB), "time_embed.2.weight": r(T_EMB, T_EMB),
          "time_embed.2.bias": r(T_EMB), "flow_embed.0.weight": r(T_EMB, W, s=0.05), "flow_embed.0.bias": r(T_EMB),
          "flow_embed.2.weight": r(T_EMB, T_EMB), "flow_embed.2.bias": r(T_EMB),
          "mixins.patch_embed.proj.weight": r(W, C, P, P), "mixins.patch_embed.proj.bias": r(W),
          "mixins.patch_embed.text_proj.0.weight": r(W, D_T5), "mixins.patch_embed.text_proj.0.bias": r(W),
          "mixins.patch_embed.text_proj.2.weight": r(W, W), "mixins.patch_embed.text_proj.2.bias": r(W),
          "mixins.patch_embed.ip_proj.0.weight": r(W, D_CLIP), "mixins.patch_embed.ip_proj.0.bias": r(W),
          "mixins.patch_embed.ip_proj.2.weight": r(W, W), "mixins.patch_embed.ip_proj.2.bias": r(W),
          "transformer.word_embeddings.weight": r(1, W)}
    for n in ("txt_mix_layer_norm", "ip_mix_layer_norm", "output_mix_layer_norm"):
        sd[f"mixins.patch_embed.{n}.weight"], sd[f"mixins.patch_embed.{n}.bias"] = 1 + r(W), r(W)
    table = sat_sincos_3d(W, LAT_H // P, LAT_W // P, FRAMES).reshape(-1, W)
    sd["mixins.pos_embed.pos_embedding"] = torch.cat([torch.zeros(N_TEXT + N_VIS, W),
                                                      torch.from_numpy(table).float()])[None]
    for i in range(LAYERS):
        L = f"transformer.layers.{i}."
        sd[L + "input_layernorm.weight"], sd[L + "input_layernorm.bias"] = 1 + r(W), r(W)
        sd[L + "post_attention_layernorm.weight"], sd[L + "post_attention_layernorm.bias"] = 1 + r(W), r(W)
        # SAT's LoraLinear keeps the replaced layer as `.original` (its bias too) beside matrix_A / matrix_B
        sd[L + "attention.query_key_value.original.weight"] = r(3 * W, W)
        sd[L + "attention.query_key_value.original.bias"] = r(3 * W)
        for j in range(3):
            sd[L + f"attention.query_key_value.matrix_A.{j}"] = r(SAT_LORA_R, W)
            sd[L + f"attention.query_key_value.matrix_B.{j}"] = r(W, SAT_LORA_R)
        sd[L + "attention.dense.original.weight"], sd[L + "attention.dense.original.bias"] = r(W, W), r(W)
        sd[L + "attention.dense.matrix_A.0"], sd[L + "attention.dense.matrix_B.0"] = r(SAT_LORA_R, W), r(W, SAT_LORA_R)
        sd[L + "mlp.dense_h_to_4h.weight"], sd[L + "mlp.dense_h_to_4h.bias"] = r(4 * W, W), r(4 * W)
        sd[L + "mlp.dense_4h_to_h.weight"], sd[L + "mlp.dense_4h_to_h.bias"] = r(W, 4 * W), r(W)
        sd[f"mixins.adaln_layer.adaLN_modulations.{i}.1.weight"] = r(12 * W, T_EMB, s=0.1)
        sd[f"mixins.adaln_layer.adaLN_modulations.{i}.1.bias"] = r(12 * W, s=0.1)
        for n in ("query_layernorm_list", "key_layernorm_list"):
            sd[f"mixins.adaln_layer.{n}.{i}.weight"], sd[f"mixins.adaln_layer.{n}.{i}.bias"] = 1 + r(W // HEADS), r(W // HEADS)
    sd["transformer.final_layernorm.weight"], sd["transformer.final_layernorm.bias"] = 1 + r(W), r(W)
    sd["mixins.final_layer.norm_final.weight"], sd["mixins.final_layer.norm_final.bias"] = 1 + r(W), r(W)
    sd["mixins.final_layer.linear.weight"], sd["mixins.final_layer.linear.bias"] = r(P * P * C, W), r(P * P * C)
    sd["mixins.final_layer.adaLN_modulation.1.weight"] = r(2 * W, T_EMB)
    sd["mixins.final_layer.adaLN_modulation.1.bias"] = r(2 * W)
    return sd


def sat_timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:  # sgm's timestep_embedding: [cos, sin]
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def sat_forward(sd: dict[str, torch.Tensor], x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor,
                flow: torch.Tensor) -> torch.Tensor:
    """The release's DiffusionTransformer.forward (dit_video_concat.py + SAT's pre-LN transformer), with its
    LoRA applied as SAT's LoraLinear does (x @ original.T + x @ A.T @ B.T * alpha / r, alpha 1): x (b, t, c, h, w),
    cond (b, 226, W) the MLLM's s_a as it goes into the sequence, flow (b,) the flow value of the level."""
    def lin(h, name, lora=0):
        w = sd.get(name + ".weight", sd.get(name + ".original.weight"))
        out = h @ w.T + sd.get(name + ".bias", sd.get(name + ".original.bias"))
        parts = [(sd[f"{name}.matrix_A.{j}"], sd[f"{name}.matrix_B.{j}"]) for j in range(lora)]
        if parts:
            out = out + torch.cat([h @ a.T @ b.T for a, b in parts], -1) / SAT_LORA_R
        return out

    def ln(h, name, eps=1e-6):
        return F.layer_norm(h, h.shape[-1:], sd[name + ".weight"], sd[name + ".bias"], eps)

    def mlp2(h, name):
        return lin(F.silu(lin(h, name + ".0")), name + ".2")

    def modulate(h, shift, scale):
        return h * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

    b, f, c, hh, ww = x.shape
    emb = (mlp2(sat_timestep_embedding(t, W).to(x.dtype), "time_embed")  # float32 sinusoids, as both compute them
           + mlp2(sat_timestep_embedding(flow, W).to(x.dtype), "flow_embed"))
    img = F.conv2d(x.reshape(b * f, c, hh, ww), sd["mixins.patch_embed.proj.weight"], sd["mixins.patch_embed.proj.bias"],
                   stride=P)  # (b f, W, h/p, w/p)
    img = img.reshape(b, f, W, -1).transpose(2, 3).reshape(b, -1, W)  # (b, f n, W)
    hs = torch.cat([cond, img], 1) + sd["mixins.pos_embed.pos_embedding"][:, : N_TEXT + N_VIS + img.shape[1]]
    n_t, hd = N_TEXT + N_VIS, W // HEADS
    for i in range(LAYERS):
        L = f"transformer.layers.{i}."
        m = (F.silu(emb) @ sd[f"mixins.adaln_layer.adaLN_modulations.{i}.1.weight"].T
             + sd[f"mixins.adaln_layer.adaLN_modulations.{i}.1.bias"]).chunk(12, dim=1)
        text, vis = hs[:, :n_t], hs[:, n_t:]
        a_in = torch.cat([modulate(ln(text, L + "input_layernorm", 1e-6), m[6], m[7]),
                          modulate(ln(vis, L + "input_layernorm", 1e-6), m[0], m[1])], 1)
        q, k, v = lin(a_in, L + "attention.query_key_value", 3).chunk(3, -1)
        q, k, v = (z.reshape(b, -1, HEADS, hd).transpose(1, 2) for z in (q, k, v))  # (b, heads, n, hd)
        q = ln(q, f"mixins.adaln_layer.query_layernorm_list.{i}")
        k = ln(k, f"mixins.adaln_layer.key_layernorm_list.{i}")
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1) @ v
        att = lin(att.transpose(1, 2).reshape(b, -1, W), L + "attention.dense", 1)
        text = text + m[8].unsqueeze(1) * att[:, :n_t]
        vis = vis + m[2].unsqueeze(1) * att[:, n_t:]
        m_in = torch.cat([modulate(ln(text, L + "post_attention_layernorm"), m[9], m[10]),
                          modulate(ln(vis, L + "post_attention_layernorm"), m[3], m[4])], 1)
        out = lin(F.gelu(lin(m_in, L + "mlp.dense_h_to_4h"), approximate="tanh"), L + "mlp.dense_4h_to_h")
        text = text + m[11].unsqueeze(1) * out[:, :n_t]
        vis = vis + m[5].unsqueeze(1) * out[:, n_t:]
        hs = torch.cat([text, vis], 1)
    hs = ln(hs, "transformer.final_layernorm")[:, n_t:]
    shift, scale = (F.silu(emb) @ sd["mixins.final_layer.adaLN_modulation.1.weight"].T
                    + sd["mixins.final_layer.adaLN_modulation.1.bias"]).chunk(2, dim=1)
    hs = lin(modulate(ln(hs, "mixins.final_layer.norm_final"), shift, scale), "mixins.final_layer.linear")
    hp, wp = hh // P, ww // P
    return hs.reshape(b, f, hp, wp, c, P, P).permute(0, 1, 4, 2, 5, 3, 6).reshape(b, f, c, hh, ww)  # (c p q) layout


def sat_e_a(sd: dict[str, torch.Tensor], t5: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
    """ImagePatchEmbeddingMixin's mix (ip_hidden_size 768 branch): LN(text_proj(T5)) ++ LN(ip_proj(CLIP))."""
    def stream(x, proj, norm):
        h = F.gelu(x @ sd[f"mixins.patch_embed.{proj}.0.weight"].T + sd[f"mixins.patch_embed.{proj}.0.bias"])
        h = h @ sd[f"mixins.patch_embed.{proj}.2.weight"].T + sd[f"mixins.patch_embed.{proj}.2.bias"]
        return F.layer_norm(h, (W,), sd[f"mixins.patch_embed.{norm}.weight"], sd[f"mixins.patch_embed.{norm}.bias"])
    return torch.cat([stream(t5, "text_proj", "txt_mix_layer_norm"), stream(clip, "ip_proj", "ip_mix_layer_norm")], 1)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("release")
    torch.manual_seed(3)
    tok = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)  # any tokenizer fits a test
    tok.bos_token = "[CLS]"
    V0 = tok.vocab_size
    mistral = MistralForCausalLM(MistralConfig(vocab_size=V0, hidden_size=H_LLM, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=4096))
    mistral.save_pretrained(root / "Mistral-7B-Instruct-v0.1")
    tok.save_pretrained(root / "Mistral-7B-Instruct-v0.1")
    # the release's MLLM: Mistral resized to 32000 + 284 tokens, peft LoRA with modules_to_save, two resamplers
    llm = MistralForCausalLM.from_pretrained(root / "Mistral-7B-Instruct-v0.1")
    llm.resize_token_embeddings(V0 + 284)
    peft = get_peft_model(llm, LoraConfig(
        r=LORA_R, lora_alpha=LORA_R, target_modules=["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "down_proj",
                                                     "up_proj"],
        modules_to_save=["input_layernorm", "post_attention_layernorm", "norm"], task_type="CAUSAL_LM"))
    with torch.no_grad():  # trained: the adapters, the norms, the whole table and head
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.2)
            elif "modules_to_save" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "embed_tokens" in name or "lm_head" in name:
                p.normal_(0, 0.5)
    model = _ReleaseMLLM(peft).eval()
    (root / "MLLM-Qiqi").mkdir()
    torch.save(model.state_dict(), root / "MLLM-Qiqi" / "pytorch_model.bin")
    # the release's decoder: a SAT checkpoint folder (`latest` -> 1000/mp_rank_00_model_states.pt, {"module": ...})
    sat = sat_decoder_state_dict()
    dec = root / "VDM_Decoder-Qiqi"
    (dec / "1000").mkdir(parents=True)
    (dec / "latest").write_text("1000\n")
    torch.save({"module": {"model.diffusion_model." + k: v for k, v in sat.items()}
                | {"first_stage_model.encoder.conv_in.weight": torch.zeros(1)}, "iteration": 1000},
               dec / "1000" / "mp_rank_00_model_states.pt")
    n = 3  # CogVideoX's 3D VAE at three levels: 4x spatial, 4x temporal, 4 latent channels
    AutoencoderKLCogVideoX(block_out_channels=(8, 8, 16), layers_per_block=1, latent_channels=C, norm_num_groups=4,
                           down_block_types=("CogVideoXDownBlock3D",) * n, up_block_types=("CogVideoXUpBlock3D",) * n,
                           temporal_compression_ratio=4).save_pretrained(root / "CogVideoX-2b" / "vae")
    args = {"mllm": root / "MLLM-Qiqi", "decoder": dec, "mistral": root / "Mistral-7B-Instruct-v0.1",
            "cogvideox": root / "CogVideoX-2b"}
    return {"root": root, "args": {k: str(v) for k, v in args.items()}, "sat": sat, "mllm": model, "tok": tok, "V0": V0}


@pytest.fixture(scope="module")
def converted(release):
    out = release["root"] / "model"
    argv = ["convert", "release", *(x for k, v in release["args"].items() for x in (f"--{k}", v)), "--out", str(out),
            "--height", str(SHOT_H), "--width", str(SHOT_W), "--sample-steps", "2", "--window", "2", "--fp32"]
    assert main(argv) == 0
    return out


# ---------------------------------------------------------------------- equivalence


def test_converted_decoder_is_the_release_transformer(release, converted):
    sat = release["sat"]
    dec = ShotDecoder.from_pretrained(converted / "shot_decoder")
    net = dec.net.double()  # both sides in float64: what is left is the layout, not rounding
    cfg = net.config
    assert (cfg.num_layers, cfg.num_heads, cfg.width, cfg.time_embed_dim, cfg.n_tokens) == (LAYERS, HEADS, W, T_EMB, 226)
    assert dec.sampler.steps == 2 and dec.sampler.guidance == 6.0  # the release's guidance scale
    ref_sd = {k: v.double() for k, v in sat.items()}  # as SAT runs it: LoRA unmerged (converted with --fp32)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, FRAMES, C, LAT_H, LAT_W, generator=g).double()
    s_a = torch.randn(2, 226, W, generator=g).double()
    t = torch.tensor([999.0, 17.0])
    level = torch.tensor([1, 5])
    with torch.no_grad():
        ours = net(x, t, s_a, level)
        theirs = sat_forward(ref_sd, x, t, s_a, torch.tensor([FLOW[0], FLOW[4]]))
    assert (ours - theirs).abs().max() < 1e-5
    # and with the LoRA left unmerged, as SAT runs it, on the fp32 checkpoint: the merge is SAT's own sum
    merged = {k: v.double() for k, v in merge_sat_lora(ref_sd, None).items()}
    qkv = merged["transformer.layers.0.attention.query_key_value.weight"]
    h = torch.randn(3, W, generator=g).double()
    lora = torch.cat([h @ ref_sd[f"transformer.layers.0.attention.query_key_value.matrix_A.{j}"].T
                      @ ref_sd[f"transformer.layers.0.attention.query_key_value.matrix_B.{j}"].T for j in range(3)], -1)
    assert (h @ qkv.T - (h @ ref_sd["transformer.layers.0.attention.query_key_value.original.weight"].T + lora / SAT_LORA_R)
            ).abs().max() < 1e-5
    assert cfg.motion_ofs_values == list(FLOW)
    # E_a and its unconditional branch (the release: E_a of zero T5 and CLIP features)
    t5, clip = torch.randn(2, N_TEXT, D_T5, generator=g).double(), torch.randn(2, N_VIS, D_CLIP, generator=g).double()
    with torch.no_grad():
        assert (net.action_encoder(t5, clip) - sat_e_a(ref_sd, t5, clip)).abs().max() < 1e-5
        zero = sat_e_a(ref_sd, torch.zeros(1, N_TEXT, D_T5).double(), torch.zeros(1, N_VIS, D_CLIP).double())
        assert (net.action_encoder.null(1) - zero).abs().max() < 1e-5


def _release_ids(V0: int, tok, history: list[str], instruction: str, values: list[list[int]]) -> tuple[list[int], list[int], int]:
    """inference_MLLM.py's sequence, corrected history (one </ST>), ids from added_tokens.json."""
    a = {"<img>": 32256, "</img>": 32257, "<frame>": 32260, "</frame>": 32261, "<TURN>": 32282, "</TURN>": 32283,
         "<ML>": 32274, "</ML>": 32275, "<SC>": 32276, "</SC>": 32277, "<ET>": 32278, "</ET>": 32279, "<ST>": 32280,
         "</ST>": 32281}
    a = {k: V0 + v - 32000 for k, v in a.items()}
    frames = [a["<img>"], a["<frame>"], *(V0 + i for i in range(226)), a["</frame>"], a["</img>"]]
    ids, slots = [tok.bos_token_id], []
    for text, vals in zip(history, values):
        ids += [a["<TURN>"], *tok(text, add_special_tokens=False)["input_ids"]]
        slots += range(len(ids) + 2, len(ids) + 228)
        ids += frames
        for tag, v in zip(("ML", "SC", "ET", "ST"), vals):
            ids += [a[f"<{tag}>"], V0 + 262 + v + 5, a[f"</{tag}>"]]  # <Strength_v>: 32267 + v
        ids += [a["</TURN>"]]
    ids += [a["<TURN>"], *tok(instruction, add_special_tokens=False)["input_ids"]]
    q0 = len(ids) + 2
    return ids + frames + [a["<ML>"]], slots, q0


def test_converted_engine_is_the_release_mllm(release, converted):
    """s_a from the converted engine = the release's forward (its own peft model) at the frame slots
    (corrected) and at the last 226 positions (the release's inference), with a history turn."""
    model, tok, V0 = release["mllm"], release["tok"], release["V0"]
    g = torch.Generator().manual_seed(1)
    hist_s_a = torch.randn(226, W, generator=g)
    history = [TurnRecord("Qiqi waves", s_a=hist_s_a, motion_level=2, deltas={"social": 1, "entertainment": 0,
                                                                                "stamina": -1})]
    ids, slots, q0 = _release_ids(V0, tok, ["Qiqi waves"], "Qiqi runs", [[2, 1, 0, -1]])
    with torch.no_grad():
        x = model.llm.get_input_embeddings()(torch.tensor([ids]))
        x[0, slots] = model.input_resampler.proj(hist_s_a)
        L = len(ids)
        mask = torch.full((L, L), torch.finfo(torch.float32).min).triu(1)
        mask[q0:q0 + 226, q0:q0 + 226] = 0  # the release's -1 block: the current frame slots see each other
        # hidden_states[-1] of the release's own modeling_mistral is AFTER the final norm: the inner model's output
        inner = model.llm.base_model.model.model
        hs = inner(inputs_embeds=x, attention_mask=mask[None, None]).last_hidden_state[0]
        want_frames, want_shifted = model.output_resampler.proj(hs[q0:q0 + 226]), model.output_resampler.proj(hs[-226:])
        # the release's text pass is causal (its generate() takes no mask): the next-token logits at <ML>
        causal = model.llm(inputs_embeds=x).logits[0, -1]
    for positions, want in (("frames", want_frames), ("release", want_shifted)):
        engine = load_release_engine(converted / "engine", backbone_dtype="float32", query_positions=positions)
        assert engine.cfg.window == 2 and engine.cfg.lora_rank == LORA_R
        pred = engine.predict(history, "Qiqi runs")
        assert (pred.s_a - want).abs().max() < 1e-5, positions
        assert pred.timings["computed_tokens"] == len(ids)
    # constrained values: the level among <Strength_1..5>, from the bidirectional pass's hidden state at <ML>
    logits = model.llm.lm_head(hs[-1])
    assert pred.motion_level == [1, 2, 3, 4, 5][int(logits[[V0 + 262 + 5 + v for v in (1, 2, 3, 4, 5)]].argmax())]
    assert set(pred.deltas) == {"social", "entertainment", "stamina"} and pred.decoder_level is None
    faithful = load_release_engine(converted / "engine", backbone_dtype="float32", value_decoding="release",
                                   decoder_level="social")
    p2 = faithful.predict(history, "Qiqi runs")
    first = int(causal.argmax())  # the release's greedy first token decides whether its parse can succeed
    if not V0 + 262 <= first <= V0 + 272:
        assert p2.motion_level == 5 and p2.deltas == {"social": 0, "entertainment": 0, "stamina": 0}
    assert p2.decoder_level == (1 if p2.deltas["social"] == 1 else 5)
    with torch.no_grad():
        faithful.lm_head.weight.zero_()  # every logit 0: its text is no state text, so the release reads zeros
    p3 = faithful.predict(history, "Qiqi runs")
    assert (p3.motion_level, p3.deltas, p3.decoder_level) == (5, {"social": 0, "entertainment": 0, "stamina": 0}, 5)


def test_release_sampler_settings(converted):
    """The schedule is the release's ZeroSNRDDPMDiscretization(shift_scale=3) (written from discretizer.py), its
    dynamic CFG the release's formula at the step it is called with; the shot is seeded, SDE noise included."""
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2  # sgm's "linear"
    a = torch.cumprod(1 - betas, 0)
    a = a / (3.0 + (1 - 3.0) * a)
    root = a.sqrt()
    root = (root - root[-1]) * root[0] / (root[0] - root[-1])  # zero terminal SNR, as the release rescales
    ours = DDPMScheduler(**DiffusionConfig(snr_shift=3.0).schedule_kwargs()).alphas_cumprod.double().sqrt()
    assert (ours[:-1] - root[:-1]).abs().max() < 1e-5 and ours[-1] < 1e-3
    release = SamplerConfig(steps=50, guidance=6.0, guidance_schedule="release", guidance_exp=5)
    for t in (999, 961, 21, 0):
        assert guidance_at(release, 0, t) == pytest.approx(1 + 6 * (1 - math.cos(math.pi * ((50 - t) / 50) ** 5)) / 2)
    cosine = SamplerConfig(steps=50, guidance=6.0, guidance_schedule="cosine")
    assert guidance_at(cosine, 0, 999) == 1.0 and 6.8 < guidance_at(cosine, 49, 0) < 7.0
    dec = ShotDecoder.from_pretrained(converted / "shot_decoder")
    assert (dec.diffusion.snr_shift, dec.sampler.solver, dec.sampler.guidance_schedule) == (3.0, "sde-dpmsolver++", "cosine")
    s_a = torch.randn(226, W, generator=torch.Generator().manual_seed(4))
    shots = [dec(s_a, 3, generator=torch.Generator().manual_seed(k)) for k in (7, 7, 8)]
    assert np.array_equal(shots[0], shots[1]) and not np.array_equal(shots[0], shots[2])


def test_kv_reuse_gives_the_same_states(converted):
    """Three turns with the cache (the history computed once) = each turn computed whole; a window that slid
    or holds a changed turn (another s_a) is computed again."""
    engine = load_release_engine(converted / "engine", backbone_dtype="float32", window=2)
    g = torch.Generator().manual_seed(9)
    history, cached, whole = [], [], []
    for k, text in enumerate(["Qiqi waves", "Qiqi runs", "Qiqi sits down"]):
        p = engine.predict(history, text)
        cached.append((p, p.timings["reused_tokens"]))
        whole.append(engine.predict(history, text, use_cache=False))
        engine.predict(history, text)  # put the cache back where the game leaves it
        history.append(TurnRecord(text, s_a=torch.randn(226, W, generator=g), motion_level=p.motion_level,
                                  deltas=p.deltas))
    assert [r for _, r in cached][0] == 0 and all(r > 0 for _, r in cached[1:])
    for (p, _), q in zip(cached, whole):
        assert (p.s_a - q.s_a).abs().max() < 1e-5 and (p.motion_level, p.deltas) == (q.motion_level, q.deltas)
    history[-1] = TurnRecord(history[-1].instruction, s_a=torch.zeros(226, W), motion_level=1,
                             deltas={"social": 0, "entertainment": 0, "stamina": 0})
    changed = engine.predict(history, "Qiqi flies")
    assert changed.timings["reused_tokens"] == 0  # the cache held turns 0-1; the window is now 1 and a changed 2
    again = engine.predict(history, "Qiqi flies")  # the same window: its two turns come from the cache
    assert again.timings["reused_tokens"] + again.timings["computed_tokens"] == changed.timings["computed_tokens"]
    assert (again.s_a - changed.s_a).abs().max() < 1e-5
    assert (changed.s_a - engine.predict(history, "Qiqi flies", use_cache=False).s_a).abs().max() < 1e-5


def test_instruction_is_tokenized_as_the_releases_tokenizer_does():
    """The release's LlamaTokenizer (legacy=False) puts no "▁" at the start of the text after <TURN>; Mistral's
    own tokenizer, given the text alone, does. A tiny sentencepiece-style BPE (Mistral's kind) shows both."""
    tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.train_from_iterator(["Qiqi runs to the beach", "Character: Qiqi; Motion: quickly run; Background: day town."] * 9,
                           trainers.BpeTrainer(vocab_size=90, special_tokens=["<unk>", "<s>", "</s>"],
                                               initial_alphabet=["▁"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    text = "Qiqi runs to the beach"
    ours, alone = release_instruction_ids(HFTokenizer(fast), text), HFTokenizer(fast).encode(text)
    assert "".join(fast.convert_ids_to_tokens(ours)) == "Qiqi▁runs▁to▁the▁beach"
    assert "".join(fast.convert_ids_to_tokens(alone)) == "▁Qiqi▁runs▁to▁the▁beach" and ours != alone
    minilm = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)  # not sentencepiece-style: as usual
    assert release_instruction_ids(HFTokenizer(minilm), text) == HFTokenizer(minilm).encode(text)


def test_release_text_parse_is_the_releases():
    words = "<Strength_3> </ML> <SC> <Strength_1> </SC> <ET> <Strength_0> </ET> <ST> <Strength_-1> </ST>".split(" ")
    assert release_text_values(words) == [3, 1, 0, -1]
    assert release_text_values(["<Strength_3>", "</ML>"]) == [0, 0, 0, 0]  # the release's silent zeros


# ---------------------------------------------------------------------- play


def test_converted_model_plays_saves_and_reopens(release, converted, tmp_path):
    game = Game.load(converted, store=tmp_path / "saves")
    assert type(game.engine).__name__ == "ReleaseEngine" and game.engine.cfg.window == 2
    session = game.new_session(["Qiqi"], seed=5)
    turns = [session.step(CHARACTER), session.step("Character: Qiqi; Motion: slowly walk; Background: day town.")]
    for turn in turns:
        assert turn.frames.shape == (17, SHOT_H, SHOT_W, 3) and 1 <= turn.motion_level <= 5
    assert turns[1].index == 1
    again = game.open_session(session.id)
    assert [t.instruction for t in again.turns] == [CHARACTER, turns[1].instruction]
    assert torch.equal(again.turns[0].s_a, session.turns[0].s_a) and again.states == session.states
    third = again.step("Character: Qiqi; Motion: wave; Background: day town.")  # history read back from the saves
    assert third.index == 2
    assert Game.load(converted, store=tmp_path / "saves", window=1).engine.cfg.window == 1  # the player's window


def test_converted_model_through_http(converted, tmp_path):
    """The HTTP API serves the imported model as it serves any: a game, a turn, its clip."""
    game = Game.load(converted, store=tmp_path / "saves")
    with TestClient(create_app(game, ServeConfig())) as client:
        gid = client.post("/games", json={"characters": ["Qiqi"], "seed": 3}).json()["id"]
        r = client.post(f"/games/{gid}/turns", json={"instruction": CHARACTER})
        assert r.status_code == 201, r.text
        turn = r.json()
        assert 1 <= turn["motion_level"] <= 5 and turn["states_before"] == {"stamina": 50, "social": 50, "entertainment": 50}
        clip = client.get(turn["clip_url"])
        assert clip.status_code == 200 and clip.headers["content-type"] == "video/mp4"


def test_converted_model_plays_a_script(converted, tmp_path):
    story = tmp_path / "story.txt"
    story.write_text(f"# the release's game_demo form\n{CHARACTER}\nCharacter: Qiqi; Motion: gently sit; Background: day town.\n")
    assert main(["play", "--model", str(converted), "--script", str(story), "--out", str(tmp_path / "out"),
                 "--store", str(tmp_path / "saves"), "--window", "1"]) == 0
    assert len(list((tmp_path / "out").glob("*.mp4"))) >= 2


def test_loading_says_when_memory_will_not_hold_it(converted, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(release_import, "available_gib", lambda device: 1e-4)
    with pytest.raises(ReleaseMemoryError, match=r"needs about 0\.\d GiB on cpu .* but 0\.0 GiB is free"):
        Game.load(converted, store=tmp_path / "saves")
    assert "[release] to play: engine" in capsys.readouterr().out  # the estimate comes first


# ---------------------------------------------------------------------- errors


def test_missing_or_mismatched_keys_are_named(release, tmp_path, capsys):
    root = release["root"]
    sd = torch.load(root / "MLLM-Qiqi" / "pytorch_model.bin", weights_only=True)
    gone = "llm.base_model.model.model.layers.1.mlp.down_proj.lora_B.default.weight"
    bad = {k: v for k, v in sd.items() if k != gone}
    (tmp_path / "m1").mkdir()
    torch.save(bad, tmp_path / "m1" / "pytorch_model.bin")
    args = {**release["args"], "mllm": str(tmp_path / "m1")}
    with pytest.raises(ReleaseFormatError, match="missing key 'llm.base_model.model.model.layers.1.mlp.down_proj.lora_B"):
        convert_release(ReleaseImportConfig(**args, out=str(tmp_path / "o1"), height=SHOT_H, width=SHOT_W))
    sd["output_resampler.proj.2.weight"] = torch.zeros(W, W + 1)
    torch.save(sd, tmp_path / "m1" / "pytorch_model.bin")
    with pytest.raises(ReleaseFormatError, match=r"'output_resampler.proj.2.weight' has shape \(16, 17\), expected \(16, 16\)"):
        convert_release(ReleaseImportConfig(**args, out=str(tmp_path / "o1"), height=SHOT_H, width=SHOT_W))
    assert not (tmp_path / "o1").exists()
    # the decoder, through the command line: a clear message and exit status 2
    sat = {"model.diffusion_model." + k: v for k, v in release["sat"].items()}
    sat.pop("model.diffusion_model.mixins.adaln_layer.key_layernorm_list.1.weight")
    torch.save({"module": sat}, tmp_path / "dec.pt")
    argv = ["convert", "release", *(x for k, v in release["args"].items() for x in (f"--{k}", v)),
            "--decoder", str(tmp_path / "dec.pt"), "--out", str(tmp_path / "o2"), "--height", str(SHOT_H),
            "--width", str(SHOT_W)]
    capsys.readouterr()
    assert main(argv) == 2
    assert "missing key 'model.diffusion_model.mixins.adaln_layer.key_layernorm_list.1.weight'" in capsys.readouterr().err
    sat = {"model.diffusion_model." + k: v for k, v in release["sat"].items()} | {"model.diffusion_model.mixins.x.y": torch.zeros(1)}
    torch.save({"module": sat}, tmp_path / "dec.pt")
    assert main(argv) == 2
    assert "unexpected key 'model.diffusion_model.mixins.x.y'" in capsys.readouterr().err
    assert main(argv[:-4] + ["--height", "64", "--width", str(SHOT_W)]) == 2  # a latent the table was not made for
    assert "pos_embedding" in capsys.readouterr().err and not (tmp_path / "o2").exists()


def test_memory_estimate_is_printed_before_loading(release, converted, tmp_path, capsys):
    out = tmp_path / "faithful"
    argv = ["convert", "release", *(x for k, v in release["args"].items() for x in (f"--{k}", v)), "--out", str(out),
            "--height", str(SHOT_H), "--width", str(SHOT_W), "--faithful"]
    capsys.readouterr()
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "[release] to play: engine" in text and text.index("[release]") < text.index("convert release:")
    cfg = json.loads((out / "engine" / "engine.json").read_text())["config"]
    assert (cfg["window"], cfg["query_positions"], cfg["value_decoding"], cfg["decoder_level"]) == \
        (1, "release", "release", "social")
    assert json.loads((out / "shot_decoder" / "shot_decoder.json").read_text())["sampler"]["guidance_schedule"] == "release"
    game = Game.load(out, store=tmp_path / "saves")  # fp16 decoder, bf16 backbone: the release's way plays too
    turn = game.new_session(["Qiqi"], seed=2).step(CHARACTER)
    assert turn.frames.shape == (17, SHOT_H, SHOT_W, 3) and game.engine.backbone.embed_tokens.weight.dtype == torch.bfloat16
    # at the release's size: Mistral-7B and CogVideoX-2B
    mistral = {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 32000}
    m = memory_estimate(mistral, decoder_preset("paper"))
    assert 13.5 < m["engine_gb"] < 15.5 and 6.0 < m["decoder_gb"] < 7.0


# ---------------------------------------------------------------------- on a GPU (skipped where torch sees none)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_converted_model_plays_on_cuda_in_bf16(converted, tmp_path):
    """The imported model on a GPU in bf16, as a user with the real weights would play it: two turns, saved,
    reopened and played on; the game's decisions held to the CPU's (the shots only to their shape: the tiny
    random network's pixels amplify bf16's rounding). ANIMEGAMER_CUDA_REPORT=FILE.json keeps the differences."""
    cpu_game = Game.load(converted, store=tmp_path / "cpu")
    cpu = cpu_game.new_session(["Qiqi"], seed=5)
    cpu_turns = [cpu.step(CHARACTER), cpu.step("Character: Qiqi; Motion: slowly walk; Background: day town.")]
    game = Game.load(converted, store=tmp_path / "saves", device="cuda", precision="bf16")
    assert next(game.engine.parameters()).device.type == "cuda"
    assert next(game.decoder.parameters()).device.type == "cuda"
    session = game.new_session(["Qiqi"], seed=5)
    turns = [session.step(CHARACTER), session.step("Character: Qiqi; Motion: slowly walk; Background: day town.")]
    for turn in turns:
        assert turn.frames.shape == (17, SHOT_H, SHOT_W, 3) and turn.frames.dtype == np.uint8
        assert 1 <= turn.motion_level <= 5 and torch.isfinite(turn.s_a.float()).all()
    again = Game.load(converted, store=tmp_path / "saves", device="cuda", precision="bf16").open_session(session.id)
    assert again.states == session.states
    assert again.step("Character: Qiqi; Motion: wave; Background: day town.").index == 2
    report = {"device": torch.cuda.get_device_name(0),
              "levels_cpu_fp32": [t.motion_level for t in cpu_turns],
              "levels_cuda_bf16": [t.motion_level for t in turns],
              "states_equal": [a.states == b.states for a, b in zip(cpu_turns, turns)],
              "s_a_max_abs_diff": [float((a.s_a.float() - b.s_a.float().cpu()).abs().max())
                                   for a, b in zip(cpu_turns, turns)],
              "frames_mean_abs_diff_of_255": [float(np.abs(a.frames.astype(np.float32) - b.frames).mean())
                                              for a, b in zip(cpu_turns, turns)]}
    print("[release cuda bf16]", json.dumps(report))
    if os.environ.get("ANIMEGAMER_CUDA_REPORT"):
        Path(os.environ["ANIMEGAMER_CUDA_REPORT"]).write_text(json.dumps(report, indent=1))
