"""The player's own characters: made from a description or a picture, kept beside the saved games,
drawn in play.

    book = CharacterBook(store_root)                        # kept in store_root/characters/
    neko = book.add("Neko", "a girl with short green hair in a red hoodie, with a scarf", taken=cast)
    mimi = book.add("Mimi", image="mimi.png", taken=cast)   # read into the generator's parameters
    neko.spec, neko.understood, book.reference_path("Neko")

A description is read word by word for what the world's character generator can draw: a hair
colour and style, an outfit and its colour, accessories and their colours, girl / boy. Everything
it does not mention comes from a generator seeded by the name, so the same name and words always
give the same character. What it understood is kept and shown; a description with nothing drawable
is refused with an example. A picture (the character alone on a plain background, in the world's
style) is cut out and fitted: the generator's parameters that redraw it best (`world/character_fit.py`),
so the world can draw the character in any pose, as a described one.

The reference sheet is drawn once, when the character is added. In play (``GameSession.step``), a turn that
names a custom character is drawn from a composed first frame (`decoder/stage.py`): the character cut out of
its reference sheet, standing in a stored picture of the place the engine's prediction names, beside the other
characters the turn names; the decoder animates it from that picture, no training. The world's renderer
never runs during play. docs/results.md#your-own-characters measures how well (when the world drew the frame).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from animegamer.core.atomic_io import atomic_write, write_json
from animegamer.game.store import confined
from animegamer.game.text import MAX_DESCRIPTION_CHARS, describe_characters, unsafe_characters
from animegamer.world.cast import ACCESSORY_TYPES, CharacterSpec, parse_cast
from animegamer.world.character_fit import CLOSE_FIT, fit_character
from animegamer.world.character_gen import character_entry, describe, random_character, reference_sheet
from animegamer.world.stage_art import portrait_standing_px

MAX_NAME = 40
BOOK_NAME = "characters.json"
CHARACTERS_DIR = "characters"  # inside a saved-games directory
COLOURS = {"red": "#e03a3a", "orange": "#f08a24", "yellow": "#f2d33c", "blonde": "#f0d77a", "golden": "#e8b930",
           "green": "#3fae4f", "teal": "#1fa6a0", "cyan": "#39c6e0", "blue": "#3a66d8", "navy": "#223a7a",
           "purple": "#8a4fd0", "violet": "#9a5fe0", "pink": "#f06aa8", "black": "#26262e", "white": "#f2f2f2",
           "grey": "#8a8a94", "gray": "#8a8a94", "brown": "#7a4a2a", "silver": "#c8ccd4"}
STYLE_WORDS = {"twin tails": "twin_tails", "twintails": "twin_tails", "pigtails": "twin_tails",
               "long": "long_straight", "straight": "long_straight", "bob": "bob", "spiky": "spiky",
               "ponytail": "ponytail", "short": "short_messy", "messy": "short_messy", "bun": "bun",
               "braids": "braids", "braided": "braids", "side-swept": "side_swept", "swept": "side_swept"}
OUTFIT_WORDS = {"dress": "dress", "hoodie": "hoodie", "sailor": "sailor_uniform", "blazer": "blazer_uniform",
                "robe": "witch_robe", "overalls": "overalls", "kimono": "kimono", "t-shirt": "tshirt_shorts",
                "tshirt": "tshirt_shorts", "shorts": "tshirt_shorts", "coat": "coat"}
ACCESSORY_WORDS = {t.replace("_", " "): t for t in ACCESSORY_TYPES} | {"sun hat": "sunhat", "hat": "witch_hat"}
WHO = {"girl": "she", "woman": "she", "she": "she", "her": "she", "boy": "he", "man": "he", "he": "he", "his": "he"}
EXAMPLE = "a girl with short green hair in a red hoodie, with a scarf"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 '\-]*")  # fullmatch
ENTRY_KEYS = ("description", "entry", "understood", "created_at", "picture", "fit")  # a book entry, as stored
MAX_UNDERSTOOD = 64  # phrases of what was understood that an entry from elsewhere may carry
UNFITTED_HEIGHT = 1.15  # a cut-out of unknown scale stands as tall as a usual character with its hair


class CharacterError(ValueError):
    """A character cannot be added or removed (the message says why)."""


@dataclass
class CustomCharacter:
    name: str
    description: str
    spec: CharacterSpec | None  # None for a character made from a picture alone
    understood: list[str]
    created_at: float
    sprite: Path | None = None  # the cut-out of the player's picture (RGBA PNG)
    fit: dict[str, Any] | None = None  # how the spec was read from the picture (error, what was read)

    @property
    def fit_note(self) -> str | None:
        """A word for the player when their picture was not redrawn well, else None."""
        if not self.fit or self.fit["error"] <= CLOSE_FIT:
            return None
        return (f"the picture is not much like the world's drawings (fit error {self.fit['error']:.2f}); "
                f"{self.name} will be drawn as the reference sheet shows: add words to change it")

    @property
    def posed(self) -> bool:
        """Whether the world draws this character from its parameters, in any pose; if not, the cut-out of
        the player's picture is stood in the scene (a picture character made before pictures were fitted)."""
        return self.spec is not None and (self.sprite is None or self.fit is not None)


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.lower().encode(), digest_size=6).digest(), "little")


