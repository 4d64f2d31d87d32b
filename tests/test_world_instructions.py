"""Player instructions: structured form, free-text paraphrases, parser."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from animegamer.world import instructions as ins
from animegamer.world.sessions import plan_session
from animegamer.world.instructions import (
    Action,
    InstructionError,
    motion_text,
    pair_verb_said,
    place_said,
    paraphrase,
    parse_structured,
    render_instruction,
    structured,
    template_ids,
    time_said,
)

NAMES = ["Qiqi", "Mika", "Ren", "Sora"]


def _vocab():
    return ins._vocab()


def _random_action(rng: np.random.Generator, pair: bool | None = None) -> Action:
    v = _vocab()
    verbs = [k for k, m in v.verbs.items() if pair is None or m.pair == pair]
    verb = verbs[int(rng.integers(len(verbs)))]
    first = NAMES[int(rng.integers(len(NAMES)))]
    chars = (first,)
    if v.verbs[verb].pair:
        others = [n for n in NAMES if n != first]
        chars = (first, others[int(rng.integers(len(others)))])
    return Action(
        characters=chars,
        verb=verb,
        adverb=v.adverbs[int(rng.integers(len(v.adverbs)))],
        place=list(v.places)[int(rng.integers(len(v.places)))],
        time=list(v.times)[int(rng.integers(len(v.times)))],
    )


def _phrases(table: dict, key: str, fields: tuple[str, ...]) -> list[str]:
    out = []
    for f in fields:
        for p in table[key][f]:
            for pos in ("her", "his", "their"):
                out.append(p.replace("{pos}", pos).lower())
    return out


# ----------------------------------------------------------------------------- structured


def test_structured_exact():
    a = Action(("Qiqi",), "run", "quickly", "town", "day")
    assert structured(a) == "Character: Qiqi; Motion: quickly run; Background: day town."
    b = Action(("Qiqi", "Mika"), "hug", "happily", "beach", "night")
    assert structured(b) == "Character: Qiqi, Mika; Motion: happily hug; Background: night beach."
    c = Action(("Qiqi",), "run", "", "town", "day")
    assert structured(c) == "Character: Qiqi; Motion: run; Background: day town."
    d = Action(("Qiqi",), "fly_broom", "quickly", "sky", "sunset")
    assert structured(d) == "Character: Qiqi; Motion: quickly fly on broomstick; Background: sunset sky."
    assert motion_text(d) == "quickly fly on broomstick"
    assert motion_text(Action(("Qiqi",), "fly_broom", "", "sky", "day")) == "fly on broomstick"


def test_parse_roundtrip_many():
    rng = np.random.default_rng(1)
    for _ in range(500):
        a = _random_action(rng)
        assert parse_structured(structured(a), NAMES) == a


def test_parse_tolerant():
    a = parse_structured("  character :qiqi ;motion:  QUICKLY   flying on broomstick ;Background: Day Sky ", NAMES)
    assert a == Action(("Qiqi",), "fly_broom", "quickly", "sky", "day")
    b = parse_structured("Characters: Qiqi and Mika; Motion: hug; Background: beach night.", NAMES)
    assert b == Action(("Qiqi", "Mika"), "hug", "", "beach", "night")
    c = parse_structured("Character: Ren; Motion: slowly lie down; Background: night bedroom", NAMES)
    assert c.verb == "lie_down" and c.adverb == "slowly"


@pytest.mark.parametrize("text, needle", [
    ("Character: Qiqi; Background: day town.", "missing field 'Motion'"),
    ("Motion: run; Background: day town.", "missing field 'Character'"),
    ("Character: Qiqi; Motion: run.", "missing field 'Background'"),
    ("Character: Qiqi; Motion: quickly moonwalk; Background: day town.", "unknown motion 'moonwalk'"),
    ("Character: Qiqi; Motion: moonwalk; Background: day town.", "unknown motion"),
    ("Character: Qiqi; Motion: run; Background: day moon.", "unknown place 'moon'"),
    ("Character: Qiqi; Motion: run; Background: town.", "no time of day"),
    ("Character: Bob; Motion: run; Background: day town.", "unknown character 'Bob'"),
    ("Character: Qiqi; Motion: hug; Background: day town.", "needs two characters"),
    ("Character: Qiqi; Colour: red; Motion: run; Background: day town.", "unknown field"),
    ("Qiqi runs in town", "no 'Name:' label"),
    ("", "empty instruction"),
    ("Character: ; Motion: run; Background: day town.", "'Character' is empty"),
])
def test_parse_errors(text, needle):
    with pytest.raises(InstructionError) as e:
        parse_structured(text, NAMES)
    assert needle in str(e.value)


def test_parse_error_lists_options():
    with pytest.raises(InstructionError, match="valid places: sky, town"):
        parse_structured("Character: Qiqi; Motion: run; Background: day moon.", NAMES)
    with pytest.raises(InstructionError, match="known characters: Mika, Qiqi, Ren, Sora"):
        parse_structured("Character: Bob; Motion: run; Background: day town.", NAMES)
    with pytest.raises(InstructionError, match="fly on broomstick"):
        parse_structured("Character: Qiqi; Motion: moonwalk; Background: day town.", NAMES)
    assert issubclass(InstructionError, ValueError)


# ----------------------------------------------------------------------------- templates


def test_template_counts_and_splits():
    train, held = template_ids("train"), template_ids("heldout")
    assert len(train) + len(held) >= 40
    assert not set(train) & set(held)
    share = len(held) / (len(train) + len(held))
    assert 0.15 <= share <= 0.25, share
    with pytest.raises(ValueError):
        template_ids("test")


@pytest.mark.parametrize("split", ins.SPLITS)
def test_every_case_covered(split):
    """Each split has a template for every verb, flags and pronoun knowledge."""
    for verb, (pc, tc), pron in itertools.product(_vocab().verbs, itertools.product([True, False], repeat=2),
                                                  ["she", ("he", "she")]):
        chars = ("Qiqi", "Mika") if _vocab().verbs[verb].pair else ("Qiqi",)
        a = Action(chars, verb, "", "town", "day")
        ids = ins.eligible_templates(a, split, pc, tc, pron)
        assert ids, (verb, pc, tc, pron)
    # pair-specific and place/time-omitting templates exist in both splits
    ts = [t for t in _vocab().templates.values() if t.split == split]
    assert any(t.pair_only for t in ts)
    assert any(t.place_mode == "none" or t.place_mode == "optional" for t in ts)
    assert any(t.time_mode == "none" for t in ts)
    assert any(t.place_mode == "none" and t.time_mode == "none" for t in ts)


def test_paraphrase_deterministic():
    a = Action(("Qiqi",), "run", "quickly", "town", "night")
    out1 = [paraphrase(a, np.random.default_rng(7)) for _ in range(3)]
    assert len(set(out1)) == 1
    r1, r2 = np.random.default_rng(3), np.random.default_rng(3)
    seq1 = [paraphrase(_random_action(r1), r1, place_changed=False) for _ in range(50)]
    seq2 = [paraphrase(_random_action(r2), r2, place_changed=False) for _ in range(50)]
    assert seq1 == seq2
    assert len({t for t, _ in seq1}) > 40  # and varied


def test_paraphrase_properties():
    v = _vocab()
    rng = np.random.default_rng(0)
    used = {"train": set(), "heldout": set()}
    for i in range(4000):
        a = _random_action(rng)
        split = "train" if i % 3 else "heldout"
        pc, tc = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        pron = ["she", "he", "they", ("she", "he")][i % 4]
        text, tid = paraphrase(a, rng, split=split, place_changed=pc, time_changed=tc, pronoun=pron)
        used[split].add(tid)
        t = v.templates[tid]
        assert t.split == split
        assert not t.pair_only or v.verbs[a.verb].pair, (tid, a)
        for name in a.characters:
            assert name in text, (text, a)
        assert "{" not in text and "}" not in text and "[" not in text and "]" not in text, text
        assert "  " not in text and " ," not in text and " ." not in text and ",," not in text, text
        assert text[0].isupper() and text[-1] in ".!?", text
        assert not re.search(r"\ba [aeio]", text, re.I) and not re.search(r"\ban [^aeiouh\W]", text, re.I), text
        low = text.lower()
        places = _phrases(v.places, a.place, ("at", "to"))
        times = _phrases(v.times, a.time, ("at", "np"))
        if pc:
            assert t.place_mode != "none"
            assert any(p in low for p in places), (text, a)
        if tc:
            assert t.time_mode != "none"
            assert any(p in low for p in times), (text, a)
        if not pc and t.place_mode == "none":
            assert not any(p in low for p in places), text
        if not tc and t.time_mode == "none":
            assert not any(re.search(r"\b%s\b" % re.escape(p), low) for p in times), text
        if t.place_mode == "required":
            assert any(p in low for p in places), text
        # the adverb (one of its wordings) is always said
        if a.adverb:
            assert any(w in low for w, _ in v.adverb_words[a.adverb]), (text, a)
    assert used["train"] == set(template_ids("train"))
    assert used["heldout"] == set(template_ids("heldout"))


def test_unchanged_place_is_often_left_out():
    rng = np.random.default_rng(5)
    a = Action(("Qiqi",), "walk", "", "beach", "day")
    places = _phrases(_vocab().places, "beach", ("at", "to"))
    texts = [paraphrase(a, rng, place_changed=False)[0].lower() for _ in range(300)]
    said = [any(p in t for p in places) for t in texts]
    assert 0.1 < np.mean(said) < 0.8


def test_pair_and_group_grammar():
    rng = np.random.default_rng(2)
    pair = Action(("Mika", "Ren"), "hug", "gently", "beach", "night")
    for _ in range(100):
        text, _ = paraphrase(pair, rng, pronoun=("she", "he"))
        assert "Mika" in text and ("Ren" in text)
        assert text.index("Mika") < text.index("Ren") or "Ren is" in text, text
    # a non-pair verb done together: plural agreement
    both = Action(("Mika", "Ren"), "run", "", "town", "day")
    for _ in range(100):
        text, _ = paraphrase(both, rng)
        assert "Mika and Ren" in text
        assert not re.search(r"Mika and Ren (runs|is|sprints|dashes|jogs|wants|decides)\b", text), text
    with pytest.raises(InstructionError, match="two-character"):
        paraphrase(Action(("Mika",), "hug", "", "beach", "night"), rng)


def test_pronoun_used():
    rng = np.random.default_rng(4)
    a = Action(("Ren",), "turn_head", "", "bedroom", "day")
    texts = [paraphrase(a, rng, pronoun="he")[0] for _ in range(200)]
    assert not any(re.search(r"\b(her|she)\b", t, re.I) for t in texts)
    assert any("his head" in t for t in texts)
    texts = [paraphrase(a, rng, pronoun="they")[0] for _ in range(200)]
    assert not any(re.search(r"\bthey (turns|is|looks)\b", t, re.I) for t in texts)


def test_render_instruction_styles():
    rng = np.random.default_rng(9)
    a = Action(("Qiqi",), "dance", "happily", "meadow", "sunset")
    ids = [render_instruction(a, rng)[1] for _ in range(1000)]
    share = ids.count("structured") / len(ids)
    assert 0.28 < share < 0.42
    text, tid = render_instruction(a, rng, style_probs={"structured": 1.0, "free": 0.0})
    assert tid == "structured" and parse_structured(text, NAMES) == a
    text, tid = render_instruction(a, rng, style_probs={"structured": 0.0, "free": 1.0}, split="heldout")
    assert tid in template_ids("heldout")
    with pytest.raises(ValueError):
        render_instruction(a, rng, style_probs={"json": 1.0})


def test_a_verb_of_two_is_found_in_every_wording_the_world_gives_it():
    """The game makes two named characters a pair (subject and partner) when the instruction says a verb of two:
    every rendered instruction of a pair action says its verb; two who do a verb of one are not a pair."""
    rng = np.random.default_rng(0)
    for verb in ("talk_with", "hug", "chase", "play_with"):
        for split in ("train", "heldout"):
            for _ in range(12):
                text, _ = render_instruction(Action(("Qiqi", "Ren"), verb, "happily", "meadow", "day"), rng,
                                             split=split)
                assert pair_verb_said(text) == verb, text
    for text in ("Tomo and Yuki lie down.", "Dance on the grassy hillside in the evening, Yuki and Hana!",
                 "Yuki and Ren sprint on the sand at dusk.", "Character: Qiqi, Ren; Motion: quickly run; "
                 "Background: day town."):
        assert pair_verb_said(text) is None, text


def test_the_place_and_time_an_instruction_names_are_read_and_what_it_leaves_out_did_not_change():
    """The game keeps a scene's place and time where a turn names none (game/session.kept_scene): over world
    sessions, what place_said / time_said read is the turn's own, and where they read nothing it did not change."""
    for split in ("train", "heldout"):
        for index in range(40):
            for t in plan_session(7, index, 6, split=split).turns:
                place, time = place_said(t.instruction), time_said(t.instruction)
                assert place == t.action.place if place else not t.place_changed, t.instruction
                assert time == t.action.time if time else not t.time_changed, t.instruction
    assert place_said("Qiqi walks from the beach into the woods at dusk.") == "forest"  # the last one named
    assert (place_said("Ren reads in his room."), time_said("Ren reads in his room.")) == ("bedroom", None)
    assert (place_said("Qiqi laughs."), time_said("Tonight, Qiqi laughs.")) == (None, "night")
