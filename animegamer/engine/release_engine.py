"""The published AnimeGamer engine (TencentARC/AnimeGamer, "MLLM-Qiqi"), played in this game.

The release's MLLM is Mistral-7B-Instruct-v0.1 with LoRA (r 32, alpha 32, on q/k/v/o/gate/up/down), its
whole token table and LM head retrained at 32000 + 284 rows (the added tokens: 256 ``<frame_i>``
query tokens, ``<img> </img> <vid> </vid> <frame> </frame>``, ``<Strength_-5..5>``, ``<visual>`` and the
field tags), its RMSNorms retrained (peft ``modules_to_save``), and two resamplers (Linear, GELU, Linear)
between s_a (226 x 1920) and the LLM (4096). ``training/release_import.py`` maps its checkpoint here;
this module is only the model at play time, with the same ``predict`` as ``GameEngine``.

One turn, as the release lays it out (ids of the added tokens are ``base_vocab + offset``, below):

    <s> [history turns] <TURN>{instruction}<img><frame><frame_00000>...<frame_00225></frame></img><ML>

and a history turn is the same with its s_a (input resampler) in the 226 frame slots, followed by
``<ML><Strength_l></ML><SC><Strength_s></SC><ET><Strength_e></ET><ST><Strength_t></ST></TURN>``. The
current turn's frame slots see each other (the release marks them -1 in its attention mask); the
rest is causal.

Where the release's inference differs from its own training layout or from the paper, a switch
(``ReleaseEngineConfig``), the default corrected:
- ``query_positions``: training reads s_a from the 226 frame slots; the release's inference reads
  the LAST 226 hidden states (``hidden_states[-1][:, -226:]``), i.e. slots 3..225 plus
  ``</frame></img><ML>``: three tokens off. "frames" (corrected) | "release".
- ``value_decoding``: the release generates the state text greedily in a second, purely causal pass
  (no bidirectional queries, unlike training), splits it on spaces and reads characters [10:-1] of
  words 0, 3, 6, 9, silently zero when that fails. "constrained" (corrected: each field chosen among
  its valid values from the same pass as s_a) | "release".
- ``history_format``: the release writes ``</ST>`` twice in a history turn (and its window of one
  turn never shows one). "corrected" | "release".
- ``decoder_level``: the release's web demo hands the decoder the SOCIAL delta where the motion level
  belongs (its table then draws social 1 as level 1 and anything else as level 5).
  "motion_level" (corrected) | "social" (``Prediction.decoder_level``).
- ``window``: the release plays with a window of 1 (no history); here the player's choice, its history turns
  kept in a KV cache between turns as ``GameEngine`` keeps them.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer
from torch import nn
from transformers import DynamicCache

from animegamer.core.checkpoint import atomic_dir, load_json, load_safetensors, save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import ENGINE_CONFIG, ENGINE_WEIGHTS
from animegamer.engine.backbones import BackboneSpec, cache_kwargs, load_causal_lm
from animegamer.engine.model import LORA_TARGETS, Prediction
from animegamer.engine.sequence import FIELDS, TurnRecord, attention_mask, select_window

RELEASE_ENGINE_KIND = "animegamer-release-engine"
RELEASE_ENGINE_VERSION = 1
N_ADDED = 284  # rows the release adds to Mistral's 32000 (its tokenizer's added_tokens.json)


def added_token_offsets() -> dict[str, int]:
    """The release's added tokens -> offset from the base vocabulary (32000 for Mistral):
    <frame_00000..00255> 0..255, <img> 256, </img> 257, <vid> 258, </vid> 259, <frame> 260, </frame> 261,
    <Strength_-5..5> 262..272, <visual> 273, <ML> </ML> <SC> </SC> <ET> </ET> <ST> </ST> <TURN> </TURN> 274..283."""
    out = {f"<frame_{i:05d}>": i for i in range(256)}
    for j, t in enumerate(("<img>", "</img>", "<vid>", "</vid>", "<frame>", "</frame>")):
        out[t] = 256 + j
    for v in range(-5, 6):
        out[f"<Strength_{v}>"] = 267 + v
    out["<visual>"] = 273
    for j, t in enumerate(("<ML>", "</ML>", "<SC>", "</SC>", "<ET>", "</ET>", "<ST>", "</ST>", "<TURN>", "</TURN>")):
        out[t] = 274 + j
    assert len(out) == N_ADDED and sorted(out.values()) == list(range(N_ADDED))
    return out


# the release's field order and tags; FIELDS (ours) has the same order: level, social, entertainment, stamina
RELEASE_TAGS = ("ML", "SC", "ET", "ST")
# the release's decoder reads a motion level through this table (its `cuculate_level`); anything but 1..4 is 40
RELEASE_FLOW_BY_LEVEL = (0.5, 2.5, 10.0, 15.0, 40.0)


@dataclass
class ReleaseEngineConfig:
    backbone_path: str = ""  # the local Mistral-7B-Instruct-v0.1 directory (config, weights, tokenizer)
    backbone_dtype: str = "bfloat16"  # the frozen base weights' dtype (the release plays in bf16)
    backbone_quantize: str | None = None  # None | "8bit" | "4bit" (bitsandbytes, a GPU)
    base_vocab: int = 32000
    bos_token_id: int = 1
    rep_tokens: int = 226
    rep_dim: int = 1920
    lora_rank: int = 32
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = LORA_TARGETS
    window: int = 3  # history turns (the release: 1, i.e. none)
    slide: int = 1
    query_positions: str = "frames"  # "frames" | "release" (the three-token shift)
    value_decoding: str = "constrained"  # "constrained" | "release" (free text, split on spaces, zeros on failure)
    history_format: str = "corrected"  # "corrected" | "release" (</ST> twice)
    decoder_level: str = "motion_level"  # "motion_level" | "social" (the release's web demo)
    autocast_bf16: bool = False
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        self.lora_targets = tuple(self.lora_targets)
        choices = {"query_positions": ("frames", "release"), "value_decoding": ("constrained", "release"),
                   "history_format": ("corrected", "release"), "decoder_level": ("motion_level", "social"),
                   "backbone_dtype": ("float32", "bfloat16", "float16"), "attn_implementation": ("sdpa", "eager")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"ReleaseEngineConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("base_vocab", "rep_tokens", "rep_dim", "lora_rank"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ReleaseEngineConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.rep_tokens > 256:
            raise ValueError(f"ReleaseEngineConfig.rep_tokens: the release has 256 <frame_i> tokens, got {self.rep_tokens}")
        if self.window < 0 or not 1 <= self.slide <= max(self.window, 1):
            raise ValueError(f"ReleaseEngineConfig.window/slide invalid: {self.window}/{self.slide}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ReleaseEngineConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"ReleaseEngineConfig got unknown fields {sorted(unknown)}")
        return cls(**d)


# the release's inference, switch by switch (``--faithful``)
RELEASE_FAITHFUL = {"window": 1, "query_positions": "release", "value_decoding": "release",
                    "history_format": "release", "decoder_level": "social"}


def projection(d_in: int, d_out: int) -> nn.Sequential:
    """The release's ProjectionLayer: Linear(d_in, d_out), GELU (exact), Linear(d_out, d_out)."""
    return nn.Sequential(nn.Linear(d_in, d_out), nn.GELU(), nn.Linear(d_out, d_out))


