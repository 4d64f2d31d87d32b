"""`animegamer sessions list|delete|export|archive|restore`: saved games, without loading any model."""
from __future__ import annotations

import argparse
import time

from animegamer.game.archive import restore_archive, write_archive
from animegamer.game.characters import CharacterBook
from animegamer.game.store import SessionStore, StoreError, export_session
from animegamer.world.cast import load_cast


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    sessions = subparsers.add_parser("sessions", help="saved games: list, delete, export, archive, restore")
    sessions.add_argument("--store", default=None, metavar="PATH", help="saved-games directory")
    ssub = sessions.add_subparsers(dest="action", metavar="ACTION")
    ssub.required = True
    ssub.add_parser("list", help="saved games, newest first").set_defaults(func=_list)
    d = ssub.add_parser("delete", help="delete a saved game and its clips")
    d.add_argument("id")
    d.set_defaults(func=_delete)
    e = ssub.add_parser("export", help="a game as one MP4 with the states drawn on it + a storyboard PNG")
    e.add_argument("id")
    e.add_argument("--out", default=None, help="output path stem (default: <store>/exports/<id>)")
    e.add_argument("--fps", type=int, default=8)
    e.set_defaults(func=_export)
    a = ssub.add_parser("archive", help="a saved game as one file, with the custom characters it plays (to move "
                                        "or share; `sessions restore` opens it)")
    a.add_argument("id")
    a.add_argument("--out", default=None, help="the file to write (default: <store>/exports/<id>.zip)")
    a.set_defaults(func=_archive)
    r = ssub.add_parser("restore", help="a file of `sessions archive` as a saved game here (prints its id)")
    r.add_argument("file")
    r.set_defaults(func=_restore)


def _store(args: argparse.Namespace):
    return SessionStore(args.store)


def _list(args: argparse.Namespace) -> int:
    rows = _store(args).list_sessions()
    if not rows:
        print("no saved games")
        return 0
    print(f"{'id':<14}{'turns':>6}  {'last played':<17}characters / last instruction")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated_at))
        print(f"{r.id:<14}{r.n_turns:>6}  {when:<17}{', '.join(r.characters)}: {r.last_instruction[:60]}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    try:
        _store(args).delete_session(args.id)
    except StoreError as e:
        raise ValueError(str(e)) from None
    print(f"deleted {args.id}")
    return 0


def _export(args: argparse.Namespace) -> int:
    try:
        mp4, png = export_session(_store(args), args.id, args.out, fps=args.fps)
    except StoreError as e:
        raise ValueError(str(e)) from None
    print(mp4)
    print(png)
    return 0


def _archive(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        print(write_archive(store, CharacterBook(store.root), args.id, args.out))
    except StoreError as e:
        raise ValueError(str(e)) from None
    return 0


def _restore(args: argparse.Namespace) -> int:
    store = _store(args)
    sid = restore_archive(store, CharacterBook(store.root), args.file, list(load_cast()))
    row = store.get_session(sid)
    print(f"restored {sid}: {', '.join(row.characters)}, {row.n_turns} turns "
          f"(animegamer play --open {sid} continues it)")
    return 0