NOUN_WORDS = set(OUTFIT_WORDS) | {w for p in ACCESSORY_WORDS for w in p.split()} | {"hair"}


def _colour_before(words: list[str], i: int) -> str | None:
    """The colour word just before position i, or one further back past an adjective ("green spiky
    hair"); never past another thing ("a black coat, glasses": the coat is black, not the glasses)."""
    for w in reversed(words[max(0, i - 2):i]):
        if w in COLOURS:
            return w
        if w in NOUN_WORDS:
            return None
    return None


def from_description(name: str, text: str, base: CharacterSpec | None = None) -> tuple[CharacterSpec, list[str]]:
    """The character the words describe and what was understood; the rest is ``base`` (a character
    read from the player's picture) or drawn from the name."""
    entry = character_entry(base if base is not None else random_character(_seed(name), name))
    words = re.findall(r"[a-z][a-z\-]*", text.lower())
    joined = " ".join(words)
    understood: list[str] = []
    accessories = []
    for i, w in enumerate(words):
        if w in WHO:
            entry["pronoun"] = WHO[w]
            understood.append(w)
        elif w == "hair":
            colour = _colour_before(words, i)
            if colour:
                entry["hair"]["color"] = COLOURS[colour]
                understood.append(f"{colour} hair")
            styles = [STYLE_WORDS[x] for x in words[max(0, i - 3):i] if x in STYLE_WORDS]
            if styles:
                entry["hair"]["style"] = styles[0]
                understood.append(f"{styles[0].replace('_', ' ')} hair")
        elif w in OUTFIT_WORDS:
            entry["outfit"]["type"] = OUTFIT_WORDS[w]
            colour = _colour_before(words, i)
            if colour:
                entry["outfit"]["top"] = COLOURS[colour]
            understood.append(" ".join(x for x in (colour, w) if x))
    rest = joined
    for phrase, kind in sorted(ACCESSORY_WORDS.items(), key=lambda kv: -len(kv[0])):  # "witch hat" before "hat"
        m = re.search(rf"\b{re.escape(phrase)}\b", rest)
        if m and kind not in {a["type"] for a in accessories}:
            before = rest[:m.start()].split()
            colour = _colour_before(before, len(before))
            accessories.append({"type": kind, "color": COLOURS[colour] if colour else entry["outfit"]["accent"]})
            understood.append(" ".join(x for x in (colour, phrase) if x))
            rest = rest[:m.start()] + " " + rest[m.end():]
    # the accessories the player named (none they did not), and those read from their picture the words do not rename
    named = {a["type"] for a in accessories}
    entry["accessories"] = [a for a in entry["accessories"] if base is not None and a["type"] not in named] + accessories
    entry["outfit_variants"] = []  # always dressed as described: no other outfit in another session
    if not understood:
        raise CharacterError(f"nothing in {text!r} says what {name} looks like; name a hair colour or style "
                             f"({', '.join(sorted(set(STYLE_WORDS)))}), an outfit ({', '.join(sorted(OUTFIT_WORDS))}) "
                             f"or accessories, e.g. {EXAMPLE!r}")
    entry["description"] = describe(entry)
    spec = parse_cast({"characters": {name: entry}}, f"description of {name}")[name]
    return spec, list(dict.fromkeys(understood))


