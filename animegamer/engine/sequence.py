"""The engine's token sequence: one layout, one query-slot convention, one attention mask.

Per turn (the order of ANIMEGAMER.md: motion level, then social, entertainment, stamina):

    <TURN> {instruction} <img> <frame> Q_1 .. Q_N </frame> </img>
           <ML> ml </ML> <SC> sc </SC> <ET> et </ET> <ST> st </ST> </TURN>

* History turns: the N slots Q_i carry that turn's s_a (N, D) through the input resampler, and
  the values are the true ones (teacher forcing in training; at play time, what the engine said).
* The current turn: the N slots carry the engine's learnable query embeddings and attend to each
  other bidirectionally; everything else is causal. Its values are what we predict.

THE query-slot convention (training and inference alike, see ``TurnTokens``): the predicted
representation token i is the output resampler applied to the final hidden state AT query slot i
(no shift). The value of a field is read, as usual for next-token prediction, from the hidden
state at its opening tag (<ML>, <SC>, <ET>, <ST>) and scored against that field's value tokens
only. (The public release read the representation three positions off between training and
inference; here one function, ``encode_turn``, computes the offsets for both.)

Special tokens are never parsed from text: their ids are appended directly, after the base
vocabulary (``SpecialVocab``), so instruction text cannot inject control tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field as dataclass_field

import torch

# (field name in the deltas dict / "motion_level", tag, valid values), in sequence order.
FIELDS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("motion_level", "ML", (1, 2, 3, 4, 5)),
    ("social", "SC", (0, 1)),
    ("entertainment", "ET", (0, 1)),
    ("stamina", "ST", (-1, 0, 1)),
)
DELTA_FIELDS = ("social", "entertainment", "stamina")
# A film whose annotations leave the state changes unknown: those fields carry no loss (the class
# IGNORE, cross_entropy's ignore_index), and their value token reads UNKNOWN_AS so the layout stays one.
IGNORE = -100
UNKNOWN_AS = 0
STRUCT_TOKENS = ("<TURN>", "</TURN>", "<img>", "</img>", "<frame>", "</frame>", "<Q>", "<PAD>")
TAG_TOKENS = tuple(t for _, tag, _ in FIELDS for t in (f"<{tag}>", f"</{tag}>"))
VALUE_TOKENS = tuple(f"<{tag}={v}>" for _, tag, values in FIELDS for v in values)
NEW_TOKENS = STRUCT_TOKENS + TAG_TOKENS + VALUE_TOKENS

# Words whose base-model embeddings initialise each new token (a pretrained LLM starts from
# something meaningful instead of noise). Close tags reuse their open tag's words.
TOKEN_WORDS = {
    "<TURN>": "turn", "</TURN>": "end turn", "<img>": "image", "</img>": "end image",
    "<frame>": "frame", "</frame>": "end frame", "<Q>": "scene", "<PAD>": " ",
    "ML": "motion level", "SC": "social", "ET": "entertainment", "ST": "stamina",
}


def token_words(token: str) -> str:
    if token in TOKEN_WORDS:
        return TOKEN_WORDS[token]
    body = token.strip("<>/")
    if "=" in body:
        tag, value = body.split("=")
        return f"{TOKEN_WORDS[tag]} {value}"
    return ("end " if token.startswith("</") else "") + TOKEN_WORDS[body]


class SpecialVocab:
    """Ids of the engine's new tokens: ``base_vocab + index`` in NEW_TOKENS order."""

    def __init__(self, base_vocab: int) -> None:
        self.base_vocab = int(base_vocab)
        self.tokens = NEW_TOKENS
        self.index = {t: i for i, t in enumerate(NEW_TOKENS)}

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token: str) -> int:
        return self.base_vocab + self.index[token]

    def value_ids(self, field: int) -> list[int]:
        """Ids of the valid value tokens of field ``field`` (index into FIELDS), in value order."""
        _, tag, values = FIELDS[field]
        return [self[f"<{tag}={v}>"] for v in values]

    def name(self, token_id: int) -> str:
        return self.tokens[token_id - self.base_vocab]