def turn_key(turn: TurnRecord) -> str:
    """Content key of a history turn: the KV cache is reused only for identical turns."""
    if turn.s_a is None:
        raise ValueError(f"history turn {turn.instruction!r} has no s_a")
    h = hashlib.blake2b(digest_size=16)
    h.update(turn.instruction.encode("utf-8"))
    h.update(repr(turn.values()).encode())
    h.update(turn.s_a.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def release_instruction_ids(tokenizer: Any, text: str) -> list[int]:
    """An instruction's ids as the release's tokenizer gives them after ``<TURN>``: its slow LlamaTokenizer
    (tokenizer_config ``legacy: false``, transformers 4.44) starts a segment that follows an added token with NO
    "▁", where Mistral's own tokenizer, encoding the text alone, starts it with one ("▁Character"). For a
    sentencepiece-style BPE tokenizer (Mistral's) that is its BPE model on the text with spaces as "▁" and
    nothing prepended; any other tokenizer encodes as usual."""
    backend = getattr(getattr(tokenizer, "tok", None), "backend_tokenizer", None)
    if backend is None or type(backend.model).__name__ != "BPE" or backend.model.token_to_id("▁") is None:
        return tokenizer.encode(text)
    return [t.id for t in backend.model.tokenize(text.replace(" ", "▁"))]


def release_text_values(words: list[str]) -> list[int]:
    """The release's parse of its generated state text: words 0, 3, 6, 9 (split on spaces), characters
    [10:-1] of each as an int ("<Strength_3>" -> 3); any failure gives all four zero, silently."""
    try:
        return [int(words[i][10:-1]) for i in (0, 3, 6, 9)]
    except (IndexError, ValueError):
        return [0, 0, 0, 0]


class ReleaseEngine(nn.Module):
    """The release's MLLM on a local Mistral; ``predict`` as ``GameEngine.predict``."""

    def __init__(self, cfg: ReleaseEngineConfig, backbone: tuple[nn.Module, Any] | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        if backbone is None:
            spec = BackboneSpec(name="release", kind="local", path=cfg.backbone_path, dtype=cfg.backbone_dtype,
                                quantize=cfg.backbone_quantize)
            backbone = load_causal_lm(spec, cfg.attn_implementation)
        lm, tok = backbone
        self.tokenizer = tok
        self.backbone = lm.model
        if self.backbone.config.vocab_size != cfg.base_vocab:
            raise ValueError(f"{cfg.backbone_path}: the backbone has {self.backbone.config.vocab_size} tokens, the "
                             f"release's checkpoint was made on {cfg.base_vocab}")
        H, V = self.backbone.config.hidden_size, cfg.base_vocab + N_ADDED
        own = self.backbone.embed_tokens.weight
        # the release retrained the whole (resized) table and head: both come from its checkpoint
        self.backbone.embed_tokens = nn.Embedding(V, H, device=own.device, dtype=own.dtype)
        self.lm_head = nn.Linear(H, V, bias=False, device=own.device, dtype=own.dtype)
        inject_adapter_in_model(LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                                           target_modules=list(cfg.lora_targets)), self.backbone)
        for name, p in self.backbone.named_parameters():
            if "lora_" in name:  # adapters stay fp32 over a bf16 base, as GameEngine keeps them
                p.data = p.data.float()
        self.in_resampler = projection(cfg.rep_dim, H)  # s_a token -> LLM embedding
        self.out_resampler = projection(H, cfg.rep_dim)  # LLM hidden -> s_a token
        for p in self.parameters():
            p.requires_grad_(False)
        self.offsets = added_token_offsets()
        self.reset_cache()

    # ------------------------------------------------------------------ weights
    def weight_names(self) -> list[str]:
        """What a converted engine stores: the table, head, norms, adapters and resamplers (not the base
        projections, which come from the user's Mistral)."""
        keep = ("embed_tokens.", "lm_head.", "layernorm.", "norm.", "lora_", "in_resampler.", "out_resampler.")
        return [n for n, _ in self.named_parameters() if any(k in n for k in keep)]

    def release_state_dict(self) -> dict[str, torch.Tensor]:
        params = dict(self.named_parameters())
        return {n: params[n].detach() for n in self.weight_names()}

    def load_release_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        want = set(self.weight_names())
        missing, extra = sorted(want - set(sd)), sorted(set(sd) - want)
        if missing or extra:
            raise ValueError(f"release engine weights do not match: missing {missing[:5]}, unexpected {extra[:5]}")
        params = dict(self.named_parameters())
        with torch.no_grad():
            for n, t in sd.items():
                if params[n].shape != t.shape:
                    raise ValueError(f"release engine weight {n}: expected {tuple(params[n].shape)}, got {tuple(t.shape)}")
                params[n].copy_(t)
        self.reset_cache()

    def merge_lora(self, merged: bool = True) -> None:
        """Fold the adapters into the base weights for play (or take them out again)."""
        for m in self.backbone.modules():
            if isinstance(m, LoraLayer) and bool(m.merged) != merged:
                m.merge() if merged else m.unmerge()
        self.reset_cache()

    def reset_cache(self) -> None:
        """Forget the KV cache (it is also rebuilt whenever the window's turns change)."""
        self._cache: DynamicCache | None = None
        self._cache_keys: list[str] = []
        self._cache_len = 0

    # ------------------------------------------------------------------ the sequence
    def tok(self, name: str) -> int:
        return self.cfg.base_vocab + self.offsets[name]

    def frame_ids(self) -> list[int]:
        return [self.tok("<img>"), self.tok("<frame>"), *(self.tok(f"<frame_{i:05d}>") for i in range(self.cfg.rep_tokens)),
                self.tok("</frame>"), self.tok("</img>")]

    def value_tokens(self, values: list[int]) -> list[int]:
        """A history turn's state tokens (level, social, entertainment, stamina), then </TURN>."""
        ids: list[int] = []
        for tag, v in zip(RELEASE_TAGS, values):
            ids += [self.tok(f"<{tag}>"), self.tok(f"<Strength_{int(v)}>"), self.tok(f"</{tag}>")]
        if self.cfg.history_format == "release":
            ids.append(self.tok("</ST>"))
        return ids + [self.tok("</TURN>")]

    def sequence(self, turns: list[TurnRecord], instruction: str, bos: bool = True) -> tuple[list[int], list[int], int, int]:
        """(ids, history slot positions (N per history turn, oldest first), first current query slot, first id of the
        current turn), positions counted from the first of these ids: ``<s>`` when ``bos``, else the cached prefix's end."""
        N = self.cfg.rep_tokens
        ids, slots = ([self.cfg.bos_token_id] if bos else []), []
        for turn in turns:
            ids += [self.tok("<TURN>"), *release_instruction_ids(self.tokenizer, turn.instruction)]
            slots += range(len(ids) + 2, len(ids) + 2 + N)  # after <img><frame>
            ids += self.frame_ids()
            values = turn.values()
            if any(v is None for v in values):
                raise ValueError(f"history turn {turn.instruction!r} has unknown state values {values}")
            ids += self.value_tokens(values)
        current = len(ids)
        ids += [self.tok("<TURN>"), *release_instruction_ids(self.tokenizer, instruction)]
        q0 = len(ids) + 2
        ids += self.frame_ids() + [self.tok("<ML>")]
        return ids, slots, q0, current

    def _run(self, x: torch.Tensor, mask: torch.Tensor, cache=None, past: int = 0) -> torch.Tensor:
        """(1, L, H) embeddings, bool (L, past + L) mask -> (L, H) final hidden states (float32)."""
        dtype = self.backbone.embed_tokens.weight.dtype
        additive = torch.zeros(mask.shape, dtype=dtype, device=x.device).masked_fill(~mask.to(x.device),
                                                                                     torch.finfo(dtype).min)
        pos = torch.arange(past, past + x.shape[1], device=x.device).unsqueeze(0)
        out = self.backbone(inputs_embeds=x.to(dtype), attention_mask=additive[None, None], position_ids=pos,
                            **cache_kwargs(self.backbone, cache))
        return out.last_hidden_state[0].float()

    def _embed(self, ids: list[int], slots: list[int], history_s_a: list[torch.Tensor]) -> torch.Tensor:
        dev = self.lm_head.weight.device
        x = self.backbone.embed_tokens(torch.tensor([ids], device=dev)).float()  # (1, L, H)
        if slots:
            s = torch.stack(history_s_a).to(dev, torch.float32).reshape(-1, self.cfg.rep_dim)  # (T * N, D)
            x[0, slots] = self.in_resampler(s.to(self.in_resampler[0].weight.dtype)).float()
        return x

    # ------------------------------------------------------------------ play
    @torch.no_grad()
    def predict(self, history: list[TurnRecord], instruction: str, states: dict[str, int] | None = None,
                temperature: float = 0.0, generator: torch.Generator | None = None,
                use_cache: bool = True) -> Prediction:
        """The next game state. ``states`` is not shown to the release's model (its layout has none).

        KV reuse as ``GameEngine.predict``: the cache keeps ``<s>`` and the window's history turns; a call computes
        only the history turns not cached yet and the current turn, while the cached turns are a prefix of the new
        window (checked by content). The release's text decoding (a causal pass of its own) is computed whole.
        """
        t0 = time.perf_counter()
        cfg, N = self.cfg, self.cfg.rep_tokens
        window = history[select_window(len(history), cfg.window, cfg.slide):]
        keys = [turn_key(t) for t in window]
        reuse = use_cache and cfg.value_decoding == "constrained"
        n = len(self._cache_keys)
        if not reuse or self._cache is None or keys[:n] != self._cache_keys:
            self._cache, self._cache_keys, self._cache_len, n = None, [], 0, 0
        past = self._cache_len
        ids, slots, q0, current = self.sequence(window[n:], instruction, bos=past == 0)
        cache = self._cache if self._cache is not None else (DynamicCache() if cfg.value_decoding == "constrained" else None)
        dev = self.lm_head.weight.device
        amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.autocast_bf16)
        with amp:
            x = self._embed(ids, slots, [t.s_a for t in window[n:]])  # (1, L, H): the new tokens only
            L = len(ids)
            h = self._run(x, attention_mask(L, past, (past + q0, past + q0 + N)), cache, past)  # current slots see each other
            at = range(q0, q0 + N) if cfg.query_positions == "frames" else range(L - N, L)
            s_a = self.out_resampler(h[list(at)].to(self.out_resampler[0].weight.dtype)).float().cpu()  # (N, D)
            t1 = time.perf_counter()
            if cfg.value_decoding == "constrained":
                values, probs = self._constrained_values(h[-1], past + L, cache, temperature, generator)
            else:
                full, full_slots, *_ = self.sequence(window, instruction)
                values, probs = self._release_text_values(self._embed(full, full_slots, [t.s_a for t in window]), full), []
        if reuse:  # keep <s> and the history turns: the current one comes back next turn in its history form
            drop = cache.get_seq_length() - (past + current)
            if drop:
                cache.crop(-drop)  # transformers 5: a negative count of tokens to drop
            self._cache, self._cache_keys, self._cache_len = cache, keys, past + current
        decoder_level = None
        if cfg.decoder_level == "social":  # the release's table: 1 -> 0.5 (level 1's), anything else -> 40 (level 5's)
            decoder_level = 1 if values[1] == 1 else 5
        t2 = time.perf_counter()
        deltas = {FIELDS[f][0]: values[f] for f in range(1, len(FIELDS))}
        return Prediction(s_a=s_a, motion_level=values[0], deltas=deltas, probs=probs, decoder_level=decoder_level,
                          timings={"total_s": t2 - t0, "prefill_s": t1 - t0, "decode_s": t2 - t1,
                                   "computed_tokens": float(L), "reused_tokens": float(past),
                                   "history_turns": float(len(window))})

    def _constrained_values(self, last: torch.Tensor, past: int, cache: DynamicCache, temperature: float,
                            generator: torch.Generator | None) -> tuple[list[int], list[list[float]]]:
        """Each field among its valid values (lm_head rows of their <Strength_v> tokens), one after the other,
        going on from the KV cache of the pass that gave s_a (bidirectional current queries, as trained):
        ``last`` is its hidden state at <ML>, ``past`` its length."""
        dev = last.device
        values, probs = [], []
        for f, (_, _, valid) in enumerate(FIELDS):
            if f:
                cont = [self.tok(f"<Strength_{values[-1]}>"), self.tok(f"</{RELEASE_TAGS[f - 1]}>"),
                        self.tok(f"<{RELEASE_TAGS[f]}>")]
                xc = self.backbone.embed_tokens(torch.tensor([cont], device=dev)).float()
                last = self._run(xc, attention_mask(len(cont), past), cache, past)[-1]
                past += len(cont)
            rows = torch.tensor([self.tok(f"<Strength_{v}>") for v in valid], device=dev)
            logits = last.to(self.lm_head.weight.dtype) @ self.lm_head.weight[rows].T  # (n_values,)
            p = torch.softmax(logits.float() / temperature if temperature > 0 else logits.float(), -1)
            c = int(torch.multinomial(p.cpu(), 1, generator=generator)) if temperature > 0 else int(p.argmax())
            values.append(valid[c])
            probs.append([float(v) for v in p])
        return values, probs

    def _release_text_values(self, x: torch.Tensor, ids: list[int]) -> list[int]:
        """The release: greedy text over the whole vocabulary from a CAUSAL pass (its generate() has no mask),
        12 tokens, parsed as the release parses it. A level it cannot read is drawn as level 5 (its decoder's
        table maps 0 to 40, level 5's); deltas outside this game's values count as 0. ``x`` (1, L, H): the
        embeddings of the whole sequence ``ids``."""
        cache, L = DynamicCache(), len(ids)
        last, past, words = self._run(x, attention_mask(L), cache)[-1], L, []
        inverse = {v: k for k, v in self.offsets.items()}
        # its generate() runs AutoVideoTokenGenerationProcessor(num_vid_gen_tokens=100): after <frame> or
        # <frame_i> the next of <frame> <frame_00000..00099> </frame> is forced; otherwise those (but <frame>)
        # get the logit 0 (not -inf: they win where every other logit is negative)
        video = [self.tok("<frame>"), *(self.tok(f"<frame_{i:05d}>") for i in range(100)), self.tok("</frame>")]
        prev = ids[-1]
        for _ in range(12):
            scores = (last.to(self.lm_head.weight.dtype) @ self.lm_head.weight.T).float()  # (V,)
            if prev in video[:-1]:
                scores[video[video.index(prev) + 1]] = scores.max() + 10.0
            else:
                scores[video[1:]] = 0.0
            nxt = prev = int(scores.argmax())
            if nxt >= self.cfg.base_vocab:
                words.append(inverse[nxt - self.cfg.base_vocab])
            else:
                words.append(self.tokenizer.decode([nxt]).strip() or "?")
            xc = self.backbone.embed_tokens(torch.tensor([[nxt]], device=x.device)).float()
            last = self._run(xc, attention_mask(1, past), cache, past)[-1]
            past += 1
        level, *deltas = release_text_values(words)
        out = [level if level in FIELDS[0][2] else 5]
        for f, v in enumerate(deltas, start=1):
            out.append(v if v in FIELDS[f][2] else 0)
        return out