def check_name(name: Any, taken: list[str]) -> str:
    if not isinstance(name, str) or not name.strip():
        raise CharacterError("a character needs a name")
    name = " ".join(name.split())
    if len(name) > MAX_NAME:
        raise CharacterError(f"the name is {len(name)} characters long; keep it to {MAX_NAME}")
    if not _NAME.fullmatch(name):
        raise CharacterError(f"{name!r}: a name starts with a letter and holds letters, digits, spaces, - and '")
    if name.lower() in {t.lower() for t in taken}:
        raise CharacterError(f"{name} is already taken; choose another name")
    return name


class CharacterBook:
    """The custom characters of one saved-games directory, kept in its ``characters/`` folder
    (characters.json + reference PNGs + picture cut-outs)."""

    def __init__(self, store_root: str | Path) -> None:
        self.root = Path(store_root) / CHARACTERS_DIR

    def _read(self) -> dict[str, Any]:
        p = self._book_path()
        return json.loads(p.read_text()) if p.is_file() else {"version": 1, "characters": {}}

    def _book_path(self) -> Path:
        return confined(self.root, BOOK_NAME)

    def list(self) -> list[CustomCharacter]:
        out = []
        for name, d in self._read()["characters"].items():
            spec = (parse_cast({"characters": {name: d["entry"]}}, str(self.root / BOOK_NAME))[name]
                    if d.get("entry") else None)
            out.append(CustomCharacter(name, d["description"], spec, d["understood"], d["created_at"],
                                       self.sprite_path(name) if d.get("picture") else None, d.get("fit")))
        return out

    def names(self) -> list[str]:
        return list(self._read()["characters"])

    def characters(self) -> dict[str, CustomCharacter]:
        return {c.name: c for c in self.list()}

    def _stem(self, name: str) -> str:
        return hashlib.blake2b(name.encode(), digest_size=6).hexdigest()

    def reference_path(self, name: str) -> Path:
        return confined(self.root, f"{self._stem(name)}.png")

    def sprite_path(self, name: str) -> Path:
        return confined(self.root, f"{self._stem(name)}_cutout.png")

    def add(self, name: Any, description: Any = None, taken: list[str] | None = None,
            image: str | Path | bytes | None = None) -> CustomCharacter:
        """A character from a description, a picture (of the character alone on a plain background, in
        the world's drawing style), or both. A picture is read into the generator's parameters
        (`world/character_fit.py`), so the world draws the character in every pose; a description's
        words then change what they name. The reference sheet kept is what the world draws."""
        name = check_name(name, list(taken or []) + self.names())
        if description is not None and not isinstance(description, str):
            raise CharacterError(f"the description must be text, got {type(description).__name__}")
        description = (description or "").strip()
        if not description and image is None:
            raise CharacterError(f"describe {name} or give a picture of them, e.g. {EXAMPLE!r}")
        check_description(description)
        picture = read_picture(image) if image is not None else None
        fit, sprite = None, None
        if picture is not None:  # a bad picture fails before anything is written
            alpha = figure_mask(picture)
            sprite = cut_out(picture, alpha)
            fit = fit_character(picture, alpha, random_character(_seed(name), name))
        spec, understood = from_description(name, description, fit.spec if fit else None) if description else \
            (None, [])
        if fit is not None:
            if spec is None:
                spec = dataclasses.replace(fit.spec, description=describe(character_entry(fit.spec)))
            understood = [f"from the picture: {', '.join(fit.read)}"] + understood
        book = self._read()
        reference = Image.fromarray(reference_sheet(spec, 256))
        atomic_write(self.reference_path(name), lambda fh: reference.save(fh, format="PNG"))  # files before the entry
        if sprite is not None:
            atomic_write(self.sprite_path(name), lambda fh: Image.fromarray(sprite, "RGBA").save(fh, format="PNG"))
        made = time.time()
        fitted = {"error": round(fit.error, 4), "read": fit.read} if fit else None
        book["characters"][name] = {"description": description, "entry": character_entry(spec) if spec else None,
                                    "understood": understood, "created_at": made, "picture": sprite is not None,
                                    **({"fit": fitted} if fitted else {})}
        write_json(self._book_path(), book)
        return CustomCharacter(name, description, spec, understood, made,
                               self.sprite_path(name) if sprite is not None else None, fitted)

    def cutout(self, name: str) -> tuple[np.ndarray, float]:
        """The character as the game stands it in a composed first frame (decoder/stage.py): uint8 RGBA cut out
        of its reference sheet (drawn when it was added), or of the player's picture for a character read before
        pictures were fitted; and its height in units of a height-1.0 character's standing height."""
        entry = self._read()["characters"].get(name)
        if entry is None:
            raise CharacterError(f"no custom character {name!r}")
        if entry.get("entry") is None:  # a picture alone (before fitting): taken as a character of usual height
            return np.asarray(Image.open(self.sprite_path(name)).convert("RGBA")), UNFITTED_HEIGHT
        sheet = read_picture(self.reference_path(name))
        sprite = cut_out(sheet)
        return sprite, sprite.shape[0] / portrait_standing_px(sheet.shape[0])

    def entries(self) -> dict[str, dict[str, Any]]:
        """The book as stored: name -> its entry (description, generator entry, what was understood)."""
        return dict(self._read()["characters"])

    def check_entry(self, name: Any, entry: Any, reference: bytes, cutout: bytes | None) -> None:
        """CharacterError unless ``entry`` (as ``entries`` gives it, e.g. from a saved-game file) with these
        pictures (PNG bytes) is a character this book can hold under ``name``. Everything the book later
        reads of an entry is checked here, so an entry from elsewhere cannot break the book for every game."""
        if check_name(name, []) != name:  # as typed names are kept: spaces collapsed, no line breaks
            raise CharacterError(f"{name[:40]!r}: a name holds single spaces between its words")
        if not isinstance(entry, dict) or not {"description", "entry", "understood", "picture", "created_at"} \
                <= set(entry):
            raise CharacterError(f"{name}: not a character entry")
        if not isinstance(entry["description"], str):
            raise CharacterError(f"{name}: the description is not text")
        check_description(entry["description"])
        understood = entry["understood"]
        if not isinstance(understood, list) or len(understood) > MAX_UNDERSTOOD or \
                not all(isinstance(u, str) and len(u) <= MAX_DESCRIPTION_CHARS and not unsafe_characters(u)
                        for u in understood):
            raise CharacterError(f"{name}: what was understood of them is not a list of plain phrases")
        if not isinstance(entry["picture"], bool) or entry["picture"] != (cutout is not None):
            raise CharacterError(f"{name}: the entry says picture={repr(entry['picture'])[:20]} but the file "
                                 f"{'has' if cutout is not None else 'has no'} cut-out")
        if not _finite(entry["created_at"]):
            raise CharacterError(f"{name}: created_at is not a time")
        fit = entry.get("fit")
        if fit is not None and not (isinstance(fit, dict) and _finite(fit.get("error")) and
                                    isinstance(fit.get("read"), list) and
                                    all(isinstance(r, str) and not unsafe_characters(r) for r in fit["read"])):
            raise CharacterError(f"{name}: its fit is not {{error: number, read: [phrases]}}")
        if entry["entry"] is not None:
            try:
                spec = parse_cast({"characters": {name: entry["entry"]}}, f"the entry of {name}")[name]
            except (ValueError, TypeError, KeyError, AttributeError) as e:  # what a malformed mapping raises
                raise CharacterError(f"{name}: not a character the world can draw ({e})") from None
            check_description(spec.description)
        elif cutout is None:
            raise CharacterError(f"{name}: neither a description the world can draw nor a picture")
        for data, what in ((reference, "reference sheet"), (cutout, "cut-out")):
            if data is not None:
                check_png(data, f"{name}: the {what}")

    def same(self, name: str, entry: dict[str, Any], cutout: bytes | None) -> bool:
        """Whether ``name`` here is the character ``entry`` (and the cut-out of its picture, PNG bytes)
        describes: a described character's reference sheet is drawn from its entry, so the entry decides;
        a cut-out is compared byte for byte."""
        mine = self._read()["characters"].get(name)
        if mine is None or mine.get("entry") != entry.get("entry") or bool(mine.get("picture")) != bool(cutout):
            return False
        return cutout is None or self.sprite_path(name).read_bytes() == cutout

    def adopt(self, name: str, entry: dict[str, Any], reference: bytes, cutout: bytes | None) -> None:
        """Keep a character that comes whole from elsewhere (a saved-game file): its entry (the fields a
        book entry has, nothing else) and its pictures' PNG bytes. The pictures are written before the
        entry, as ``add`` does."""
        self.check_entry(name, entry, reference, cutout)
        check_name(name, self.names())  # case-insensitively: "neko" beside "Neko" would be removed for it
        atomic_write(self.reference_path(name), lambda fh: fh.write(reference))
        if cutout is not None:
            atomic_write(self.sprite_path(name), lambda fh: fh.write(cutout))
        book = self._read()
        book["characters"][name] = {**{k: entry[k] for k in ENTRY_KEYS if k in entry}, "picture": cutout is not None}
        write_json(self._book_path(), book)

    def remove(self, name: str) -> None:
        book = self._read()
        wanted = str(name).strip()
        match = wanted if wanted in book["characters"] else \
            next((n for n in book["characters"] if n.lower() == wanted.lower()), None)
        if match is None:
            raise CharacterError(f"no custom character {name!r} (yours: {', '.join(book['characters']) or 'none'})")
        del book["characters"][match]
        write_json(self._book_path(), book)
        self.reference_path(match).unlink(missing_ok=True)
        self.sprite_path(match).unlink(missing_ok=True)


