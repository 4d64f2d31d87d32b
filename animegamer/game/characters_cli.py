"""`animegamer characters add|list|remove`: the player's own characters, without loading any model."""
from __future__ import annotations

import argparse
import time

from animegamer.game.characters import CharacterBook, CharacterError
from animegamer.game.store import default_store_dir
from animegamer.world.cast import load_cast


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("characters", help="your own characters: add one from a description, list, remove")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="saved-games directory they are kept in (default: $ANIMEGAMER_SAVES or the user data dir)")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    a = sub.add_parser("add", help="a new character from a description (hair, outfit, accessories, girl / boy) "
                                   "and / or a picture")
    a.add_argument("name")
    a.add_argument("--description", default=None,
                   help="e.g. 'a girl with short green hair in a red hoodie, with a scarf'")
    a.add_argument("--image", default=None, metavar="PICTURE",
                   help="a picture of the character alone on a plain background, in the world's drawing style "
                        "(PNG, JPEG, ...; what is drawn when given)")
    a.set_defaults(func=_add)
    sub.add_parser("list", help="your characters, newest last").set_defaults(func=_list)
    r = sub.add_parser("remove", help="forget a character (saved games keep their shots)")
    r.add_argument("name")
    r.set_defaults(func=_remove)


def _book(args: argparse.Namespace) -> CharacterBook:
    return CharacterBook(default_store_dir() if args.store is None else args.store)


def _add(args: argparse.Namespace) -> int:
    book = _book(args)
    try:
        made = book.add(args.name, args.description, taken=list(load_cast()), image=args.image)
    except CharacterError as e:
        raise ValueError(str(e)) from None
    print(f"added {made.name}: " + (made.spec.description if made.spec else "from the picture"))
    if made.understood:
        print(f"understood: {', '.join(made.understood)}")
    if made.fit_note:
        print(f"note: {made.fit_note}")
    print(f"reference sheet (how the world draws them): {book.reference_path(made.name)} (play them: animegamer play, "
          f"new game with {made.name})")
    return 0


def _list(args: argparse.Namespace) -> int:
    chars = _book(args).list()
    if not chars:
        print("no characters of your own yet: animegamer characters add NAME --description '...'")
    for c in chars:
        when = time.strftime("%Y-%m-%d", time.localtime(c.created_at))
        print(f"{c.name:<16}{when}  " + (c.spec.description if c.spec else "") + (" (from a picture)" if c.sprite else ""))
    return 0


def _remove(args: argparse.Namespace) -> int:
    try:
        _book(args).remove(args.name)
    except CharacterError as e:
        raise ValueError(str(e)) from None
    print(f"removed {args.name}")
    return 0
