"""`animegamer annotate DATA --vlm DIR --out FILE.csv`: a local vision-language model looks at each
ingested clip and answers the paper's questions (who is on screen, what they do, where, when), written
as the annotation file `ingest --annotations` applies.

The paper annotates its clips with InternVL. Here any chat VLM that transformers loads from a local
directory (``AutoProcessor`` + ``AutoModelForImageTextToText``: LLaVA, Qwen2-VL, InternVL in
transformers' format, ...) is asked one question about the clip's middle frame, in four lines
("Characters: / Motion: / Place: / Time:"). An answer is parsed line by line; what it does not say, or
says in a form that cannot be read (a time that is not day, sunset or night; with ``characters``, a
name not among them) stays empty, that is unknown: nothing is invented. State changes are not asked
(a still frame does not show them). The file is a completed template: a person reviews it, corrects
it, then runs ``animegamer ingest VIDEO... --out DATA --annotations FILE``.

Nothing downloads: the model directory must be local, and it runs on ``--device`` (a GPU where there
is one).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm
from transformers import AutoModelForImageTextToText, AutoProcessor

from animegamer.core.devices import resolve_device
from animegamer.ingest.annotations import write_template
from animegamer.ingest.video import IngestError
from animegamer.world.dataset import WorldDataset

FIELDS = ("characters", "motion_text", "place", "time")
TIMES = {"day": "day", "daytime": "day", "morning": "day", "noon": "day", "afternoon": "day", "midday": "day",
         "sunset": "sunset", "evening": "sunset", "dusk": "sunset", "dawn": "sunset", "sunrise": "sunset",
         "twilight": "sunset", "night": "night", "midnight": "night", "nighttime": "night"}
UNKNOWN = {"", "unknown", "none", "n/a", "?", "-", "not sure", "unclear", "nobody", "no one"}
MAX_FIELD = {"motion_text": 60, "place": 40}


def question(names: list[str] | None = None) -> str:
    who = f" (among: {', '.join(names)})" if names else ""
    return ("This is a frame of an animated film. Answer in exactly four lines:\n"
            f"Characters: the names of the characters on screen{who}\n"
            "Motion: what they are doing, in a few words\n"
            "Place: where it happens, in one or two words\n"
            "Time: day, sunset or night")


def parse_answer(text: str, names: list[str] | None = None) -> dict[str, Any]:
    """The fields a VLM's answer states in the asked form; a field it does not state readably is absent.
    ``names``: the characters that may appear (others are not taken)."""
    said: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = re.sub(r"[^a-z]", "", key.lower())
        if sep and key in ("characters", "character", "motion", "place", "time", "background"):
            said.setdefault({"character": "characters", "background": "place"}.get(key, key), value.strip(" .*\t"))
    out: dict[str, Any] = {}
    chars = said.get("characters", "")
    if chars.lower() not in UNKNOWN:
        if names:
            found = [n for n in names if re.search(rf"\b{re.escape(n)}\b", chars, flags=re.IGNORECASE)]
        else:
            found = [c.strip() for c in re.split(r",|;|&|\band\b", chars) if c.strip()]
            found = [c for c in found if len(c) <= 40][:4]
        if found:
            out["characters"] = found
    for key, field in (("motion", "motion_text"), ("place", "place")):
        value = said.get(key, "").lower()
        if value not in UNKNOWN and len(value) <= MAX_FIELD[field]:
            out[field] = value
    words = re.findall(r"[a-z]+", said.get("time", "").lower())
    times = {TIMES[w] for w in words if w in TIMES}
    if len(times) == 1:  # "day or night" says nothing
        out["time"] = times.pop()
    return out


@dataclass
class VlmAnnotator:
    """A local chat VLM and its processor; ``ask`` answers the question about one frame (greedy)."""

    processor: Any
    model: Any
    max_new_tokens: int = 64

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> VlmAnnotator:
        path = Path(path).expanduser()
        if not (path / "config.json").is_file():
            raise IngestError(f"{path}: no config.json; give a local vision-language model directory that "
                              "transformers loads (AutoModelForImageTextToText + its processor)")
        try:
            processor = AutoProcessor.from_pretrained(path, local_files_only=True)
            model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, KeyError) as e:
            raise IngestError(f"{path}: transformers cannot load a vision-language model from it ({e})") from None
        return cls(processor, model.to(resolve_device(device)).eval())

    @torch.no_grad()
    def ask(self, frame: np.ndarray, text: str) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        prompt = self.processor.apply_chat_template(messages, add_generation_prompt=True)
        inputs = self.processor(images=Image.fromarray(frame), text=prompt, return_tensors="pt").to(self.model.device)
        out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        return self.processor.decode(out[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def annotate(data: str | Path, annotator: VlmAnnotator, out: str | Path, names: list[str] | None = None,
             limit: int | None = None, progress: bool = True,
             who: Callable[[np.ndarray], list[str]] | None = None) -> dict[str, Any]:
    """Ask about every clip of an ingested dataset (its middle frame) and write the annotation file.
    ``who``: names the characters of a clip (its frames) instead of the model's answer (reference pictures)."""
    world = WorldDataset(data)
    rows = world.rows[: limit or None]
    if not rows or "source" not in rows[0]:
        raise IngestError(f"{data}: not an ingested dataset (animegamer ingest writes one)")
    text = question(names)
    done, answers = [], []
    for row in tqdm(rows, desc="annotate", unit="clip", disable=not progress, dynamic_ncols=True):
        frames = world.frames(row)
        answer = annotator.ask(frames[len(frames) // 2], text)
        fields = parse_answer(answer, names)
        if who is not None:
            fields["characters"] = who(frames)
        done.append({**row, **fields})
        answers.append(fields)
    write_template(out, done)
    return {"clips": len(rows), "answered": sum(bool(a) for a in answers),
            **{f: sum(f in a for a in answers) for f in FIELDS}, "out": str(out)}