def check_description(text: str) -> None:
    """CharacterError unless ``text`` is a description a player may give (length, no control characters
    nor bidirectional overrides: game/text.py)."""
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise CharacterError(f"the description is {len(text)} characters long; keep it to {MAX_DESCRIPTION_CHARS}")
    bad = unsafe_characters(text)
    if bad:
        raise CharacterError(f"the description contains unreadable or control characters ({describe_characters(bad)}); "
                             "retype it as plain text")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


MIN_PICTURE, MAX_PICTURE, MAX_PICTURE_BYTES = 48, 4096, 20 * 1024 * 1024
PICTURE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")  # the decoders a picture from outside may reach
PICTURE_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif", "image/bmp")  # HTTP content types
BACKGROUND_TOLERANCE = 24  # per channel: how far from the border's colours a pixel may be and still be background


def _check_size(im: Image.Image, what: str, smallest: int) -> None:
    """The decompression-bomb guard: a picture's size as its header declares it, checked before a pixel is
    decoded (``Image.open`` reads only the header). A few KB of PNG can declare 13000 x 13000 pixels,
    which decode to 0.7 GB; Pillow's own guard (``Image.MAX_IMAGE_PIXELS``, process-wide and shared with
    the training code) only refuses from 179 M pixels, ten times ours."""
    w, h = im.size
    if min(w, h) < smallest or max(w, h) > MAX_PICTURE:
        raise CharacterError(f"{what}: {w} x {h} pixels; a picture is {smallest} to {MAX_PICTURE} pixels a side")


