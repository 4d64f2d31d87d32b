"""Player instructions of the synthetic world: the structured form, free-text paraphrases, a parser.

A turn's ground-truth :class:`Action` (characters, verb key, adverb, place key, time of day) is
written the way a player would type it:

- the release's structured form, ``Character: Qiqi; Motion: quickly run; Background: day town.``
  (:func:`structured`, parsed back by :func:`parse_structured`);
- a free-text paraphrase from one of the templates of ``data/templates.yaml``
  (:func:`paraphrase`), e.g. "Make Qiqi dash through downtown at night, fast!". Templates are
  split into ``train`` and ``heldout`` (~20%) so the engine can be evaluated on phrasings it
  never saw. A template may leave the place / time out only when it did not change since the
  previous turn (the caller says so with ``place_changed`` / ``time_changed``).

:func:`render_instruction` picks one of the two styles. Everything random goes through the
caller's ``numpy.random.Generator``, so a seed fixes the text.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

DATA_DIR = Path(__file__).resolve().parent / "data"
SPLITS = ("train", "heldout")
PRONOUNS = {  # subject -> (object, possessive, plural agreement)
    "she": ("her", "her", False),
    "he": ("him", "his", False),
    "they": ("them", "their", True),
}
DEFAULT_STYLE_PROBS = {"structured": 0.35, "free": 0.65}
FORMAT_HELP = "expected 'Character: <name>[, <name>]; Motion: [adverb] <motion>; Background: <time> <place>.'"


class InstructionError(ValueError):
    """A malformed instruction (or an action that cannot be written as one)."""


@dataclass(frozen=True)
class Action:
    """The ground truth of one turn. ``adverb`` "" means none; ``characters[1]`` is the partner."""

    characters: tuple[str, ...]
    verb: str
    adverb: str
    place: str
    time: str


# --------------------------------------------------------------------------- vocabulary


@dataclass(frozen=True)
class _Verb:
    key: str
    phrase: str  # structured form ("fly on broomstick")
    s: str
    ing: str
    pair: bool
    text: str  # free-text plain wording ("fly on a broomstick")
    synonyms: tuple[str, ...]
    intros: tuple[str, ...]


@dataclass(frozen=True)
class _Template:
    id: str
    split: str
    text: str
    slots: frozenset[str]
    optional_slots: frozenset[str]
    pair_only: bool
    needs_other_pronoun: bool
    needs_intro: bool
    place_mode: str  # "none" | "optional" | "required"
    time_mode: str


@dataclass(frozen=True)
class _Vocab:
    verbs: dict[str, _Verb]
    adverbs: tuple[str, ...]  # adverb keys of motions.yaml ("" included)
    adverb_words: dict[str, tuple[tuple[str, str], ...]]  # adverb -> ((text, pos), ...)
    places: dict[str, dict[str, tuple[str, ...]]]
    times: dict[str, dict[str, tuple[str, ...]]]
    conflicts: dict[str, frozenset[str]]
    templates: dict[str, _Template]
    params: dict[str, float]


_SLOT_RE = re.compile(r"\{(\w+)\}")
_GROUP_RE = re.compile(r"\[([^\[\]]*)\]")
_PLACE_SLOTS = {"place", "place_to"}
_TIME_SLOTS = {"time", "time_np"}
_ADV_VERB_SLOTS = {"vp", "vps", "vpp", "vping", "vp_o", "vps_o", "vpp_o", "vping_o"}
_ADV_SLOTS = {"adv_front", "adv_end"}
_KNOWN_SLOTS = (_PLACE_SLOTS | _TIME_SLOTS | _ADV_VERB_SLOTS | _ADV_SLOTS
                | {"subj", "be", "s", "pron", "pobj", "pos", "pbe", "v", "vs", "ving", "other", "intro"})


def _load_yaml(name: str) -> dict[str, Any]:
    with open(DATA_DIR / name, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _parse_template(raw: Mapping[str, Any]) -> _Template:
    tid, split, text = str(raw["id"]), str(raw["split"]), str(raw["text"])
    if split not in SPLITS:
        raise ValueError(f"template {tid!r}: split must be one of {SPLITS}, got {split!r}")
    if text.count("[") != text.count("]") or re.search(r"\[[^\]]*\[", text):
        raise ValueError(f"template {tid!r}: unbalanced or nested [ ] groups")
    slots = set(_SLOT_RE.findall(text))
    unknown = slots - _KNOWN_SLOTS
    if unknown:
        raise ValueError(f"template {tid!r}: unknown slots {sorted(unknown)}; known: {sorted(_KNOWN_SLOTS)}")
    optional = set()
    for group in _GROUP_RE.findall(text):
        optional |= set(_SLOT_RE.findall(group))
    required = set(_SLOT_RE.findall(_GROUP_RE.sub("", text)))
    if "subj" not in slots:
        raise ValueError(f"template {tid!r} never names the character ({{subj}})")
    all_slots = _SLOT_RE.findall(text)
    if sum(1 for x in all_slots if x in _ADV_VERB_SLOTS | _ADV_SLOTS) != 1:
        raise ValueError(f"template {tid!r} must carry the adverb exactly once "
                         f"(one of {sorted(_ADV_VERB_SLOTS | _ADV_SLOTS)})")
    if slots & _ADV_SLOTS and slots & _ADV_SLOTS & required:
        raise ValueError(f"template {tid!r}: {{adv_front}}/{{adv_end}} must be inside [ ] (the adverb may be empty)")
    if slots & _ADV_SLOTS and not slots & {"v", "vs", "ving"}:
        raise ValueError(f"template {tid!r}: a template with {{adv_*}} must use {{v}}, {{vs}} or {{ving}}")

    def mode(group: set[str]) -> str:
        used = slots & group
        if not used:
            return "none"
        if sum(1 for x in all_slots if x in group) > 1:
            raise ValueError(f"template {tid!r}: at most one of {sorted(group)}")
        return "required" if used & required else "optional"

    pair_only = bool(slots & {"other", "vp_o", "vps_o", "vpp_o", "vping_o"}) or bool(raw.get("pair", False))
    return _Template(
        id=tid, split=split, text=text, slots=frozenset(slots), optional_slots=frozenset(optional),
        pair_only=pair_only, needs_other_pronoun=bool(slots & {"vp_o", "vps_o", "vpp_o", "vping_o"}),
        needs_intro="intro" in slots, place_mode=mode(_PLACE_SLOTS), time_mode=mode(_TIME_SLOTS),
    )


@lru_cache(maxsize=None)
def _vocab() -> _Vocab:
    motions = _load_yaml("motions.yaml")
    data = _load_yaml("templates.yaml")
    verb_cfg = data.get("verbs") or {}
    verbs = {}
    for key, m in motions["motions"].items():
        cfg = verb_cfg.get(key) or {}
        exclude = set(cfg.get("exclude") or [])
        replace = cfg.get("replace") or {}
        syn = [replace.get(x, x) for x in (m.get("synonyms") or []) if x not in exclude]
        syn += list(cfg.get("extra") or [])
        verbs[key] = _Verb(key=key, phrase=str(m["phrase"]), s=str(m["s"]), ing=str(m["ing"]),
                           pair=bool(m.get("pair", False)), text=str(cfg.get("text", m["phrase"])),
                           synonyms=tuple(syn), intros=tuple(cfg.get("intros") or ()))
    adverbs = tuple(str(a) for a in motions["adverbs"])
    words: dict[str, tuple[tuple[str, str], ...]] = {}
    for a in adverbs:
        if not a:
            continue
        entries = data.get("adverbs", {}).get(a) or [{"text": a, "pos": "any" if a.endswith("ly") else "post"}]
        words[a] = tuple((str(e["text"]), str(e.get("pos", "post"))) for e in entries)
    places = {k: {f: tuple(v.get(f) or ()) for f in ("at", "to")} for k, v in data["places"].items()}
    times = {k: {f: tuple(v.get(f) or ()) for f in ("at", "np")} for k, v in data["times"].items()}
    templates: dict[str, _Template] = {}
    for raw in data["templates"]:
        t = _parse_template(raw)
        if t.id in templates:
            raise ValueError(f"duplicate template id {t.id!r}")
        templates[t.id] = t
    conflicts = {k: frozenset(v) for k, v in (data.get("synonym_conflicts") or {}).items()}
    params = {k: float(data[k]) for k in ("omit_unchanged", "synonym_p", "adverb_synonym_p",
                                           "adverb_pre_p", "adverb_pre_ing_p")}
    return _Vocab(verbs=verbs, adverbs=adverbs, adverb_words=words, places=places, times=times,
                  conflicts=conflicts, templates=templates, params=params)


def template_ids(split: str) -> list[str]:
    """The ids of the free-text templates of one split ("train" or "heldout"), in file order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return [t.id for t in _vocab().templates.values() if t.split == split]


