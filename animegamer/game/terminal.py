"""`animegamer play --terminal`: the game in a terminal (rich). Each clip is written to a file
(the saved game's MP4) and its path shown with the motion level, the state bars and the history.

Commands: /new [names], /open ID, /list, /export, /history, /help, /quit. Anything else is an
instruction for the current game.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from animegamer.game.session import EXAMPLE, Game, GameInputError, GameSession, Turn
from animegamer.game.store import StoreError
from animegamer.world.rules import STATE_NAMES

COLORS = {"stamina": "green", "social": "blue", "entertainment": "dark_orange"}
HELP = f"""Type what happens next, e.g. [bold]{EXAMPLE}[/] or [bold]Qiqi sits under a tree and reads[/].
Commands: [bold]/new[/] \\[names]  start a new game   [bold]/open[/] ID  continue a saved game
          [bold]/list[/]  saved games               [bold]/export[/]  this game as MP4 + storyboard PNG
          [bold]/history[/]  this game's turns      [bold]/quit[/]"""


def state_bars(states: dict[str, int], deltas: dict[str, int] | None = None, width: int = 30) -> Table:
    t = Table.grid(padding=(0, 1))
    for name in STATE_NAMES:
        v = int(states[name])
        n = round(width * v / 100)
        d = (deltas or {}).get(name, 0)
        bar = Text("█" * n, style=COLORS[name]) + Text("░" * (width - n), style="grey35")
        t.add_row(Text(f"{name:<13}"), bar, Text(f"{v:>3}" + (f" ({d:+d})" if d else "")))
    return t


def history_table(session: GameSession, last: int = 12) -> Table:
    t = Table(title=f"game {session.id} · {', '.join(session.characters)}", show_lines=False)
    t.add_column("turn", justify="right")
    t.add_column("instruction", overflow="fold", max_width=60)
    t.add_column("motion", justify="center")
    for name in STATE_NAMES:
        t.add_column(name, justify="right", style=COLORS[name])
    for turn in session.turns[-last:]:
        t.add_row(str(turn.index + 1), turn.instruction, str(turn.motion_level),
                  *(str(turn.states[n]) for n in STATE_NAMES))
    return t


def turn_panel(turn: Turn) -> Panel:
    body = Table.grid(padding=(0, 1))
    body.add_row(Text(f"motion level {turn.motion_level} / 5", style="bold"))
    body.add_row(state_bars(turn.states, turn.deltas))
    body.add_row(Text(f"clip: {turn.video_path}", style="cyan"))
    secs = turn.timings.get("engine_s", 0) + turn.timings.get("decoder_s", 0)
    return Panel(body, title=f"turn {turn.index + 1}: {turn.instruction[:70]}", subtitle=f"{secs:.1f} s")


class TerminalGame:
    def __init__(self, game: Game, console: Console | None = None,
                 ask: Callable[[str], str] | None = None) -> None:
        self.game = game
        self.console = console or Console()
        self.ask = ask or (lambda prompt: self.console.input(prompt))
        self.session: GameSession | None = None

    # ------------------------------------------------------------------------- commands
    def new(self, names: str | list[str] | None = None) -> None:
        c = self.console
        while True:
            if not names:
                c.print(f"characters: {', '.join(self.game.cast)}")
                names = self.ask("who do you play? (one or more names, comma separated) > ").strip()
            try:
                self.session = self.game.new_session(names)
                break
            except GameInputError as e:
                c.print(f"[red]{e}[/]")
                names = None
        c.print(f"[green]new game {self.session.id}[/] with {', '.join(self.session.characters)}")
        c.print(state_bars(self.session.states))

    def open(self, session_id: str) -> None:
        try:
            self.session = self.game.open_session(session_id.strip())
        except StoreError as e:
            self.console.print(f"[red]{e}[/]")
            return
        self.console.print(f"[green]continuing game {self.session.id}[/] ({len(self.session.turns)} turns)")
        if self.session.turns:
            self.console.print(history_table(self.session))
        self.console.print(state_bars(self.session.states))

    def list(self) -> None:
        rows = self.game.list_sessions()
        if not rows:
            self.console.print("no saved games")
            return
        t = Table(title="saved games (newest first)")
        for col in ("id", "turns", "last played", "characters", "last instruction"):
            t.add_column(col)
        for r in rows:
            t.add_row(r.id, str(r.n_turns), time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated_at)),
                      ", ".join(r.characters), r.last_instruction[:50])
        self.console.print(t)

    def export(self) -> None:
        if self.session is None or not self.session.turns:
            self.console.print("[yellow]play a turn first: nothing to export yet[/]")
            return
        with self.console.status("exporting..."):
            mp4, png = self.session.export()
        self.console.print(f"[green]exported[/] {mp4}\n         {png}")

    def play(self, text: str) -> Turn | None:
        if self.session is None:
            self.new()
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                      console=self.console, transient=True) as bar:
            task = bar.add_task("the engine is thinking", total=1.0)
            stages = {"thinking": "the engine is thinking", "drawing": "drawing the shot", "saving": "saving"}

            def progress(stage: str, frac: float) -> None:
                bar.update(task, completed=frac, description=stages.get(stage, stage))

            try:
                turn = self.session.step(text, progress=progress)
            except (GameInputError, StoreError) as e:
                bar.stop()
                self.console.print(f"[red]{e}[/]")
                return None
        self.console.print(turn_panel(turn))
        return turn

    def handle(self, line: str) -> bool:
        """One line of input; False means quit."""
        line = line.strip()
        if not line.startswith("/"):
            self.play(line)
            return True
        cmd, _, arg = line.partition(" ")
        cmd = cmd.lower()
        if cmd in ("/quit", "/exit", "/q"):
            return False
        if cmd == "/new":
            self.new(arg or None)
        elif cmd == "/open":
            if arg:
                self.open(arg)
            else:
                self.list()
                self.console.print("usage: /open ID")
        elif cmd == "/list":
            self.list()
        elif cmd == "/export":
            self.export()
        elif cmd == "/history":
            if self.session:
                self.console.print(history_table(self.session, last=10_000))
        elif cmd == "/help":
            self.console.print(HELP)
        else:
            self.console.print(f"[red]unknown command {cmd}[/]\n{HELP}")
        return True

    def run(self, open_id: str | None = None, characters: str | None = None) -> int:
        c = self.console
        c.print(Panel("You are an anime character. Say what happens next: each instruction becomes an animated "
                      "shot (saved as an MP4) and changes your stamina, social and entertainment.\n" + HELP,
                      title="AnimeGamer"))
        c.print(f"saved games: {self.game.store.root}")
        if open_id:
            self.open(open_id)
        if self.session is None:
            self.new(characters)
        while True:
            try:
                line = self.ask(f"[bold]{self.session.id if self.session else ''}>[/] ")
            except (EOFError, KeyboardInterrupt):
                c.print()
                break
            if not self.handle(line):
                break
        if self.session is not None:
            c.print(f"game {self.session.id} is saved: [bold]animegamer play --terminal --open {self.session.id}[/]")
        return 0


def run_terminal(game: Game, open_id: str | None = None, characters: str | None = None) -> int:
    return TerminalGame(game).run(open_id=open_id, characters=characters)
