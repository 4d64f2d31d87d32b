"""What a person says of each clip: the template `ingest` writes, reading it back, applying it.

A CSV (or a JSON list of objects) with a header of ``COLUMNS``; a row names its clips either by
``clip`` (the clip id of the template, e.g. ``3fa2c1d09e8b7a65_00012``) or by ``source`` (the video's
file name) with ``start_s`` / ``end_s``: then it applies to every clip of that video whose middle
lies in [start_s, end_s), so one row can annotate a whole shot or scene. Rows apply in file order
(a later row overrides an earlier one, e.g. a scene row then one clip's correction). Empty cells
mean "not known". A row naming a clip that does not exist, a video that was not ingested or a time
past its end is an error (nothing is written); a range that holds no clip (a shot too short for
one) is listed in meta.json as unused.

Fields: ``characters`` (names separated by ``;``), ``motion_text`` (what they do, e.g. "quickly
run"), ``motion`` / ``adverb`` (the world's verb id and adverb, optional), ``place``, ``time``
(day / sunset / night), the state changes ``stamina`` (-1/0/1), ``social`` (0/1),
``entertainment`` (0/1), ``instruction`` (the player's words; composed in the release's structured
form when empty) and ``caption``. ``motion_level`` in the template is what was measured (read only).
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from animegamer.core.atomic_io import write_text
from animegamer.ingest.video import IngestError
from animegamer.world.rules import DELTA_VALUES, STATE_NAMES, apply_deltas, initial_states

COLUMNS = ("clip", "source", "start_s", "end_s", "motion_level", "characters", "motion_text", "motion", "adverb",
           "place", "time", "stamina", "social", "entertainment", "instruction", "caption")
TEXT_FIELDS = ("motion_text", "motion", "adverb", "place", "time", "instruction", "caption")
MAX_TEXT = 500


def clip_id(row: dict[str, Any]) -> str:
    return Path(row["shot"]).stem


def _cell(value: Any) -> str:
    return "" if value is None else ";".join(value) if isinstance(value, list) else str(value)


def write_template(path: str | os.PathLike, rows: list[dict[str, Any]]) -> Path:
    """Every clip with what was measured and what is annotated so far (atomic)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    for r in rows:
        d = r.get("deltas") or {}
        w.writerow([clip_id(r), r["source"]["file"], r["source"]["start_s"], r["source"]["end_s"], r["motion_level"],
                    _cell(r["characters"])] + [_cell(r.get(k)) for k in ("motion_text", "motion", "adverb", "place",
                                                                         "time")]
                   + [_cell(d.get(k)) for k in STATE_NAMES] + [_cell(r.get("instruction")), _cell(r.get("caption"))])
    return write_text(path, buf.getvalue())