def check_png(data: bytes, what: str) -> None:
    """CharacterError unless ``data`` is a whole PNG of at most ``MAX_PICTURE`` pixels a side (a saved
    game's reference sheet or cut-out): its header's size first, then every chunk, then its pixels."""
    if len(data) > MAX_PICTURE_BYTES:
        raise CharacterError(f"{what} is {len(data)} bytes; a picture is at most {MAX_PICTURE_BYTES // 2**20} MB")
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as im:
            _check_size(im, what, 1)
            im.verify()  # the chunks' checksums, without decoding
        with Image.open(io.BytesIO(data), formats=["PNG"]) as im:
            im.load()  # a broken image stream is found now, not while a turn is drawn
    except CharacterError:
        raise
    except Exception as e:  # PIL raises many kinds for a broken file
        raise CharacterError(f"{what} is not a picture ({e})") from None


def read_picture(source: str | Path | bytes) -> np.ndarray:
    """An uploaded picture (a file, or its bytes as an HTTP body brings them) as uint8 RGB (H, W, 3), or
    CharacterError saying what is wrong with it. Its byte size and its header's pixel size are checked
    before it is decoded, so a picture bomb costs a header's read."""
    if isinstance(source, bytes):
        p, size, opened = "the picture", len(source), io.BytesIO(source)
    else:
        p = opened = Path(source)
        if not p.is_file():
            raise CharacterError(f"{p}: no such picture")
        size = p.stat().st_size
    if size == 0 or size > MAX_PICTURE_BYTES:
        raise CharacterError(f"{p}: {size} bytes; a picture is 1 byte to {MAX_PICTURE_BYTES // 2**20} MB")
    try:
        with Image.open(opened, formats=PICTURE_FORMATS) as im:
            _check_size(im, str(p), MIN_PICTURE)
            im.load()
            rgba = im.convert("RGBA")
    except CharacterError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise CharacterError(f"{p}: not a picture this game can read ({e})") from None
    bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))  # transparent pixels become a plain background
    return np.asarray(Image.alpha_composite(bg, rgba).convert("RGB"))


