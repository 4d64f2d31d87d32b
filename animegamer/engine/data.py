"""Engine training data: sessions -> samples of 1..max_turns consecutive turns -> EngineBatch.

In-memory format (what every source is turned into), a list of sessions, each a list of turns:

    {"instruction": str,
     "s_a": Tensor (N, D),               # E_a of the turn's true shot (phase a)
     "motion_level": int 1..5,
     "deltas": {"stamina": -1|0|1, "social": 0|1, "entertainment": 0|1},
     "states": {"stamina": .., "social": .., "entertainment": ..}}   # optional, BEFORE the turn

A sample ends at turn t (the prediction target) and carries the n-1 turns before it as history
with their TRUE s_a and values (teacher forcing). ``lengths="all"`` enumerates every n in
1..min(t+1, max_turns) (the paper's 1-5 turn samples); ``"max"`` only the longest.

On disk (``save_sessions`` / ``load_sessions``), version 1:
    DIR/engine_meta.json            {"format_version": 1, "rep_tokens": N, "rep_dim": D, "n_sessions": S}
    DIR/engine_sessions.jsonl       one session per line: {"id": str, "turns": [turn without s_a, ...]}
    DIR/engine_reps/{id}.safetensors  {"s_a": (T, N, D) float}
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from animegamer.core.checkpoint import (
    atomic_dir,
    load_json,
    load_safetensors,
    save_json_atomic,
    save_safetensors_atomic,
)
from animegamer.engine.sequence import EngineSequence, SequenceBuilder, TurnRecord, attention_mask

SESSIONS_FORMAT_VERSION = 1
Session = list[dict[str, Any]]


@dataclass
class EngineBatch:
    input_ids: torch.Tensor  # (B, L) long, <PAD> after each sample's end
    attention_mask: torch.Tensor  # (B, 1, L, L) bool, True = may attend
    position_ids: torch.Tensor  # (B, L) long
    rep_index: torch.Tensor  # (M, 2) long (batch, position) of history query slots
    reps: torch.Tensor  # (M, D) the history s_a tokens for those slots
    query_index: torch.Tensor  # (B*N, 2) long: current query slots, batch-major, slot order
    value_positions: torch.Tensor  # (B, 4) long: <ML> <SC> <ET> <ST> of the target turn
    value_targets: torch.Tensor  # (B, 4) long class indices
    target_rep: torch.Tensor  # (B, N, D) float
    n_turns: torch.Tensor  # (B,) long: turns in the sample (history + 1)
    # (K, 3) long: batch row, position of a history turn's <ML> tag, its true level class
    history_levels: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 3, dtype=torch.long))

    def to(self, device: torch.device | str) -> "EngineBatch":
        return EngineBatch(**{k: v.to(device) for k, v in self.__dict__.items()})

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def turn_record(d: dict[str, Any]) -> TurnRecord:
    """A sessions turn; ``deltas`` None (a film annotated without state changes) stays None: unknown."""
    deltas = None if d.get("deltas") is None else {k: int(v) for k, v in d["deltas"].items()}
    return TurnRecord(instruction=d["instruction"], s_a=d.get("s_a"), motion_level=int(d["motion_level"]),
                      deltas=deltas, states=d.get("states"))


class EngineDataset(Dataset):
    def __init__(self, sessions: list[Session], builder: SequenceBuilder, max_turns: int = 5,
                 lengths: str = "all") -> None:
        if max_turns < 1 or lengths not in ("all", "max"):
            raise ValueError(f"need max_turns >= 1 and lengths all|max, got {max_turns}, {lengths!r}")
        self.sessions = [[turn_record(t) for t in s] for s in sessions]
        self.builder = builder
        self.index: list[tuple[int, int, int]] = []  # (session, target turn, n turns)
        for si, s in enumerate(self.sessions):
            for t, turn in enumerate(s):
                if turn.s_a is None:
                    raise ValueError(f"session {si} turn {t} has no s_a")
                turn.values()  # validate now, not mid-training
                top = min(t + 1, max_turns)
                for n in (range(1, top + 1) if lengths == "all" else (top,)):
                    self.index.append((si, t, n))

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> EngineSequence:
        si, t, n = self.index[i]
        s = self.sessions[si]
        return self.builder.training_sequence(s[t - n + 1:t], s[t])


class EngineCollate:
    """Right-pads EngineSequences into an EngineBatch with per-sample 4D masks."""

    def __init__(self, pad_id: int, n_query: int) -> None:
        self.pad_id = int(pad_id)
        self.n_query = int(n_query)

    def __call__(self, seqs: list[EngineSequence]) -> EngineBatch:
        B, N = len(seqs), self.n_query
        L = max(int(s.ids.shape[0]) for s in seqs)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros(B, 1, L, L, dtype=torch.bool)
        rep_index, reps, query_index, history_levels = [], [], [], []
        for b, s in enumerate(seqs):
            n = int(s.ids.shape[0])
            ids[b, :n] = s.ids
            valid = torch.arange(L) < n
            mask[b, 0] = attention_mask(L, 0, (s.query_start, s.query_start + N), key_valid=valid)
            if s.reps is not None:
                rep_index.append(torch.stack([torch.full_like(s.rep_positions, b), s.rep_positions], 1))
                reps.append(s.reps.reshape(-1, s.reps.shape[-1]))
            qp = torch.arange(s.query_start, s.query_start + N)
            query_index.append(torch.stack([torch.full_like(qp, b), qp], 1))
            hp = s.history_level_positions
            history_levels.append(torch.stack([torch.full_like(hp, b), hp, s.history_level_targets], 1))
        D = seqs[0].target_rep.shape[-1]
        return EngineBatch(
            input_ids=ids,
            attention_mask=mask,
            position_ids=torch.arange(L).unsqueeze(0).expand(B, L).contiguous(),
            rep_index=torch.cat(rep_index) if rep_index else torch.zeros(0, 2, dtype=torch.long),
            reps=torch.cat(reps).float() if reps else torch.zeros(0, D),
            query_index=torch.cat(query_index),
            value_positions=torch.stack([s.value_positions for s in seqs]),
            value_targets=torch.stack([s.value_targets for s in seqs]),
            target_rep=torch.stack([s.target_rep for s in seqs]).float(),
            n_turns=torch.tensor([1 + (0 if s.reps is None else s.reps.shape[0]) for s in seqs]),
            history_levels=torch.cat(history_levels),
        )


# --------------------------------------------------------------------- on disk
def save_sessions(sessions: list[Session], out_dir: str | Path, ids: list[str] | None = None) -> Path:
    """Write sessions in the on-disk format above (atomically, as one directory)."""

    ids = ids or [f"s{i:06d}" for i in range(len(sessions))]
    first = sessions[0][0]["s_a"]
    with atomic_dir(out_dir) as tmp:
        lines = []
        for sid, s in zip(ids, sessions):
            save_safetensors_atomic({"s_a": torch.stack([t["s_a"] for t in s]).float()},
                                    tmp / "engine_reps" / f"{sid}.safetensors")
            lines.append(json.dumps({"id": sid, "turns": [{k: v for k, v in t.items() if k != "s_a"} for t in s]}))
        (tmp / "engine_sessions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        save_json_atomic({"format_version": SESSIONS_FORMAT_VERSION, "rep_tokens": int(first.shape[0]),
                          "rep_dim": int(first.shape[1]), "n_sessions": len(sessions)}, tmp / "engine_meta.json")
    return Path(out_dir)


def load_sessions(data_dir: str | Path, limit: int | None = None) -> tuple[list[Session], dict[str, Any]]:
    """Read ``save_sessions`` output: (sessions with their s_a tensors, meta)."""

    data_dir = Path(data_dir)
    meta = load_json(data_dir / "engine_meta.json")
    if meta.get("format_version") != SESSIONS_FORMAT_VERSION:
        raise ValueError(f"{data_dir}: sessions format {meta.get('format_version')!r}, expected {SESSIONS_FORMAT_VERSION}")
    sessions: list[Session] = []
    with open(data_dir / "engine_sessions.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            reps = load_safetensors(data_dir / "engine_reps" / f"{rec['id']}.safetensors")["s_a"]  # (T, N, D)
            if reps.shape[0] != len(rec["turns"]) or tuple(reps.shape[1:]) != (meta["rep_tokens"], meta["rep_dim"]):
                raise ValueError(f"session {rec['id']}: s_a shape {tuple(reps.shape)} does not match "
                                 f"{len(rec['turns'])} turns x ({meta['rep_tokens']}, {meta['rep_dim']})")
            sessions.append([{**t, "s_a": reps[i]} for i, t in enumerate(rec["turns"])])
            if limit is not None and len(sessions) >= limit:
                break
    return sessions, meta


# --------------------------------------------------------------------- synthetic sessions
_CHARS = ("Qiqi", "Pazu", "Sosuke", "Ponyo", "Kiki", "Jiji")
_PLACES = ("forest", "town", "beach", "bedroom", "sky")
# verb: (base motion level, stamina delta, social, entertainment)
_VERBS = {"run": (4, -1, 0, 0), "walk": (2, 0, 0, 0), "sleep": (1, 1, 0, 0), "talk": (1, 0, 1, 0),
          "dance": (4, -1, 0, 1), "read": (1, 1, 0, 0), "wave": (2, 0, 1, 0), "play": (3, 0, 1, 1)}
_ADVERBS = {"": 0, "quickly": 1, "slowly": -1, "happily": 0}


def synthetic_sessions(n_sessions: int, n_turns: int, rep_tokens: int, rep_dim: int, seed: int = 0) -> list[Session]:
    """Sessions with a known structure, for tests and smoke runs (not the world generator).

    s_a = character vectors (first quarter of the tokens) | place + a per-session prop vector that
    no instruction mentions (second quarter: only history can recover it) | verb vectors, plus
    noise. Motion level = verb base + adverb, one lower when stamina < 30; deltas from the verb
    ("happily" adds entertainment).
    """
    g = np.random.default_rng(seed)
    table = {k: g.standard_normal(rep_dim).astype(np.float32) for k in (*_CHARS, *_PLACES, *_VERBS)}
    q = max(rep_tokens // 4, 1)
    sessions = []
    for _ in range(n_sessions):
        props = g.standard_normal(rep_dim).astype(np.float32)
        char = _CHARS[g.integers(len(_CHARS))]
        place = _PLACES[g.integers(len(_PLACES))]
        states = {"stamina": int(g.integers(2, 19)) * 5, "social": 50, "entertainment": 50}
        turns = []
        for _t in range(n_turns):
            if g.random() < 0.3:
                place = _PLACES[g.integers(len(_PLACES))]
                props = g.standard_normal(rep_dim).astype(np.float32)
            verb = list(_VERBS)[g.integers(len(_VERBS))]
            adverb = list(_ADVERBS)[g.integers(len(_ADVERBS))]
            base, st, so, et = _VERBS[verb]
            level = int(np.clip(base + _ADVERBS[adverb] - (1 if states["stamina"] < 30 else 0), 1, 5))
            deltas = {"stamina": st, "social": so, "entertainment": int(et or adverb == "happily")}
            s_a = np.empty((rep_tokens, rep_dim), dtype=np.float32)
            s_a[:q] = table[char]
            s_a[q:2 * q] = table[place] + props
            s_a[2 * q:] = table[verb]
            s_a += 0.1 * g.standard_normal(s_a.shape).astype(np.float32)
            text = f"Character: {char}; Motion: {(adverb + ' ') if adverb else ''}{verb}; Background: day {place}."
            turns.append({"instruction": text, "s_a": torch.from_numpy(s_a), "motion_level": level,
                          "deltas": deltas, "states": dict(states)})
            states = {k: min(100, max(0, states[k] + 5 * deltas[k])) for k in states}
        sessions.append(turns)
    return sessions