def _number(value: str, what: str, where: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise IngestError(f"{where}: {what} must be a number of seconds, got {value!r}") from None


def _parse(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """One annotation row, checked: its selector and the fields it sets."""
    unknown = sorted(k for k in raw if k not in COLUMNS)
    if unknown:
        raise IngestError(f"{where}: unknown column(s) {', '.join(unknown)}; the columns are {', '.join(COLUMNS)}")
    cells = {k: str(v).strip() for k, v in raw.items() if v is not None and str(v).strip() != ""}
    row: dict[str, Any] = {"where": where}
    if "clip" in cells:
        row["clip"] = cells["clip"]
    elif {"source", "start_s", "end_s"} <= set(cells):
        row["source"] = cells["source"]
        row["start_s"] = _number(cells["start_s"], "start_s", where)
        row["end_s"] = _number(cells["end_s"], "end_s", where)
        if row["end_s"] <= row["start_s"]:
            raise IngestError(f"{where}: end_s {row['end_s']} is not after start_s {row['start_s']}")
    else:
        raise IngestError(f"{where}: name the clips with 'clip', or with 'source', 'start_s' and 'end_s'")
    sets: dict[str, Any] = {}
    if "characters" in cells:
        names = [n.strip() for n in cells["characters"].replace(",", ";").split(";") if n.strip()]
        if not names or any(len(n) > 40 for n in names):
            raise IngestError(f"{where}: characters must be names of at most 40 characters separated by ';'")
        sets["characters"] = names
    for k in TEXT_FIELDS:
        if k in cells:
            if len(cells[k]) > MAX_TEXT:
                raise IngestError(f"{where}: {k} is {len(cells[k])} characters long; keep it to {MAX_TEXT}")
            sets[k] = cells[k]
    given = [k for k in STATE_NAMES if k in cells]
    if given and len(given) != len(STATE_NAMES):
        raise IngestError(f"{where}: give all three state changes ({', '.join(STATE_NAMES)}) or none")
    if given:
        deltas = {}
        for k in STATE_NAMES:
            try:
                v = int(float(cells[k]))
            except ValueError:
                v = None
            if v not in DELTA_VALUES[k] or float(cells[k]) != v:
                raise IngestError(f"{where}: {k} must be one of {DELTA_VALUES[k]}, got {cells[k]!r}")
            deltas[k] = v
        sets["deltas"] = deltas
    if not sets:
        raise IngestError(f"{where}: the row sets nothing (fill characters, motion_text, place, ...)")
    row["sets"] = sets
    return row


def read_annotations(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a CSV or JSON annotation file, checked (IngestError says which row and why)."""
    p = Path(path)
    if not p.is_file():
        raise IngestError(f"{p}: no such annotation file")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise IngestError(f"{p}: not UTF-8 text") from None
    if p.suffix.lower() == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise IngestError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
            raise IngestError(f"{p}: a JSON annotation file is a list of objects, one per row")
        items = [(f"{p.name} item {i}", r) for i, r in enumerate(raw)]
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise IngestError(f"{p}: empty; expected a header row ({', '.join(COLUMNS)})")
        items = []
        for r in reader:
            if None in r:
                raise IngestError(f"{p} line {reader.line_num}: more cells than the header has columns")
            items.append((f"{p.name} line {reader.line_num}", r))
    rows = []
    for where, r in items:
        if not any(str(v or "").strip() for k, v in r.items() if k not in ("clip", "source", "start_s", "end_s",
                                                                          "motion_level")):
            continue  # a template row nobody filled in
        rows.append(_parse(r, where))
    if not rows:
        raise IngestError(f"{p}: no row annotates anything (fill characters, motion_text, place, ... of some clips)")
    return rows


def _matches(note: dict[str, Any], row: dict[str, Any]) -> bool:
    if "clip" in note:
        return clip_id(row) == note["clip"]
    src = row["source"]
    mid = (src["start_s"] + src["end_s"]) / 2
    return note["source"] in (src["file"], Path(src["file"]).stem) and note["start_s"] <= mid < note["end_s"]


def compose_instruction(row: dict[str, Any]) -> str | None:
    """The release's structured form from what is known, or None when the characters or motion are not."""
    if not row["characters"] or not row.get("motion_text"):
        return None
    background = " ".join(x for x in (row.get("time"), row.get("place")) if x) or "?"
    return f"Character: {', '.join(row['characters'])}; Motion: {row['motion_text']}; Background: {background}."


def _names_nothing(note: dict[str, Any], durations: dict[str, float]) -> bool:
    """A clip id that does not exist, a video not ingested, or a range outside the video."""
    if "clip" in note:
        return True  # only called for notes that matched no clip
    duration = durations.get(note["source"])
    return duration is None or note["start_s"] >= duration


def apply_annotations(rows: list[dict[str, Any]], notes: list[dict[str, Any]],
                      durations: dict[str, float]) -> dict[str, Any]:
    """Fill ``rows`` in place from the checked ``notes``. ``durations``: each video's seconds, by file
    name and by stem. A note naming no clip, no ingested video or a time outside it is an IngestError
    (rows unchanged); a range inside a video that holds no clip (a shot too short for one) is only
    counted. Sessions whose every turn has state changes get their absolute states."""
    hits = [[i for i, r in enumerate(rows) if _matches(n, r)] for n in notes]
    orphans = [n["where"] for n, h in zip(notes, hits) if not h and _names_nothing(n, durations)]
    if orphans:
        shown = "; ".join(orphans[:10]) + (f" and {len(orphans) - 10} more" if len(orphans) > 10 else "")
        raise IngestError(f"annotation rows that match no clip ({shown}): check the clip ids, the source file "
                          "names and the time ranges against annotations_template.csv")
    unused = [n["where"] for n, h in zip(notes, hits) if not h]
    touched = set()
    for n, h in zip(notes, hits):
        for i in h:
            rows[i].update({k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                            for k, v in n["sets"].items()})
            touched.add(i)
    for i in touched:
        r = rows[i]
        if "instruction" not in r or r["instruction"] is None:
            r["instruction"] = compose_instruction(r)
        if r.get("caption") is None and r["instruction"] is not None:
            r["caption"] = f"{', '.join(r['characters'])} {r['motion_text']}, " + " ".join(
                x for x in (r.get("time"), r.get("place")) if x)
        r["annotated"] = bool(r["characters"] and r.get("motion_text"))
    sessions: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        sessions.setdefault(r["session"], []).append(r)
    for turns in sessions.values():
        if all(t.get("deltas") for t in turns):
            states = initial_states()
            for t in sorted(turns, key=lambda t: t["turn"]):
                t["states_before"], states = states, apply_deltas(states, t["deltas"])
                t["states_after"] = states
    return {"annotation_rows": len(notes), "clips_annotated": len(touched), "annotation_rows_without_clip": unused}