def figure_mask(picture: np.ndarray) -> np.ndarray:
    """Where the character of a picture on a plain background is: uint8 (H, W), 255 on it. Everything
    connected to the picture's border within ``BACKGROUND_TOLERANCE`` of its colour is background; the
    largest remaining blob is the character. CharacterError when no character stands out."""
    h, w = picture.shape[:2]
    mask = np.zeros((h + 2, w + 2), np.uint8)
    img = np.ascontiguousarray(picture)
    tol = (BACKGROUND_TOLERANCE,) * 3
    step = max(1, min(h, w) // 32)
    border = [(x, 0) for x in range(0, w, step)] + [(x, h - 1) for x in range(0, w, step)] + \
             [(0, y) for y in range(0, h, step)] + [(w - 1, y) for y in range(0, h, step)]
    # only the border's common colours are background: a figure the picture crops (a hat through the top
    # edge) touches the border too, and flooding from it would take the figure for background
    bins = [tuple(int(v) // 32 for v in img[y, x]) for x, y in border]
    common = {b for b in set(bins) if bins.count(b) >= 0.1 * len(bins)}
    for (x, y), b in zip(border, bins):
        if b in common and not mask[y + 1, x + 1]:
            cv2.floodFill(img.copy(), mask, (x, y), (0, 0, 0), tol, tol,
                          4 | cv2.FLOODFILL_MASK_ONLY | cv2.FLOODFILL_FIXED_RANGE | (255 << 8))
    fg = (mask[1:-1, 1:-1] == 0).astype(np.uint8)
    # a seam a pixel or two wide between two background colours (a horizon, once the picture was resized or
    # compressed) is in no flood; opening drops it, so it does not join the character to the picture's sides
    kernel = np.ones((3, 3), np.uint8) if min(h, w) >= 96 else np.ones((2, 2), np.uint8)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(cv2.morphologyEx(fg, cv2.MORPH_OPEN, kernel), connectivity=8)
    if n < 2:
        raise CharacterError("no character stands out from the picture's background: use a picture of the "
                             "character alone on a plain background")
    k = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    if stats[k, cv2.CC_STAT_AREA] < 0.02 * h * w:
        raise CharacterError("the character is too small in the picture (under 2% of it): crop closer")
    return (cv2.dilate((labels == k).astype(np.uint8), kernel) & fg) * 255  # the opened-away outline back


def cut_out(picture: np.ndarray, alpha: np.ndarray | None = None) -> np.ndarray:
    """The character of a picture on a plain background as RGBA, cropped to it (``alpha``: its
    `figure_mask`, found when not given)."""
    alpha = figure_mask(picture) if alpha is None else alpha
    ys, xs = np.nonzero(alpha)
    return np.dstack([picture, alpha])[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
