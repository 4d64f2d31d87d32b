"""The game engine (phase b): an LLM with LoRA that reads the game so far and predicts the next state.

    history turns (instruction, s_a, values) + current instruction
        -> SequenceBuilder ids -> embeddings (base table | new-token table | input resampler(s_a)
           in history query slots | learnable queries in the current turn's slots)
        -> LLM + LoRA under the 4D mask (causal; current queries bidirectional)
        -> output resampler at the current query slots      -> predicted s_a (N, D)
        -> hidden at <ML>/<SC>/<ET>/<ST>, scored against that field's value tokens only
                                                             -> motion level, deltas

Trainable: LoRA on all projections, the new-token embedding table, the current-turn queries and
the two resamplers (``trainable_state_dict``). The base LLM stays frozen and is never saved: it
comes from the backbone registry (``backbones.py``).

New-token embeddings: a separate (n_new, H) table instead of resizing the vocabulary or peft's
``trainable_token_indices``: the checkpoint holds 28 x H numbers instead of a vocab-sized delta,
the frozen base table is untouched (shared with other users of the backbone), and the value
heads are tied to the same table (SmolLM2 and Mistral-style tied scoring, restricted to the
field's valid values, which is also what makes decoding constrained by construction).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer
from torch import nn
from transformers import DynamicCache

from animegamer.core.checkpoint import (
    atomic_dir,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
)
from animegamer.core.runs import ENGINE_CONFIG, ENGINE_WEIGHTS
from animegamer.engine.backbones import cache_kwargs, get_spec, load_causal_lm
from animegamer.engine.sequence import (
    FIELDS,
    IGNORE,
    SequenceBuilder,
    SpecialVocab,
    TurnRecord,
    attention_mask,
    select_window,
    token_words,
)

ENGINE_FORMAT_VERSION = 1
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class EngineConfig:
    backbone: str = "tiny"  # tiny | default | paper (backbones.BACKBONES)
    backbone_path: str | None = None  # local checkpoint dir for "paper"
    backbone_quantize: str | None = None  # None | "8bit" | "4bit": the local backbone's base weights (backbones.py)
    rep_tokens: int = 8  # N: tokens of s_a
    rep_dim: int = 16  # D: width of s_a (the decoder's condition width)
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = LORA_TARGETS
    alpha_mse: float = 1.0  # loss = CE + alpha_mse * MSE
    # + history_level_weight * CE of the motion level at every HISTORY turn's <ML> tag. Each sample
    # then teaches the level once per turn it holds, not only at its target turn (the level is one
    # of four value fields, so at the target it weighs a quarter of the CE). Those positions see the
    # history turn's TRUE s_a in its slots, not the learnt queries. 0 = the target turn only.
    history_level_weight: float = 0.0
    window: int = 5  # history turns seen at play time
    slide: int = 1  # see sequence.select_window
    max_instruction_tokens: int = 64
    states_in_prompt: bool = True  # see SequenceBuilder (deviation from the paper, flagged)
    gradient_checkpointing: bool = False
    autocast_bf16: bool = False  # bf16 autocast in predict (AMX on this CPU); fp32 otherwise
    attn_implementation: str = "sdpa"
    seed: int = 0  # init of the new parts
    # Standardise s_a per (token, dim) inside the engine with statistics of the training data
    # (buffers rep_mean / rep_std, saved with the weights; set_rep_stats). The MSE is then taken in
    # that space (every token and dim weighs the same; LayerNorm outputs of E_a carry large constant
    # offsets), while the engine's inputs and outputs (history s_a, Prediction.s_a) stay in the
    # decoder's space. False = identity (engines saved before this field).
    rep_norm: bool = False
    # Say which motion the next shot shows. The regressed text tokens of s_a score each of these motion texts (the
    # world's, in its order) by their distance to the text's own tokens (buffer motion_table, (K, n_text, D), saved
    # with the weights): logits = -mean squared distance in the standardised space x a learnt scale + a learnt
    # prior, trained with cross-entropy (motion_weight). In play s_a's first n_text tokens are then the chosen
    # text's own tokens. Why: an MSE regression lands between texts where the engine is unsure (play_with read as
    # run) and the animator draws the verb the tokens are nearest; scoring by distance starts from that reading
    # and teaches the margin. () = no scoring: the tokens as regressed (engines saved before this field).
    motion_texts: tuple[str, ...] = ()
    n_text: int = 0  # text tokens at the start of s_a (with motion_texts)
    motion_weight: float = 1.0

    def __post_init__(self) -> None:
        self.lora_targets = tuple(self.lora_targets)
        self.motion_texts = tuple(self.motion_texts)
        checks = {
            "motion_texts": len(set(self.motion_texts)) == len(self.motion_texts),
            "n_text": 0 <= self.n_text <= self.rep_tokens and (self.n_text >= 1 or not self.motion_texts),
            "motion_weight": self.motion_weight >= 0,
            "rep_tokens": self.rep_tokens >= 1, "rep_dim": self.rep_dim >= 1, "lora_rank": self.lora_rank >= 1,
            "alpha_mse": self.alpha_mse >= 0, "window": self.window >= 0,
            "history_level_weight": self.history_level_weight >= 0,
            "slide": 1 <= self.slide <= max(self.window, 1),
            "max_instruction_tokens": self.max_instruction_tokens >= 1,
            "lora_dropout": 0 <= self.lora_dropout < 1,
            "attn_implementation": self.attn_implementation in ("sdpa", "eager"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"EngineConfig.{name} is invalid: got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        d["motion_texts"] = list(self.motion_texts)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EngineConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"EngineConfig got unknown fields {sorted(unknown)}")
        return cls(**d)


ENGINE_PRESETS: dict[str, EngineConfig] = {
    "tiny": EngineConfig(backbone="tiny", rep_tokens=8, rep_dim=16, lora_rank=4, lora_alpha=8.0),
    # the shipped engine's (animegamer/weights/default/engine): s_a of the shipped E_a (70 x 256; a data dir's own
    # N and D win), 3 turns of history, the level taught at every history turn, s_a standardised
    "default": EngineConfig(backbone="default", rep_tokens=70, rep_dim=256, lora_rank=16, lora_alpha=32.0, window=3,
                            history_level_weight=1.0, rep_norm=True),
    "paper": EngineConfig(backbone="paper", rep_tokens=226, rep_dim=1920, lora_rank=32, lora_alpha=64.0,
                          gradient_checkpointing=True),
}


def engine_config(preset: str, **overrides: Any) -> EngineConfig:
    if preset not in ENGINE_PRESETS:
        raise ValueError(f"unknown engine preset {preset!r}; choose one of {sorted(ENGINE_PRESETS)}")
    return EngineConfig.from_dict({**ENGINE_PRESETS[preset].to_dict(), **overrides})


@dataclass
class Prediction:
    s_a: torch.Tensor  # (N, D) float32
    motion_level: int  # 1..5
    deltas: dict[str, int]  # stamina -1|0|1, social 0|1, entertainment 0|1
    probs: list[list[float]] = field(default_factory=list)  # per field, over its valid values
    timings: dict[str, float] = field(default_factory=dict)
    motion_text: str | None = None  # the motion text the engine chose (EngineConfig.motion_texts); None = no head
    # the level the decoder is asked to draw where a model says so apart from motion_level (an imported
    # release played faithfully: engine/release_engine.py); None = motion_level
    decoder_level: int | None = None


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_out))


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool (.., q, k) True=attend -> additive float mask (0 / most negative)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def _fingerprint(turn: TurnRecord) -> str:
    """Content key of a history turn: the KV cache is reused only for identical turns."""
    if turn.s_a is None:
        raise ValueError(f"history turn {turn.instruction!r} has no s_a")
    h = hashlib.blake2b(digest_size=16)
    h.update(turn.instruction.encode("utf-8"))
    h.update(repr(turn.values()).encode())
    h.update(repr(tuple(turn.s_a.shape)).encode())
    h.update(turn.s_a.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


class GameEngine(nn.Module):
    def __init__(self, cfg: EngineConfig, backbone: tuple[nn.Module, Any] | None = None) -> None:
        super().__init__()

        self.cfg = cfg
        lm, tok = backbone if backbone is not None else load_causal_lm(
            get_spec(cfg.backbone, cfg.backbone_path, cfg.backbone_quantize), cfg.attn_implementation)
        self.backbone = lm.model  # the transformer without its LM head: values use tied new-token scoring
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        base_vocab = self.backbone.config.vocab_size
        if tok.vocab_size > base_vocab:
            raise ValueError(f"tokenizer has {tok.vocab_size} tokens but the backbone embeds only {base_vocab}")
        self.tokenizer = tok
        self.vocab = SpecialVocab(base_vocab)
        self.builder = SequenceBuilder(tok, self.vocab, cfg.rep_tokens, cfg.max_instruction_tokens, cfg.states_in_prompt)
        H, N, D = self.backbone.config.hidden_size, cfg.rep_tokens, cfg.rep_dim
        self.hidden_size = H
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(cfg.lora_targets))
        with torch.random.fork_rng(devices=[]):  # seeded init of every new part
            torch.manual_seed(cfg.seed)
            inject_adapter_in_model(lora, self.backbone)
            for name, param in self.backbone.named_parameters():  # adapters on a bf16 base train in fp32
                if "lora_" in name:
                    param.data = param.data.float()
            base = self.backbone.embed_tokens.weight.float()
            std = float(base.std())
            init = torch.stack([base[tok.encode(token_words(t)) or [0]].mean(0) for t in self.vocab.tokens])
            self.new_embed = nn.Embedding(len(self.vocab), H)  # (n_new, H)
            self.new_embed.weight.data.copy_(init + 0.1 * std * torch.randn_like(init))
            self.value_bias = nn.Parameter(torch.zeros(len(self.vocab)))
            self.queries = nn.Parameter(std * torch.randn(N, H))  # (N, H) current-turn query slots
            self.in_resampler = _mlp(D, H, H)  # s_a token -> LLM embedding
            self.out_resampler = _mlp(H, H, D)  # LLM hidden at a query slot -> s_a token
            if cfg.motion_texts:  # scale 10: logit gaps of a few units between texts at unit distances
                self.motion_log_scale = nn.Parameter(torch.tensor(2.3))
                self.motion_bias = nn.Parameter(torch.zeros(len(cfg.motion_texts)))
        if cfg.rep_norm:  # identity until set_rep_stats; persistent: in checkpoints and engine.safetensors
            self.register_buffer("rep_mean", torch.zeros(N, D))
            self.register_buffer("rep_std", torch.ones(N, D))
        if cfg.motion_texts:  # E_a's text tokens of each motion text, decoder space; set_motion_table
            self.register_buffer("motion_table", torch.zeros(len(cfg.motion_texts), cfg.n_text, D))
        if cfg.gradient_checkpointing:
            self.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for f in range(len(FIELDS)):  # new-table rows of field f's value tokens
            self.register_buffer(f"_value_idx{f}", torch.tensor([i - base_vocab for i in self.vocab.value_ids(f)]), persistent=False)
        self.reset_cache()

    # ----------------------------------------------------------------- shared pieces
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """Everything that is trained (LoRA, new embeddings, value bias, queries, resamplers), plus
        the s_a standardisation buffers when ``cfg.rep_norm``."""
        sd = {n: p.detach() for n, p in self.named_parameters() if p.requires_grad}
        return {**sd, **self._saved_buffers()}

    def _saved_buffers(self) -> dict[str, torch.Tensor]:
        """The buffers saved with the trained parts: the s_a statistics and the motion texts' tokens."""
        norm = {"rep_mean": self.rep_mean, "rep_std": self.rep_std} if self.cfg.rep_norm else {}
        return {**norm, **({"motion_table": self.motion_table} if self.cfg.motion_texts else {})}

    def set_motion_table(self, table: torch.Tensor) -> None:
        """E_a's text tokens of each of ``cfg.motion_texts``, (K, n_text, D) in the decoder's space, in that order."""
        shape = (len(self.cfg.motion_texts), self.cfg.n_text, self.cfg.rep_dim)
        if not self.cfg.motion_texts or tuple(table.shape) != shape or not bool(torch.isfinite(table).all()):
            raise ValueError(f"the motion table must be {shape} and finite (an engine with motion_texts), "
                             f"got {tuple(table.shape)}")
        with torch.no_grad():
            self.motion_table.copy_(table)
        self.reset_cache()

    def motion_labels(self, target_rep: torch.Tensor, tol: float = 1e-3) -> torch.Tensor:
        """(B, N, D) target s_a -> (B,) index of the motion text whose tokens its text part is, IGNORE where none
        is (a film's own motion text): the labels come with the targets."""
        n = self.cfg.n_text
        d = torch.cdist(target_rep[:, :n].flatten(1).float(), self.motion_table.flatten(1).float())  # (B, K)
        dist, idx = d.min(dim=1)
        scale = self.motion_table.flatten(1).float().norm(dim=1).mean()
        return torch.where(dist <= tol * scale, idx, torch.full_like(idx, IGNORE))

    def motion_logits(self, pred: torch.Tensor) -> torch.Tensor:
        """(B, N, D) predicted s_a in the standardised space -> (B, K) logits over cfg.motion_texts."""
        n = self.cfg.n_text
        table = self.normalize_rep_text(self.motion_table.float())  # (K, n, D)
        d2 = (pred[:, None, :n].float() - table[None]).pow(2).mean(dim=(2, 3))  # (B, K)
        return -d2 * self.motion_log_scale.exp() + self.motion_bias

    def normalize_rep_text(self, text: torch.Tensor) -> torch.Tensor:
        """(..., n_text, D) text tokens in the decoder's space -> the standardised space."""
        n = self.cfg.n_text
        return (text - self.rep_mean[:n]) / self.rep_std[:n] if self.cfg.rep_norm else text

    def set_rep_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Per-(token, dim) statistics of the training s_a, (N, D) each (std > 0)."""
        if not self.cfg.rep_norm:
            raise ValueError("set_rep_stats needs EngineConfig.rep_norm=True")
        shape = (self.cfg.rep_tokens, self.cfg.rep_dim)
        if tuple(mean.shape) != shape or tuple(std.shape) != shape or not bool((std > 0).all()):
            raise ValueError(f"rep stats must be {shape} with std > 0, got {tuple(mean.shape)}, {tuple(std.shape)}")
        with torch.no_grad():
            self.rep_mean.copy_(mean)
            self.rep_std.copy_(std)
        self.reset_cache()

    def normalize_rep(self, s_a: torch.Tensor) -> torch.Tensor:
        """(..., N, D) decoder-space s_a -> the engine's standardised space (identity without rep_norm)."""
        if not self.cfg.rep_norm:
            return s_a
        return (s_a - self.rep_mean.to(s_a)) / self.rep_std.to(s_a)

    def denormalize_rep(self, z: torch.Tensor) -> torch.Tensor:
        """Inverse of normalize_rep: what the decoder gets."""
        if not self.cfg.rep_norm:
            return z
        return z * self.rep_std.to(z) + self.rep_mean.to(z)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def config_dict(self) -> dict[str, Any]:
        return {"kind": "animegamer-engine", **self.cfg.to_dict()}

    def export_pretrained(self, out_dir: str | Path) -> None:
        write_engine_files(self, out_dir)

    def load_trainable_state_dict(self, sd: dict[str, torch.Tensor], new_motion_head: bool = False) -> None:
        """``new_motion_head``: the weights come from an engine without motion texts (their scale and prior stay
        as initialised, their table to be set: ``set_motion_table``)."""
        want = {n for n, p in self.named_parameters() if p.requires_grad} | set(self._saved_buffers())
        if new_motion_head:
            want -= {"motion_log_scale", "motion_bias", "motion_table"}
        missing, extra = want - set(sd), set(sd) - want
        if missing or extra:
            raise ValueError(f"engine weights do not match: missing={sorted(missing)[:5]} unexpected={sorted(extra)[:5]}")
        params = {**dict(self.named_parameters()), **self._saved_buffers()}
        with torch.no_grad():
            for n, t in sd.items():
                if params[n].shape != t.shape:
                    raise ValueError(f"engine weight {n}: expected {tuple(params[n].shape)}, got {tuple(t.shape)}")
                params[n].copy_(t)
        self.reset_cache()

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) ids over base + new vocab -> (B, L, H)."""
        base_vocab = self.vocab.base_vocab
        is_new = (ids >= base_vocab).unsqueeze(-1)  # (B, L, 1)
        new = self.new_embed((ids - base_vocab).clamp(min=0))  # (B, L, H)
        base = self.backbone.embed_tokens(ids.clamp(max=base_vocab - 1)).to(new.dtype)  # (B, L, H)
        return torch.where(is_new, new, base)

    def value_logits(self, h: torch.Tensor, f: int) -> torch.Tensor:
        """(..., H) hidden at field f's opening tag -> (..., n_values) logits over its valid values only."""
        idx = getattr(self, f"_value_idx{f}")
        return h @ self.new_embed.weight[idx].T + self.value_bias[idx]  # (..., n_values)

    def _run(self, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache=None) -> torch.Tensor:
        """(B, L, H) embeddings, (B, 1, L, past+L) bool mask, (B, L) positions -> (B, L, H) final hidden."""
        own = self.backbone.embed_tokens.weight.dtype  # the backbone's dtype: bf16 at paper scale
        out = self.backbone(inputs_embeds=x.to(own), attention_mask=_additive(mask, own), position_ids=positions,
                            **cache_kwargs(self.backbone, cache))
        return out.last_hidden_state if own == torch.float32 else out.last_hidden_state.float()

    # ----------------------------------------------------------------- training
    def outputs(self, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Teacher-forced outputs: predicted s_a (B, N, D) in the decoder's space (as predict
        returns it) and per field (B, n_values) logits."""
        pred, logits = self._outputs(batch)
        return self.denormalize_rep(pred), logits

    def hidden_states(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced final hidden states: (B, N, H) at the current turn's query slots and
        (B, 4, H) at each field's opening tag (where its value is read)."""
        _, hq, hv = self._hidden(batch)
        return hq, hv

    def _hidden(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As ``hidden_states``, with the whole (B, L, H) final hidden state first."""
        B = batch.input_ids.shape[0]
        N, D = self.cfg.rep_tokens, self.cfg.rep_dim
        x = self.embed(batch.input_ids)  # (B, L, H)
        if batch.rep_index.shape[0]:
            reps = self.normalize_rep(batch.reps.reshape(-1, N, D)).reshape(-1, D)  # (M, D), N rows per history turn
            x = x.index_put((batch.rep_index[:, 0], batch.rep_index[:, 1]),
                            self.in_resampler(reps).to(x.dtype))  # history slots <- (M, H)
        qb, qp = batch.query_index[:, 0], batch.query_index[:, 1]  # (B*N,) b-major, slot order
        x = x.index_put((qb, qp), self.queries.repeat(B, 1).to(x.dtype))  # current slots <- queries
        h = self._run(x, batch.attention_mask, batch.position_ids)  # (B, L, H)
        hv = h[torch.arange(B, device=h.device).unsqueeze(1), batch.value_positions]  # (B, 4, H)
        return h, h[qb, qp].view(B, N, -1), hv

    def _outputs(self, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """As ``outputs``, with the predicted s_a in the engine's standardised space."""
        pred, logits, _ = self._outputs_and_hidden(batch)
        return pred, logits

    def _outputs_and_hidden(self, batch) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        h, hq, hv = self._hidden(batch)
        pred = self.out_resampler(hq)  # (B, N, D)
        return pred, [self.value_logits(hv[:, f], f) for f in range(len(FIELDS))], h  # (B, n_values) each

    def forward(self, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """loss = mean CE over the 4 value fields + alpha_mse * MSE(predicted s_a, target s_a), the
        MSE (and the logged cosine) in the standardised space when ``cfg.rep_norm``; plus
        history_level_weight * CE of the history turns' levels when that weight is set; plus motion_weight * CE
        of the motion text when the engine has the motion head."""
        pred, all_logits, h = self._outputs_and_hidden(batch)
        ces, logs = [], {}
        for f, (name, _, values) in enumerate(FIELDS):
            known = batch.value_targets[:, f] != IGNORE  # a state change a film's annotations left unknown
            if not bool(known.any()):
                continue
            logits, targets = all_logits[f][known], batch.value_targets[known, f]  # (K, n_values), (K,)
            ces.append(F.cross_entropy(logits.float(), targets))
            pick = logits.argmax(-1)
            logs[f"acc_{name}"] = float((pick == targets).float().mean())
            if name != "motion_level":
                vals = torch.tensor(values, dtype=torch.float32, device=pick.device)
                logs[f"mae_{name}"] = float((vals[pick] - vals[targets]).abs().mean())
        ce = torch.stack(ces).mean()
        target = self.normalize_rep(batch.target_rep.float())  # (B, N, D)
        mse = F.mse_loss(pred.float(), target)
        loss = ce + self.cfg.alpha_mse * mse
        hl = batch.history_levels  # (K, 3): batch row, position of a history turn's <ML>, level class
        if self.cfg.history_level_weight > 0 and hl.shape[0]:
            hlog = self.value_logits(h[hl[:, 0], hl[:, 1]], 0).float()  # (K, 5)
            ce_hist = F.cross_entropy(hlog, hl[:, 2])
            loss = loss + self.cfg.history_level_weight * ce_hist
            logs.update(ce_history_level=float(ce_hist.detach()),
                        acc_history_level=float((hlog.argmax(-1) == hl[:, 2]).float().mean()))
        if self.cfg.motion_texts:
            labels = self.motion_labels(batch.target_rep)
            known = labels != IGNORE
            if bool(known.any()):
                mlog = self.motion_logits(pred)[known]
                ce_motion = F.cross_entropy(mlog, labels[known])
                loss = loss + self.cfg.motion_weight * ce_motion
                logs.update(ce_motion=float(ce_motion.detach()),
                            acc_motion=float((mlog.argmax(-1) == labels[known]).float().mean()))
        cos = F.cosine_similarity(pred.detach().float(), target, dim=-1).mean()
        logs.update(loss=float(loss.detach()), ce=float(ce.detach()), mse=float(mse.detach()), cos=float(cos))
        return loss, logs

    # ----------------------------------------------------------------- play
    def merge_lora(self, merged: bool = True) -> None:
        """Fold the LoRA deltas into the frozen weights for play (saves the ~15-20% adapter
        overhead per forward on CPU) or take them out again. Not bit-exact (fp32 rounding), so
        training refuses a merged engine; saving is unaffected (the adapters stay as they are)."""

        for m in self.backbone.modules():
            if isinstance(m, LoraLayer) and bool(m.merged) != merged:
                m.merge() if merged else m.unmerge()
        self._merged = merged
        self.reset_cache()

    def train(self, mode: bool = True) -> "GameEngine":
        if mode and getattr(self, "_merged", False):
            raise RuntimeError("this engine has its LoRA merged for play: call merge_lora(False) before training")
        return super().train(mode)

    def reset_cache(self) -> None:
        """Forget the KV cache (it is also rebuilt automatically whenever the window changes)."""
        self._cache = None
        self._cache_keys: list[str] = []
        self._cache_len = 0

    @torch.no_grad()
    def predict(self, history: list[TurnRecord], instruction: str, states: dict[str, int] | None = None,
                temperature: float = 0.0, generator: torch.Generator | None = None,
                use_cache: bool = True) -> Prediction:
        """Next game state from the history (oldest first) and the player's instruction.

        Sees the history turns chosen by ``select_window(len(history), cfg.window, cfg.slide)``.
        KV reuse: the cache holds the window's history turns (history form, with their s_a); a new
        call computes only the turns not yet cached plus the current turn, provided the cached
        turns are a prefix of the new window (checked by content). When the window slides (its
        first turn changes) the positions of every cached token change, so the cache is rebuilt.
        Decoding is constrained: each field is chosen among its valid values only (greedy, or
        sampled with ``temperature`` > 0), so the result always parses.
        """
        t0 = time.perf_counter()
        if self.training:
            raise RuntimeError("call engine.eval() before predict()")
        start = select_window(len(history), self.cfg.window, self.cfg.slide)
        window = history[start:]
        keys = [_fingerprint(t) for t in window]
        n_cached = len(self._cache_keys)
        if not use_cache or self._cache is None or keys[:n_cached] != self._cache_keys:
            self._cache, self._cache_keys, self._cache_len, n_cached = DynamicCache(), [], 0, 0
        reused = self._cache_len
        N = self.cfg.rep_tokens
        ids: list[int] = []
        rep_pos: list[int] = []
        reps: list[torch.Tensor] = []
        for turn in window[n_cached:]:
            t = self.builder.encode_turn(turn, current=False)
            rep_pos += range(len(ids) + t.query_offset, len(ids) + t.query_offset + N)
            reps.append(turn.s_a)
            ids += t.ids
        hist_new = len(ids)
        cur = self.builder.encode_turn(TurnRecord(instruction, states=states), current=True, with_values=False)
        q0 = hist_new + cur.query_offset  # relative to the new tokens
        ids += cur.ids
        past = self._cache_len
        dev = self.queries.device
        amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.cfg.autocast_bf16)
        with amp:
            x = self.embed(torch.tensor([ids], device=dev))  # (1, L, H)
            if reps:
                s = self.normalize_rep(torch.stack(reps).to(dev, torch.float32)).reshape(-1, self.cfg.rep_dim)  # (H*N, D)
                x = x.index_put((torch.zeros(len(rep_pos), dtype=torch.long, device=dev), torch.tensor(rep_pos, device=dev)),
                                self.in_resampler(s).to(x.dtype))
            x[0, q0:q0 + N] = self.queries.to(x.dtype)
            mask = attention_mask(len(ids), past, (past + q0, past + q0 + N)).to(dev)  # (L, past+L)
            pos = torch.arange(past, past + len(ids), device=dev).unsqueeze(0)  # (1, L)
            h = self._run(x, mask[None, None], pos, self._cache)[0]  # (L, H)
            z = self.out_resampler(h[q0:q0 + N]).float()  # (N, D) standardised: exactly the query slots
            s_a = self.denormalize_rep(z).cpu()
            motion_text = None
            if self.cfg.motion_texts:  # the chosen text's own tokens, not a regression between texts
                k = int(self.motion_logits(z[None]).argmax())
                motion_text = self.cfg.motion_texts[k]
                s_a[:self.cfg.n_text] = self.motion_table[k].float().cpu()
            t1 = time.perf_counter()
            chosen, probs = [], []
            last = h[-1]
            for f in range(len(FIELDS)):
                if f:
                    cont = self.builder.continuation(f - 1, chosen[-1])
                    p0 = past + len(ids)
                    ids += cont
                    hc = self._run(self.embed(torch.tensor([cont], device=dev)), attention_mask(len(cont), p0)[None, None].to(dev),
                                   torch.arange(p0, p0 + len(cont), device=dev).unsqueeze(0), self._cache)
                    last = hc[0, -1]
                logits = self.value_logits(last.float(), f)  # (n_values,) valid values only
                p = torch.softmax(logits / temperature if temperature > 0 else logits, -1)
                c = int(torch.multinomial(p.cpu(), 1, generator=generator)) if temperature > 0 else int(p.argmax())
                chosen.append(c)
                probs.append([float(v) for v in p])
        # Keep only the history turns in the cache: the current turn will be re-entered in its
        # history form (with its s_a) by the next call.
        self._cache_len = past + hist_new
        self._cache.crop(-(past + len(ids) - self._cache_len))  # transformers 5: negative = tokens to drop
        self._cache_keys = keys
        values = [FIELDS[f][2][c] for f, c in enumerate(chosen)]
        deltas = {FIELDS[f][0]: values[f] for f in range(1, len(FIELDS))}
        t2 = time.perf_counter()
        return Prediction(
            s_a=s_a, motion_level=values[0], deltas=deltas, probs=probs, motion_text=motion_text,
            timings={"total_s": t2 - t0, "prefill_s": t1 - t0, "decode_s": t2 - t1,
                     "computed_tokens": float(len(ids)), "reused_tokens": float(reused), "history_turns": float(len(window))},
        )


# --------------------------------------------------------------------- checkpoints


def write_engine_files(engine: GameEngine, out_dir: str | Path, extra: dict[str, Any] | None = None) -> None:
    """engine.json (config, version) + engine.safetensors (trainable parts only) into ``out_dir``.
    Also what the training loop's export calls (``GameEngine.export_pretrained``), so the loop's
    ``final/`` directory loads with ``load_engine``."""

    out_dir = Path(out_dir)
    save_safetensors_atomic(engine.trainable_state_dict(), out_dir / ENGINE_WEIGHTS,
                            metadata={"kind": "animegamer-engine"})
    save_json_atomic({"format_version": ENGINE_FORMAT_VERSION, "kind": "animegamer-engine",
                      "config": engine.cfg.to_dict(), **(extra or {})}, out_dir / ENGINE_CONFIG)


def save_engine(engine: GameEngine, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """The engine's own files, committed atomically as one directory."""

    with atomic_dir(out_dir) as tmp:
        write_engine_files(engine, tmp, extra)
    return Path(out_dir)


def load_engine(path: str | Path, backbone: tuple[nn.Module, Any] | None = None,
                **overrides: Any) -> GameEngine:
    """Rebuild an engine from ``save_engine`` output (the base LLM comes from the registry).
    ``overrides`` change play-time fields such as window, slide or autocast_bf16."""

    path = Path(path)
    meta = load_json(path / ENGINE_CONFIG)
    if meta.get("format_version") != ENGINE_FORMAT_VERSION:
        raise ValueError(f"{path}: engine format {meta.get('format_version')!r}, this code reads {ENGINE_FORMAT_VERSION}")
    cfg = EngineConfig.from_dict({**meta["config"], **overrides})
    engine = GameEngine(cfg, backbone=backbone)
    engine.load_trainable_state_dict(load_safetensors(path / ENGINE_WEIGHTS))
    engine.eval()
    return engine