def known_places() -> list[str]:
    """The place keys the instructions know (the structured form's Background)."""
    return list(_vocab().places)


def known_times() -> list[str]:
    return list(_vocab().times)


def known_verbs() -> list[str]:
    return list(_vocab().verbs)


def verb_phrases() -> list[str]:
    """Each verb as instructions say it ("fly on broomstick"), in the vocabulary's order."""
    return [v.phrase for v in _vocab().verbs.values()]


@lru_cache(maxsize=1)
def _pair_wordings() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each verb of two with one pattern of all its wordings (phrase, plain text, synonyms; base, -s, -ing)."""
    out = []
    for verb in _vocab().verbs.values():
        if verb.pair:
            forms = sorted({_conjugate(p, f) for p in {verb.phrase, verb.text, *verb.synonyms}
                            for f in ("base", "s", "ing")})
            out.append((verb.key, re.compile(r"\b(?:" + "|".join(map(re.escape, forms)) + r")\b", re.IGNORECASE)))
    return tuple(out)


def pair_verb_said(text: str) -> str | None:
    """The verb of two (a hug, a talk with) an instruction says in any of the world's wordings (its phrase, plain
    text or synonyms; base, -s or -ing form), or None: "Aiko speaks with Yuki" -> talk_with, "Tomo and Yuki lie
    down" -> None."""
    return next((key for key, pattern in _pair_wordings() if pattern.search(text)), None)


