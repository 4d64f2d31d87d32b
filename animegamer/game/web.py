"""`animegamer play`: the Gradio web page on localhost.

Per browser tab, a ``gr.State`` holds that tab's ``GameSession``: two tabs are two games. Turns
run one at a time (``Game.lock``: the models and the CPU are shared). The page only drives the
session interface (``GameSession.step``, ``Game.open_session``, ...), never the models.
"""
from __future__ import annotations

import functools
import html
import time
from typing import Any

import cv2
import gradio as gr
import numpy as np

from animegamer.core.video_io import read_middle_frame
from animegamer.game.archive import MAX_UPLOAD_BYTES, ArchiveError
from animegamer.game.characters import EXAMPLE as CHARACTER_EXAMPLE
from animegamer.game.session import EXAMPLE, Game, GameInputError, GameSession, Turn
from animegamer.game.store import STATE_COLORS, StoreError
from animegamer.world.instructions import known_adverbs, known_times, verb_phrases
from animegamer.world.rules import STATE_NAMES, initial_states

STAGES = {"thinking": "the engine is thinking", "drawing": "drawing the shot", "saving": "saving the turn",
          "done": "done"}
HISTORY_HEADERS = ["#", "instruction", "motion", "stamina", "social", "fun"]
GALLERY_TURNS = 40  # the timeline shows the newest shots (a long game's page stays as fast); the history lists all
CSS = """
#shot video { object-fit: contain; image-rendering: pixelated; background: #111; }
.ag-bars { display: flex; flex-direction: column; gap: 8px; padding: 6px 2px; }
.ag-row { display: grid; grid-template-columns: 110px 1fr 72px; align-items: center; gap: 8px; }
.ag-name { font-weight: 600; text-transform: capitalize; }
.ag-track { height: 16px; border-radius: 8px; background: #3a3d4a; overflow: hidden; }
.ag-fill { height: 100%; border-radius: 8px; transition: width .4s; }
.ag-val { font-variant-numeric: tabular-nums; text-align: right; }
.ag-meta { opacity: .8; font-size: .95em; margin-bottom: 2px; }
"""


def motion_phrases() -> list[str]:
    return verb_phrases()


def compose_instruction(characters: list[str] | str | None, adverb: str | None, motion: str | None,
                        time_of_day: str | None, place: str | None) -> str:
    """The release's structured form from the helper dropdowns."""
    if isinstance(characters, str):
        characters = [characters]
    chars = ", ".join(c for c in (characters or []) if c) or "?"
    motion_text = " ".join(x for x in (adverb, motion) if x) or "?"
    background = " ".join(x for x in (time_of_day, place) if x) or "?"
    return f"Character: {chars}; Motion: {motion_text}; Background: {background}."


def bars_html(states: dict[str, int] | None, turn: Turn | None = None) -> str:
    states = states or initial_states()
    rows = []
    for name in STATE_NAMES:
        v = int(states[name])
        d = turn.deltas.get(name, 0) if turn else 0
        delta = f" <small>({d:+d})</small>" if d else ""
        r, g, b = STATE_COLORS[name]
        rows.append(f'<div class="ag-row" data-state="{name}" data-value="{v}"><span class="ag-name">{name}</span>'
                    f'<div class="ag-track"><div class="ag-fill" style="width:{v}%;background:rgb({r},{g},{b})"></div></div>'
                    f'<span class="ag-val">{v}{delta}</span></div>')
    meta = (f'<div class="ag-meta">turn {turn.index + 1} &middot; motion level <b>{turn.motion_level}</b> / 5</div>'
            if turn else '<div class="ag-meta">new game: every state starts at 50</div>')
    return f'<div class="ag-bars" id="ag-states">{meta}{"".join(rows)}</div>'


def _text_bar(v: int) -> str:
    n = round(int(v) / 20)
    return "█" * n + "░" * (5 - n) + f" {int(v)}"


