"""What a player's words may hold: the one check shared by instructions, character descriptions and the
text fields of a restored saved game (game/archive.py), so text from a file is held to the same rule as
text typed in.

Refused: control characters (tab and line breaks aside: they are collapsed), unassigned, private-use and
surrogate code points, U+FFFD (what a broken decoding leaves), and the bidirectional controls. Those last
are invisible and make text display in another order than it reads ("Trojan Source"): an instruction or
a description shown in the history, the page or an export could say something else than what was
played. They are refused, not stripped, so what is saved is exactly what the player sent.
"""
from __future__ import annotations

import unicodedata

MAX_INSTRUCTION_CHARS = 500
MAX_DESCRIPTION_CHARS = 500
# the embeddings, overrides, isolates and marks of the Unicode bidirectional algorithm (UAX #9)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ALLOWED_CONTROLS = frozenset("\t\n\r")


def unsafe_characters(text: str) -> list[str]:
    """The characters of ``text`` that words typed by a player may not hold (see the module doc), each
    once, in code point order: empty when the text is fine."""
    return sorted({c for c in text if c in BIDI_CONTROLS or c == "\ufffd"
                   or (unicodedata.category(c) in ("Cc", "Cs", "Co", "Cn") and c not in _ALLOWED_CONTROLS)})


def describe_characters(chars: list[str]) -> str:
    """``['\\u202e']`` -> ``'U+202E'``: how an error message names characters that cannot be shown."""
    return ", ".join(f"U+{ord(c):04X}" for c in chars[:5]) + (", ..." if len(chars) > 5 else "")