@lru_cache(maxsize=2)
def _scene_wordings(kind: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each place ("places") or time of day ("times") with one pattern of every wording the instructions use for
    it (its key and its phrases, any possessive for {pos})."""
    table = getattr(_vocab(), kind)
    out = []
    for key, fields in table.items():
        phrases = {key.replace("_", " ")}
        for wording in (w for ws in fields.values() for w in ws):
            phrases |= {wording.replace("{pos}", pos) for _, pos, _ in PRONOUNS.values()}
        alternatives = "|".join(map(re.escape, sorted(phrases, key=len, reverse=True)))
        out.append((key, re.compile(r"\b(?:" + alternatives + r")\b", re.IGNORECASE)))
    return tuple(out)


def _said(kind: str, text: str) -> str | None:
    """The place or time an instruction names, or None; of several, the one named last ("from the beach to
    the forest": the forest)."""
    found = [(m.end(), key) for key, pattern in _scene_wordings(kind) for m in pattern.finditer(text)]
    return max(found)[1] if found else None


def place_said(text: str) -> str | None:
    """The place an instruction names in any of the world's wordings (its key, "downtown", "by the sea", the
    structured form's Background), or None. The world's rule: a turn that names no place stays where the last
    one was (a template may leave the place out only when it did not change)."""
    return _said("places", text)


def time_said(text: str) -> str | None:
    """The time of day an instruction names ("at dusk", "tonight", "Background: night town"), or None: a turn
    that names none keeps the last one's."""
    return _said("times", text)


def known_adverbs() -> list[str]:
    """Adverb keys ("" = none)."""
    return list(_vocab().adverbs)


def all_motion_texts() -> list[str]:
    """Every motion text a world shot can carry (``motion_text``: "[adverb] verb phrase"), verb by verb."""
    v = _vocab()
    return [f"{a} {verb.phrase}" if a else verb.phrase for verb in v.verbs.values() for a in v.adverbs]


# --------------------------------------------------------------------------- structured form


def _check_action(action: Action) -> _Verb:
    v = _vocab()
    if action.verb not in v.verbs:
        raise InstructionError(f"unknown verb {action.verb!r}; valid: {', '.join(v.verbs)}")
    verb = v.verbs[action.verb]
    if action.adverb not in v.adverbs:
        raise InstructionError(f"unknown adverb {action.adverb!r}; valid: {', '.join(a for a in v.adverbs if a)} or ''")
    n = len(action.characters)
    if verb.pair and n != 2:
        raise InstructionError(f"{verb.phrase!r} is a two-character action; got characters {action.characters}")
    if n not in (1, 2) or any(not c for c in action.characters):
        raise InstructionError(f"an action has one or two named characters; got {action.characters}")
    return verb


def motion_text(action: Action) -> str:
    """The short motion description: ``"quickly run"``, ``"fly on broomstick"``."""
    verb = _check_action(action)
    return f"{action.adverb} {verb.phrase}" if action.adverb else verb.phrase


def structured(action: Action) -> str:
    """The release's format: ``Character: Qiqi; Motion: quickly run; Background: day town.``"""
    return (f"Character: {', '.join(action.characters)}; Motion: {motion_text(action)}; "
            f"Background: {action.time} {action.place}.")


def _norm(s: str) -> str:
    return " ".join(s.replace("_", " ").lower().split())


def parse_structured(text: str, known_characters: Iterable[str]) -> Action:
    """Parse the structured form back into an :class:`Action`.

    Case-insensitive; tolerant of spacing, a missing final period, ``Characters:`` and
    ``-ing`` / third-person motion forms (``quickly flying on broomstick``), and of the place
    before the time in Background. Raises :class:`InstructionError` naming what is wrong and
    the valid options.
    """
    v = _vocab()
    names = {_norm(c): c for c in known_characters}
    body = text.strip().rstrip(".").strip()
    if not body:
        raise InstructionError(f"empty instruction; {FORMAT_HELP}")
    fields: dict[str, str] = {}
    aliases = {"character": "character", "characters": "character", "motion": "motion",
               "background": "background"}
    for part in body.split(";"):
        if not part.strip():
            continue
        if ":" not in part:
            raise InstructionError(f"field {part.strip()!r} has no 'Name:' label; {FORMAT_HELP}")
        key, value = part.split(":", 1)
        k = aliases.get(_norm(key))
        if k is None:
            raise InstructionError(f"unknown field {key.strip()!r}; fields are Character, Motion, Background; "
                                   f"{FORMAT_HELP}")
        if k in fields:
            raise InstructionError(f"field {key.strip()!r} appears twice; {FORMAT_HELP}")
        fields[k] = value.strip()
    for k in ("character", "motion", "background"):
        if k not in fields:
            raise InstructionError(f"missing field '{k.capitalize()}'; {FORMAT_HELP}")
        if not fields[k]:
            raise InstructionError(f"field '{k.capitalize()}' is empty; {FORMAT_HELP}")

    # characters
    raw_names = [n for n in re.split(r",|\band\b|&", fields["character"]) if n.strip()]
    chars = []
    for n in raw_names:
        if _norm(n) not in names:
            raise InstructionError(f"unknown character {n.strip()!r}; known characters: "
                                   f"{', '.join(sorted(names.values())) or '(none given)'}")
        chars.append(names[_norm(n)])
    if not 1 <= len(chars) <= 2:
        raise InstructionError(f"Character names one or two characters, got {len(chars)}: {fields['character']!r}")
    if len(set(chars)) != len(chars):
        raise InstructionError(f"the same character is named twice: {fields['character']!r}")

    # motion: [adverb] verb form
    forms: dict[str, str] = {}
    for key, verb in v.verbs.items():
        for f in (verb.phrase, verb.s, verb.ing, key):
            forms.setdefault(_norm(f), key)
    motion = _norm(fields["motion"])
    adverb, verb_key = "", forms.get(motion)
    if verb_key is None:
        first, _, rest = motion.partition(" ")
        if first in v.adverbs and first and rest in forms:
            adverb, verb_key = first, forms[rest]
        elif first in v.adverbs and first:
            raise InstructionError(f"unknown motion {rest!r} in Motion {fields['motion']!r}; valid motions: "
                                   f"{', '.join(x.phrase for x in v.verbs.values())}")
        else:
            raise InstructionError(
                f"unknown motion {fields['motion']!r}; expected [adverb] <motion> with adverb one of "
                f"{', '.join(a for a in v.adverbs if a)} and motion one of "
                f"{', '.join(x.phrase for x in v.verbs.values())}")
    verb = v.verbs[verb_key]
    if verb.pair and len(chars) != 2:
        raise InstructionError(f"motion {verb.phrase!r} needs two characters ('Character: A, B'), got {chars}")

    # background: <time> <place> (either order)
    bg = _norm(fields["background"])
    place_forms = {_norm(p): p for p in v.places}
    time_val = place_val = None
    for t in v.times:
        if bg.startswith(t + " ") and bg[len(t) + 1:] in place_forms:
            time_val, place_val = t, place_forms[bg[len(t) + 1:]]
        elif bg.endswith(" " + t) and bg[: -len(t) - 1] in place_forms:
            time_val, place_val = t, place_forms[bg[: -len(t) - 1]]
    if time_val is None:
        words = bg.split()
        found_t = [t for t in v.times if t in words]
        if not found_t:
            raise InstructionError(f"Background {fields['background']!r} has no time of day; "
                                   f"valid times: {', '.join(v.times)}")
        rest = " ".join(w for w in words if w != found_t[0])
        raise InstructionError(f"unknown place {rest!r} in Background {fields['background']!r}; "
                               f"valid places: {', '.join(v.places)}")
    return Action(characters=tuple(chars), verb=verb_key, adverb=adverb, place=place_val, time=time_val)


# --------------------------------------------------------------------------- free text

_DOUBLE_FINAL = {"run", "jog", "hop", "sit", "swim", "chat", "trip", "spin", "flip", "nap", "stop",
                 "get", "put", "hug", "skip", "dig", "grab", "pat", "tap", "clap", "step", "drop",
                 "shop", "plan", "pop", "set", "cut", "win", "wag", "rub", "nod", "beg", "sip", "jam"}
_IRREGULAR_S = {"have": "has", "do": "does", "go": "goes", "be": "is"}
_IRREGULAR_ING = {"be": "being", "see": "seeing", "flee": "fleeing", "agree": "agreeing"}


def _third_person(word: str) -> str:
    if word in _IRREGULAR_S:
        return _IRREGULAR_S[word]
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    if re.search(r"(s|sh|ch|x|z|o)$", word):
        return word + "es"
    return word + "s"


def _ing(word: str) -> str:
    if word in _IRREGULAR_ING:
        return _IRREGULAR_ING[word]
    if word in _DOUBLE_FINAL:
        return word + word[-1] + "ing"
    if word.endswith("ie"):
        return word[:-2] + "ying"
    if word.endswith("e") and not word.endswith(("ee", "ye", "oe")):
        return word[:-1] + "ing"
    return word + "ing"


def _conjugate(phrase: str, form: str) -> str:
    """Conjugate the first word of a base-form verb phrase: form in base | s | ing."""
    if form == "base":
        return phrase
    head, sep, rest = phrase.partition(" ")
    head = _third_person(head) if form == "s" else _ing(head)
    return head + sep + rest


def _pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    if not seq:
        raise ValueError("nothing to choose from")
    return seq[int(rng.integers(len(seq)))]


def _an(text: str) -> str:
    def fix(m: re.Match) -> str:
        art, word = m.group(1), m.group(2)
        vowel = word[0].lower() in "aeiou" and not re.match(r"(?i)(uni|use|one|once|eu)", word)
        vowel = vowel or bool(re.match(r"(?i)(hour|honest|honou?r)", word))
        new = ("an" if vowel else "a")
        if art[0].isupper():
            new = new.capitalize()
        return f"{new} {word}"
    return re.sub(r"\b([Aa]n?) ([A-Za-z]\w*)", fix, text)


def _tidy(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)
    text = re.sub(r",\s*([,.!?;:])", r"\1", text)
    text = re.sub(r"([.!?;:])\s*,", r"\1", text)
    text = text.lstrip(",;: ")
    text = _an(text)
    if text and text[-1] not in ".!?":
        text += "."
    text = text[:1].upper() + text[1:]
    text = re.sub(r"([.!?] )([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)
    return text


def _pronouns(pronoun: str | Sequence[str], n: int) -> tuple[str, str | None]:
    if isinstance(pronoun, str):
        first, other = pronoun, None
    else:
        ps = list(pronoun)
        if not ps:
            raise InstructionError("pronoun: give at least one pronoun")
        first, other = ps[0], (ps[1] if len(ps) > 1 else None)
    for p in (first, other):
        if p is not None and p not in PRONOUNS:
            raise InstructionError(f"unknown pronoun {p!r}; valid: {', '.join(PRONOUNS)}")
    return first, (other if n == 2 else None)


def _eligible(t: _Template, verb: _Verb, adverb: str, plural_subject: bool, other_pronoun: str | None,
              place_changed: bool, time_changed: bool) -> bool:
    if t.pair_only and not verb.pair:
        return False
    if t.needs_other_pronoun and other_pronoun is None:
        return False
    if t.needs_intro and not verb.intros:
        return False
    if "adv_front" in t.slots and adverb and not any(pos == "any" for _, pos in _vocab().adverb_words[adverb]):
        return False
    if "other" in t.slots and plural_subject:
        return False
    if place_changed and t.place_mode == "none":
        return False
    if time_changed and t.time_mode == "none":
        return False
    return True


def eligible_templates(action: Action, split: str = "train", place_changed: bool = True,
                       time_changed: bool = True, pronoun: str | Sequence[str] = "she") -> list[str]:
    """Ids of the templates :func:`paraphrase` may use for this action and these flags."""
    verb = _check_action(action)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    _, other_p = _pronouns(pronoun, len(action.characters))
    plural = len(action.characters) == 2 and not verb.pair
    return [t.id for t in _vocab().templates.values()
            if t.split == split and _eligible(t, verb, action.adverb, plural, other_p, place_changed, time_changed)]


def paraphrase(action: Action, rng: np.random.Generator, split: str = "train", place_changed: bool = True,
               time_changed: bool = True, pronoun: str | Sequence[str] = "she") -> tuple[str, str]:
    """A free-text instruction for ``action`` from a template of ``split``: (text, template_id).

    ``place_changed`` / ``time_changed`` False allow templates that leave the place / time out
    (a player does not repeat an unchanged place). ``pronoun`` is the first character's
    pronoun ("she" / "he" / "they"), or one pronoun per character: pair templates that refer to
    the partner by pronoun ("... and hugs her") are used only when the partner's is given.
    """
    v = _vocab()
    verb = _check_action(action)
    ids = eligible_templates(action, split, place_changed, time_changed, pronoun)
    if not ids:  # cannot happen with the shipped templates (tested); a clear message if edited
        raise InstructionError(f"no {split} template fits {action} (place_changed={place_changed}, "
                               f"time_changed={time_changed})")
    t = v.templates[_pick(rng, ids)]
    p = v.params
    first_p, other_p = _pronouns(pronoun, len(action.characters))
    plural = len(action.characters) == 2 and not verb.pair
    subj = " and ".join(action.characters) if plural else action.characters[0]
    pron = "they" if plural else first_p
    pobj, pos, pron_plural = PRONOUNS[pron]

    # what to include
    include_place = t.place_mode == "required" or (t.place_mode == "optional" and (
        place_changed or rng.random() >= p["omit_unchanged"]))
    include_time = t.time_mode == "required" or (t.time_mode == "optional" and (
        time_changed or rng.random() >= p["omit_unchanged"]))

    # verb wording (synonyms that clash with the adverb are avoided)
    words = [verb.text] + [s for s in verb.synonyms if action.adverb not in v.conflicts.get(s, ())]
    surface = verb.text if (len(words) == 1 or rng.random() >= p["synonym_p"]) else _pick(rng, words[1:])
    surface = surface.replace("{pos}", pos)

    # adverb wording
    adv_words = v.adverb_words.get(action.adverb, ())
    adv_text, adv_pos = "", "post"
    if action.adverb:
        if rng.random() < p["adverb_synonym_p"] and len(adv_words) > 1:
            adv_text, adv_pos = _pick(rng, adv_words[1:])
        else:
            adv_text, adv_pos = adv_words[0]
    front_words = [w for w, pos_ in adv_words if pos_ == "any"]

    def phrase(form: str, obj: str | None, with_adverb: bool) -> str:
        core = _conjugate(surface, form)
        if obj:
            core = f"{core} {obj}"
        if not (with_adverb and adv_text):
            return core
        pre_p = p["adverb_pre_ing_p"] if form == "ing" else p["adverb_pre_p"]
        if adv_pos == "any" and rng.random() < pre_p:
            return f"{adv_text} {core}"
        return f"{core} {adv_text}"

    other = action.characters[1] if len(action.characters) == 2 and verb.pair else None
    other_obj = PRONOUNS[other_p][0] if other_p else None
    subj_form = "base" if plural else "s"
    pron_form = "base" if pron_plural else "s"

    def slot(name: str) -> str:
        match name:
            case "subj": return subj
            case "be": return "are" if plural else "is"
            case "s": return "" if plural else "s"
            case "pron": return pron
            case "pobj": return pobj
            case "pos": return pos
            case "pbe": return "are" if pron_plural else "is"
            case "other": return other or ""
            case "v": return phrase("base", other, False)
            case "vs": return phrase(subj_form, other, False)
            case "ving": return phrase("ing", other, False)
            case "vp": return phrase("base", other, True)
            case "vps": return phrase(subj_form, other, True)
            case "vpp": return phrase(pron_form, other, True)
            case "vping": return phrase("ing", other, True)
            case "vp_o": return phrase("base", other_obj, True)
            case "vps_o": return phrase(subj_form, other_obj, True)
            case "vpp_o": return phrase(pron_form, other_obj, True)
            case "vping_o": return phrase("ing", other_obj, True)
            case "adv_front":  # a -ly word: the chosen wording if it is one, else another that is
                if not action.adverb:
                    return ""
                return adv_text if adv_pos == "any" else _pick(rng, front_words)
            case "adv_end": return adv_text
            case "place" | "place_to":
                if not include_place:
                    return ""
                table = v.places.get(action.place) or {"at": (f"in the {action.place}",),
                                                      "to": (f"the {action.place}",)}
                return _pick(rng, table["at" if name == "place" else "to"]).replace("{pos}", pos)
            case "time" | "time_np":
                if not include_time:
                    return ""
                table = v.times.get(action.time) or {"at": (f"at {action.time}",), "np": (action.time,)}
                return _pick(rng, table["at" if name == "time" else "np"])
            case "intro": return _pick(rng, verb.intros)
        raise KeyError(name)

    values: dict[str, str] = {}

    def fill(s: str) -> str:
        def sub(m: re.Match) -> str:
            if m.group(1) not in values:
                values[m.group(1)] = slot(m.group(1))
            return values[m.group(1)]
        return _SLOT_RE.sub(sub, s)

    out = []
    pos_ = 0
    for m in _GROUP_RE.finditer(t.text):  # left to right, so rng use follows the text order
        out.append(fill(t.text[pos_:m.start()]))
        group = m.group(1)
        names = _SLOT_RE.findall(group)
        for n in names:
            if n not in values:
                values[n] = slot(n)
        out.append(fill(group) if all(values[n] for n in names) else "")
        pos_ = m.end()
    out.append(fill(t.text[pos_:]))
    text = _tidy("".join(out))
    if "{" in text or "[" in text:
        raise InstructionError(f"template {t.id!r} left a placeholder in {text!r}")
    return text, t.id


def render_instruction(action: Action, rng: np.random.Generator, style_probs: Mapping[str, float] | None = None,
                       split: str = "train", place_changed: bool = True, time_changed: bool = True,
                       pronoun: str | Sequence[str] = "she") -> tuple[str, str]:
    """The instruction the player types this turn: (text, template_id or "structured").

    ``style_probs`` weighs {"structured": p, "free": 1 - p} (default 35% structured). The
    structured form always states place and time (the release's format).
    """
    probs = dict(DEFAULT_STYLE_PROBS if style_probs is None else style_probs)
    unknown = set(probs) - {"structured", "free"}
    if unknown or not probs or min(probs.values()) < 0 or sum(probs.values()) <= 0:
        raise ValueError(f"style_probs must weigh 'structured' and 'free' (non-negative), got {probs}")
    p_struct = probs.get("structured", 0.0) / sum(probs.values())
    if rng.random() < p_struct:
        _check_action(action)
        return structured(action), "structured"
    return paraphrase(action, rng, split=split, place_changed=place_changed, time_changed=time_changed,
                      pronoun=pronoun)
