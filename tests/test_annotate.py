"""`animegamer annotate` (ingest/vlm.py): the answer parser on known answers, and a tiny random
vision-language model of a class transformers ships (LLaVA) asked about every clip of an ingested film;
its file goes back through `ingest --annotations`."""
from __future__ import annotations

import csv

import pytest
import torch
from transformers import (AutoTokenizer, CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                          LlavaForConditionalGeneration, LlavaProcessor)

from animegamer.cli import main
from animegamer.ingest.bench import world_film
from animegamer.ingest.annotations import read_annotations
from animegamer.ingest.build import IngestConfig, ingest
from animegamer.ingest.vlm import VlmAnnotator, parse_answer
from animegamer.models.text_encoder import minilm_path
from animegamer.world.dataset import RenderConfig, WorldDataset, render_dataset

torch.set_num_threads(1)
NAMES = ["Qiqi", "Ren"]


def test_parse_answer_takes_what_is_said_and_nothing_else():
    full = "Characters: Qiqi and Ren\nMotion: Quickly run\nPlace: Town\nTime: in the evening."
    assert parse_answer(full, NAMES) == {"characters": ["Qiqi", "Ren"], "motion_text": "quickly run",
                                         "place": "town", "time": "sunset"}
    assert parse_answer(full) == {"characters": ["Qiqi", "Ren"], "motion_text": "quickly run", "place": "town",
                                  "time": "sunset"}  # no names given: the names as said
    assert parse_answer("**Character:** Mika\nBackground: beach\nTime: morning", NAMES) == {"place": "beach",
                                                                                         "time": "day"}
    assert parse_answer("Characters: unknown\nMotion: none\nTime: day or night") == {}
    assert parse_answer("a girl runs along the beach at night") == {}  # not the asked form: nothing is guessed
    assert parse_answer("Place: " + "very " * 20 + "far") == {}  # too long for a place


@pytest.fixture(scope="module")
def film_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("annotate")
    render_dataset(RenderConfig(sessions=2, turns=2, seed=81, workers=1), root / "world", progress=False)
    world_film(WorldDataset(root / "world"), root / "film.mp4")
    ingest([root / "film.mp4"], root / "data", IngestConfig(session_turns=2), progress=False)
    tok = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)  # any tokenizer serves a test
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    template = ("{% for m in messages %}{{ m['role'] }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}"
                "<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant:{% endif %}")
    processor = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                  crop_size={"height": 32, "width": 32}),
                               tokenizer=tok, patch_size=8, num_additional_image_tokens=1,
                               vision_feature_select_strategy="default", chat_template=template)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                       image_size=32, patch_size=8),
        text_config=LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=4, num_key_value_heads=2),
        image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
    )).save_pretrained(root / "vlm")
    processor.save_pretrained(root / "vlm")
    return root


def test_a_local_vlm_annotates_every_clip(film_data, capsys):
    root = film_data
    clips = len(WorldDataset(root / "data").rows)
    out = root / "vlm_notes.csv"
    assert main(["annotate", str(root / "data"), "--vlm", str(root / "vlm"), "--out", str(out),
                 "--characters", "Qiqi,Ren", "--max-new-tokens", "8", "--no-progress"]) == 0
    assert f"{clips} clips asked" in capsys.readouterr().out
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == clips and all(r["clip"] and r["motion_level"] for r in rows)
    # a random model's words are not the asked form: its fields stay empty rather than invented
    assert all(not r["characters"] and not r["time"] for r in rows)


def test_answers_become_annotations_ingest_applies(film_data, monkeypatch):
    root = film_data
    monkeypatch.setattr(VlmAnnotator, "ask", lambda self, frame, text: (
        "Characters: Qiqi\nMotion: wave happily\nPlace: meadow\nTime: night" if "Qiqi, Ren" in text else ""))
    out = root / "answered.csv"
    assert main(["annotate", str(root / "data"), "--vlm", str(root / "vlm"), "--out", str(out),
                 "--characters", "Qiqi,Ren", "--no-progress"]) == 0
    notes = read_annotations(out)
    assert notes and all(n["sets"] == {"characters": ["Qiqi"], "motion_text": "wave happily", "place": "meadow",
                                       "time": "night"} for n in notes)
    assert main(["ingest", str(root / "film.mp4"), "--out", str(root / "data"), "--annotations", str(out),
                 "--session-turns", "2", "--no-progress"]) == 0
    data = WorldDataset(root / "data")
    assert all(r["characters"] == ["Qiqi"] and r["instruction"].startswith("Character: Qiqi; Motion: wave happily")
               for r in data.rows)


def test_annotate_says_what_is_wrong(film_data, capsys):
    root = film_data
    assert main(["annotate", str(root / "data"), "--vlm", str(root / "world"), "--out", str(root / "x.csv")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["annotate", str(root / "world"), "--vlm", str(root / "vlm"), "--out", str(root / "x.csv")]) == 2
    assert "not an ingested dataset" in capsys.readouterr().err
    assert not (root / "x.csv").exists()