@dataclass
class TurnRecord:
    """One turn of a game as the engine sees it.

    ``s_a`` (N, D) is required for history turns (the shot's representation: the true one in
    training, the engine's own prediction at play time). ``states`` are the absolute states
    BEFORE the turn (optional; see SequenceBuilder.states_in_prompt).
    """

    instruction: str
    s_a: torch.Tensor | None = None
    motion_level: int = 1
    deltas: dict[str, int] | None = None
    states: dict[str, int] | None = None

    def values(self) -> list[int | None]:
        """The 4 field values in FIELDS order, validated (no silent defaults). A turn whose ``deltas`` is
        None, or maps a field to None, does not know that state change: its value is None."""
        out: list[int | None] = []
        for name, tag, valid in FIELDS:
            if name == "motion_level":
                v = self.motion_level
            elif self.deltas is None or self.deltas.get(name, 0) is None:
                out.append(None)
                continue
            else:
                v = self.deltas.get(name)
            if v is None or int(v) not in valid:
                raise ValueError(f"turn {self.instruction!r}: {name} must be one of {valid}, got {v!r}")
            out.append(int(v))
        return out


def value_classes(values: list[int | None]) -> list[int]:
    """Field values -> class indices within each field's valid set (IGNORE where unknown)."""
    return [IGNORE if v is None else FIELDS[f][2].index(v) for f, v in enumerate(values)]


@dataclass
class TurnTokens:
    """One encoded turn. Offsets are relative to the turn's first token."""

    ids: list[int]
    query_offset: int  # first of the N query slots
    n_query: int
    value_offsets: list[int]  # position of <ML>, <SC>, <ET>, <ST> (only those present)
    value_classes: list[int] | None  # target class per field (None for an open prefix)


def select_window(n_history: int, window: int, slide: int = 1) -> int:
    """Index of the first history turn the engine sees, from the history length alone.

    ``slide == 1``: the newest ``window`` turns (an exact sliding window; once it is full the
    start moves every turn, so the KV cache is rebuilt every turn). ``slide == s > 1``: the start
    moves in steps of ``s`` turns, so the engine sees between ``window - s + 1`` and ``window``
    turns and rebuilds its cache only every ``s`` turns. Deterministic in ``n_history``, so the
    cached and the from-scratch paths always see the same turns.
    """
    if window < 0 or slide < 1 or (window and slide > window):
        raise ValueError(f"need window >= 0 and 1 <= slide <= window, got window={window} slide={slide}")
    if window == 0:
        return n_history
    if n_history <= window:
        return 0
    return int(math.ceil((n_history - window) / slide)) * slide