# ---------------------------------------------------------------------- files


def is_release_engine(path: str | Path) -> bool:
    config = Path(path) / ENGINE_CONFIG
    return config.is_file() and load_json(config).get("kind") == RELEASE_ENGINE_KIND


def save_release_engine(engine: ReleaseEngine, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """engine.json (kind, version, config) + engine.safetensors, committed as one directory."""
    with atomic_dir(out_dir) as tmp:
        save_safetensors_atomic(engine.release_state_dict(), tmp / ENGINE_WEIGHTS, metadata={"kind": RELEASE_ENGINE_KIND})
        save_json_atomic({"format_version": RELEASE_ENGINE_VERSION, "kind": RELEASE_ENGINE_KIND,
                          "config": engine.cfg.to_dict(), **(extra or {})}, tmp / ENGINE_CONFIG)
    return Path(out_dir)


def load_release_engine(path: str | Path, backbone: tuple[nn.Module, Any] | None = None,
                        **overrides: Any) -> ReleaseEngine:
    """A converted release engine; ``overrides`` change play-time fields (window, backbone_quantize, the switches)."""
    path = Path(path)
    meta = load_json(path / ENGINE_CONFIG)
    if meta.get("kind") != RELEASE_ENGINE_KIND or meta.get("format_version") != RELEASE_ENGINE_VERSION:
        raise ValueError(f"{path}: not a converted release engine v{RELEASE_ENGINE_VERSION} "
                         f"(kind {meta.get('kind')!r}, version {meta.get('format_version')!r})")
    cfg = ReleaseEngineConfig.from_dict({**meta["config"], **overrides})
    engine = ReleaseEngine(cfg, backbone=backbone)
    engine.load_release_state_dict(load_safetensors(path / ENGINE_WEIGHTS))
    return engine.eval()