def history_rows(session: GameSession | None) -> list[list[Any]]:
    if session is None:
        return []
    return [[t.index + 1, t.instruction, t.motion_level] + [_text_bar(t.states[n]) for n in STATE_NAMES]
            for t in reversed(session.turns)]


def _thumb(f: np.ndarray, min_h: int = 160) -> np.ndarray:
    """A frame zoomed to at least ``min_h`` pixels high."""
    zoom = max(1, -(-min_h // f.shape[0]))
    interp = cv2.INTER_NEAREST if f.shape[0] < 64 else cv2.INTER_LINEAR
    return cv2.resize(f, None, fx=zoom, fy=zoom, interpolation=interp) if zoom > 1 else f


@functools.lru_cache(maxsize=2 * GALLERY_TURNS)
def _clip_thumb(clip: str) -> np.ndarray:
    """A saved shot's thumbnail; clip names are unique, so a cached one never goes stale."""
    return _thumb(read_middle_frame(clip))


def gallery_items(session: GameSession | None) -> list[tuple[np.ndarray, str]]:
    """The newest ``GALLERY_TURNS`` shots, oldest first."""
    if session is None:
        return []
    return [(_clip_thumb(str(t.video_path)), f"{t.index + 1}. {t.instruction}") for t in session.turns[-GALLERY_TURNS:]]


def session_choices(game: Game) -> list[tuple[str, str]]:
    out = []
    for r in game.list_sessions():
        when = time.strftime("%b %d %H:%M", time.localtime(r.updated_at))
        last = f" - {r.last_instruction[:40]}" if r.last_instruction else ""
        out.append((f"{', '.join(r.characters)} · {r.n_turns} turns · {when}{last} [{r.id}]", r.id))
    return out


def page_view(game: Game, session: GameSession | None, message: str) -> tuple:
    """Everything the page shows for a session: state, video, bars, history, gallery, message, title."""
    last = session.turns[-1] if session and session.turns else None
    title = (f"### Game `{session.id}` · {', '.join(session.characters)} · {len(session.turns)} turns"
             if session else "### No game yet: pick characters, type an instruction, press Play")
    return (session, str(last.video_path) if last else None, bars_html(session.states if session else None, last),
            history_rows(session), gallery_items(session), message, title)


def build_app(game: Game) -> gr.Blocks:
    cast = list(game.cast)
    with gr.Blocks(title="AnimeGamer") as demo:
        session_state = gr.State(None)  # this tab's GameSession
        gr.Markdown("# AnimeGamer\nYou are an anime character. Say what happens next: each instruction becomes "
                    "a short animated shot and changes your stamina, social and entertainment. Every turn is saved.")
        title = gr.Markdown("### No game yet: pick characters, type an instruction, press Play", elem_id="ag-title")
        with gr.Row():
            with gr.Column(scale=3):
                video = gr.Video(label="the new shot", autoplay=True, loop=True, height=380, interactive=False,
                                 elem_id="shot")
                bars = gr.HTML(bars_html(None), elem_id="ag-bars-box")
                history = gr.Dataframe(headers=HISTORY_HEADERS, value=[], label="history (newest first)",
                                       interactive=False, wrap=True, elem_id="history", max_height=320,
                                       column_widths=["7%", "38%", "10%", "15%", "15%", "15%"])
            with gr.Column(scale=2):
                instruction = gr.Textbox(label="what happens next?", placeholder=EXAMPLE, lines=2, max_lines=6,
                                         elem_id="instruction")
                with gr.Row():
                    play = gr.Button("Play", variant="primary", elem_id="play")
                message = gr.Markdown("", elem_id="ag-message")
                with gr.Accordion("structured helper (the release's format)", open=False):
                    h_char = gr.Dropdown(cast, value=[cast[0]], multiselect=True, max_choices=2, label="character(s)")
                    with gr.Row():
                        h_adv = gr.Dropdown([a for a in known_adverbs() if a], value="quickly", label="adverb",
                                            allow_custom_value=True)
                        h_motion = gr.Dropdown(motion_phrases(), value="run", label="motion", allow_custom_value=True)
                    with gr.Row():
                        h_time = gr.Dropdown(known_times(), value="day", label="time")
                        places = game.places
                        h_place = gr.Dropdown(places, value="town" if "town" in places else places[0], label="place",
                                              allow_custom_value=True)
                    compose = gr.Button("write it into the box")
                with gr.Accordion("game: characters, restart, saved games, export", open=True):
                    chars = gr.CheckboxGroup(cast, value=[cast[0]], label="characters of a new game",
                                             elem_id="characters")
                    restart = gr.Button("New game with these characters", elem_id="restart")
                    with gr.Row():
                        saved = gr.Dropdown(session_choices(game), label="saved games", scale=4, elem_id="saved")
                        refresh = gr.Button("↻", scale=0, min_width=40)
                    open_btn = gr.Button("Open saved game", elem_id="open")
                    export_btn = gr.Button("Export this game (MP4 + storyboard + saved-game file)", elem_id="export")
                    restore_file = gr.File(label="restore a saved-game file (.zip, from an export)", file_types=[".zip"],
                                           type="filepath", elem_id="restore-file")
                    restore_btn = gr.Button("Restore and open it", elem_id="restore")
                with gr.Accordion("your own character", open=False):
                    new_name = gr.Textbox(label="name", max_lines=1, elem_id="new-name")
                    new_desc = gr.Textbox(label="what they look like", placeholder=CHARACTER_EXAMPLE, lines=2,
                                          elem_id="new-description")
                    new_pic = gr.Image(label="or a picture of them (alone, plain background)", type="filepath",
                                       sources=["upload"], height=160, elem_id="new-picture")
                    add_btn = gr.Button("Add character", elem_id="add-character")
                    new_ref = gr.Image(label="their reference picture", interactive=False, visible=False,
                                       height=160, elem_id="new-reference")
                    files = gr.File(label="export", file_count="multiple", interactive=False, visible=False,
                                    elem_id="export-files")
        gallery = gr.Gallery(label="timeline (click a shot to replay it)", columns=8, height=200,
                             object_fit="contain", allow_preview=False, fit_columns=False, elem_id="timeline")

        view = [session_state, video, bars, history, gallery, message, title]

        def do_play(session: GameSession | None, text: str, characters: list[str], progress=gr.Progress()):
            try:
                if session is None:
                    session = game.new_session(characters or [cast[0]])
                turn = session.step(text, progress=lambda stage, frac: progress(frac, desc=STAGES.get(stage, stage)))
            except GameInputError as e:
                return (*page_view(game, session, f"⚠️ {html.escape(str(e))}"), gr.update(), gr.update())
            except StoreError as e:
                return (*page_view(game, session, f"⚠️ {html.escape(str(e))}"), gr.update(), gr.update())
            msg = (f"turn {turn.index + 1}: motion level {turn.motion_level}, "
                   f"{turn.timings.get('engine_s', 0) + turn.timings.get('decoder_s', 0):.1f} s · clip `{turn.video_path.name}`")
            return (*page_view(game, session, msg), "", gr.update(choices=session_choices(game), value=session.id))

        def do_restart(characters: list[str]):
            try:
                session = game.new_session(characters)
            except GameInputError as e:
                return (*page_view(game, None, f"⚠️ {html.escape(str(e))}"), gr.update())
            return (*page_view(game, session, f"new game with {', '.join(session.characters)}"),
                    gr.update(choices=session_choices(game), value=session.id))

        def do_open(session_id: str | None, current: GameSession | None):
            if not session_id:
                return (*page_view(game, current, "choose a saved game first"), gr.update())
            try:
                session = game.open_session(session_id)
            except StoreError as e:
                return (*page_view(game, current, f"⚠️ {html.escape(str(e))}"), gr.update())
            return (*page_view(game, session, f"continuing game {session.id}"), gr.update(value=session.characters))

        def do_export(session: GameSession | None):
            if session is None or not session.turns:
                return gr.update(value=None, visible=False), "play a turn first: there is nothing to export yet"
            mp4, png = session.export()
            archive = game.archive_session(session.id)
            return (gr.update(value=[str(mp4), str(png), str(archive)], visible=True),
                    f"exported `{mp4.name}`, `{png.name}` and the saved game `{archive.name}` (with your characters)")

        def do_restore(path: str | None, current: GameSession | None):
            if not path:
                return (*page_view(game, current, "choose a saved-game file first"), gr.update(), gr.update())
            try:
                session = game.open_session(game.restore_session(path))
            except (ArchiveError, StoreError) as e:
                return (*page_view(game, current, f"⚠️ {html.escape(str(e))}"), gr.update(), gr.update())
            return (*page_view(game, session, f"restored game {session.id}"),
                    gr.update(choices=list(game.cast), value=session.characters),
                    gr.update(choices=session_choices(game), value=session.id))

        def do_add(name: str, description: str, picture: str | None = None):
            try:
                made = game.add_character(name, description or None, image=picture or None)
            except GameInputError as e:
                return gr.update(), gr.update(visible=False), f"⚠️ {html.escape(str(e))}"
            what = made.spec.description if made.spec else "from your picture"
            if made.fit:  # what the world will draw: the sheet shown beside this note
                what += ", as the sheet shows the world drawing them"
            understood = f" (understood: {', '.join(made.understood)})" if made.understood else ""
            note = f"added **{html.escape(made.name)}**: {html.escape(what + understood)}; start a new game with them"
            if made.fit_note:
                note += f" ⚠️ {html.escape(made.fit_note)}"
            return (gr.update(choices=list(game.cast), value=[made.name]),
                    gr.update(value=str(game.characters.reference_path(made.name)), visible=True), note)

        def do_select(session: GameSession | None, evt: gr.SelectData):
            shown = session.turns[-GALLERY_TURNS:] if session is not None else []
            if evt.index is None or not 0 <= int(evt.index) < len(shown):
                return gr.update()
            return str(shown[int(evt.index)].video_path)

        play_inputs = [session_state, instruction, chars]
        play_outputs = [*view, instruction, saved]
        play.click(do_play, play_inputs, play_outputs, concurrency_limit=1)
        instruction.submit(do_play, play_inputs, play_outputs, concurrency_limit=1)
        compose.click(compose_instruction, [h_char, h_adv, h_motion, h_time, h_place], instruction)
        restart.click(do_restart, [chars], [*view, saved])
        refresh.click(lambda: gr.update(choices=session_choices(game)), None, saved)
        open_btn.click(do_open, [saved, session_state], [*view, chars])
        export_btn.click(do_export, [session_state], [files, message])
        restore_btn.click(do_restore, [restore_file, session_state], [*view, chars, saved])
        gallery.select(do_select, [session_state], video)
        add_btn.click(do_add, [new_name, new_desc, new_pic], [chars, new_ref, message])
        demo.load(lambda: gr.update(choices=session_choices(game)), None, saved)  # games saved since startup
    return demo


def launch(game: Game, host: str = "127.0.0.1", port: int = 7860, block: bool = True, quiet: bool = False):
    """Serve the page. ``block=False`` returns (app, url) with the server running in a thread."""
    demo = build_app(game)
    demo.queue(default_concurrency_limit=4)
    if not quiet:
        print(f"AnimeGamer: open http://{host}:{port} in your browser (saved games: {game.store.root})")
    _, url, _ = demo.launch(server_name=host, server_port=port, allowed_paths=[str(game.store.root)],
                            prevent_thread_lock=not block, quiet=quiet, inbrowser=False, css=CSS,
                            max_file_size=MAX_UPLOAD_BYTES,  # uploads: a saved game or a picture, no more
                            footer_links=[], theme=gr.themes.Soft())
    return demo, url