class SequenceBuilder:
    """Encodes turns into ids. ``states_in_prompt``: prefix the CURRENT turn's instruction with the
    absolute states before it, e.g. "[stamina 20 social 55 entertainment 50] " (a deviation from
    the paper, whose sequence has deltas only: in our world low stamina slows the motion, so the
    motion level depends on the absolute stamina, which a short window cannot reconstruct)."""

    def __init__(self, tokenizer, vocab: SpecialVocab, n_query: int, max_instruction_tokens: int = 64,
                 states_in_prompt: bool = True) -> None:
        if n_query < 1:
            raise ValueError(f"n_query must be >= 1, got {n_query}")
        self.tok = tokenizer
        self.vocab = vocab
        self.n_query = int(n_query)
        self.max_instruction_tokens = int(max_instruction_tokens)
        self.states_in_prompt = bool(states_in_prompt)

    def instruction_ids(self, text: str, states: dict[str, int] | None = None) -> list[int]:
        if self.states_in_prompt and states is not None:
            text = "[" + " ".join(f"{k} {int(states[k])}" for k in ("stamina", "social", "entertainment")) + "] " + text
        return self.tok.encode(text)[: self.max_instruction_tokens]

    def encode_turn(self, turn: TurnRecord, current: bool, with_values: bool = True) -> TurnTokens:
        """History turn (current=False) or current turn (True). ``with_values=False`` stops right
        after the opening <ML> tag: the prefix from which the engine decodes."""
        v = self.vocab
        ids = [v["<TURN>"]]
        ids += self.instruction_ids(turn.instruction, turn.states if current else None)
        ids += [v["<img>"], v["<frame>"]]
        q0 = len(ids)
        ids += [v["<Q>"]] * self.n_query
        ids += [v["</frame>"], v["</img>"]]
        offsets: list[int] = []
        classes = None
        if with_values:
            values = turn.values()
            classes = value_classes(values)
            for f, (_, tag, _) in enumerate(FIELDS):
                offsets.append(len(ids))
                value = UNKNOWN_AS if values[f] is None else values[f]
                ids += [v[f"<{tag}>"], v[f"<{tag}={value}>"], v[f"</{tag}>"]]
            ids.append(v["</TURN>"])
        else:
            offsets.append(len(ids))
            ids.append(v[f"<{FIELDS[0][1]}>"])
        return TurnTokens(ids=ids, query_offset=q0, n_query=self.n_query, value_offsets=offsets, value_classes=classes)

    def continuation(self, field: int, value_class: int) -> list[int]:
        """Tokens after choosing ``value_class`` for ``field``: value, close tag, next open tag."""
        v = self.vocab
        _, tag, values = FIELDS[field]
        ids = [v[f"<{tag}={values[value_class]}>"], v[f"</{tag}>"]]
        if field + 1 < len(FIELDS):
            ids.append(v[f"<{FIELDS[field + 1][1]}>"])
        return ids

    def training_sequence(self, history: list[TurnRecord], target: TurnRecord) -> "EngineSequence":
        """History turns (with their s_a) followed by the full target turn."""
        ids: list[int] = []
        rep_positions: list[int] = []
        reps: list[torch.Tensor] = []
        level_positions: list[int] = []
        level_classes: list[int] = []
        for turn in history:
            if turn.s_a is None:
                raise ValueError(f"history turn {turn.instruction!r} has no s_a")
            t = self.encode_turn(turn, current=False)
            rep_positions += range(len(ids) + t.query_offset, len(ids) + t.query_offset + self.n_query)
            reps.append(turn.s_a)
            level_positions.append(len(ids) + t.value_offsets[0])
            level_classes.append(t.value_classes[0])
            ids += t.ids
        cur = self.encode_turn(target, current=True)
        base = len(ids)
        ids += cur.ids
        return EngineSequence(
            ids=torch.tensor(ids, dtype=torch.long),
            rep_positions=torch.tensor(rep_positions, dtype=torch.long),
            reps=torch.stack(reps) if reps else None,
            query_start=base + cur.query_offset,
            value_positions=torch.tensor([base + o for o in cur.value_offsets], dtype=torch.long),
            value_targets=torch.tensor(cur.value_classes, dtype=torch.long),
            target_rep=target.s_a,
            history_level_positions=torch.tensor(level_positions, dtype=torch.long),
            history_level_targets=torch.tensor(level_classes, dtype=torch.long),
        )


@dataclass
class EngineSequence:
    """One training sample as ids + where things sit."""

    ids: torch.Tensor  # (L,) long
    rep_positions: torch.Tensor  # (H*N,) long: history query slots, fed by the input resampler
    reps: torch.Tensor | None  # (H, N, D) history s_a, in rep_positions order
    query_start: int  # current turn's N query slots are query_start .. query_start+N-1
    value_positions: torch.Tensor  # (4,) long: <ML> <SC> <ET> <ST> of the current turn
    value_targets: torch.Tensor  # (4,) long class indices
    target_rep: torch.Tensor | None  # (N, D)
    # each history turn's <ML> tag and its true level class (EngineConfig.history_level_weight)
    history_level_positions: torch.Tensor = dataclass_field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # (H,)
    history_level_targets: torch.Tensor = dataclass_field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # (H,)


def attention_mask(n_new: int, past: int = 0, bidirectional: tuple[int, int] | None = None,
                   key_valid: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean (n_new, past + n_new) mask, True = may attend.

    Row i is the token at absolute position past + i. Causal everywhere, except that the tokens
    in ``bidirectional = (start, end)`` (absolute positions, end exclusive: the current turn's
    query slots) also see each other. ``key_valid`` (past + n_new,) masks padding keys; every row
    always keeps itself, so no softmax row is empty.
    """
    q = torch.arange(past, past + n_new).unsqueeze(1)  # (n_new, 1)
    k = torch.arange(past + n_new).unsqueeze(0)  # (1, past + n_new)
    mask = k <= q  # (n_new, past + n_new)
    if bidirectional is not None:
        s, e = bidirectional
        mask = mask | (((q >= s) & (q < e)) & ((k >= s) & (k < e)))
    if key_valid is not None:
        mask = (mask & key_valid.unsqueeze(0)) | (k == q)
    return mask
