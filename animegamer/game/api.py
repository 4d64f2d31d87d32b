"""`animegamer serve`: the game as an HTTP JSON API (FastAPI), over the same ``Game`` and store as
the web page, so a game started by a program can be reopened in the browser and the other way round.

    app = create_app(Game.load(), ServeConfig(api_key="..."))    # uvicorn.run(app, ...)

    POST   /games                          {"characters": ["Qiqi"], "seed": 7}       -> 201 game
    POST   /games/{id}/turns               {"instruction": "Qiqi runs in the town"}  -> 201 turn
    GET    /games | /games/{id} | /games/{id}/turns/{n} | /characters | /health
    POST   /characters                     {"name": "Neko", "description": "..."}      -> 201 (your own character)
    POST   /characters/{name}/picture      the picture's bytes (image/png, image/jpeg, ...)  -> 201 (from a picture)
    GET    /games/{id}/turns/{n}/clip.mp4  the turn's shot
    POST   /games/{id}/export              -> {"video_url", "storyboard_url"}
    GET    /games/{id}/export.mp4 | /games/{id}/export.png
    GET    /games/{id}/archive.zip         the saved game as one file, with its custom characters
    POST   /games/restore                  such a file's bytes (application/zip)   -> 201 game (restored here)
    DELETE /games/{id}                     -> 204
    OpenAPI docs at /docs (and /redoc), the schema at /openapi.json; served offline.

Concurrency. Turns of one game are serialised (a lock per game, taken before anything else, so a
game's waiting turns hold no slot); up to ``max_active_games`` games' turns run at once (the
models themselves run one turn at a time under ``Game.lock``; what overlaps is the clip writing
and saving); up to ``max_queue`` more turns wait. Beyond that a turn gets 429 with Retry-After.
Restores and picture uploads are heavy too: they take a place and a slot exactly as a turn does.
Turns run in worker threads, so reads (listing games, downloading clips) are served meanwhile.

Trust (docs/trust.md). Bodies are bounded (``max_body_bytes`` for JSON, the picture limit for a
picture, ``max_restore_bytes`` for a saved game, which is spooled to a temporary file, not held in
memory). A restored file is checked whole before anything is written (game/archive.py). Without an
API key the server is on this machine only (``check_exposure``), and a request that changes
something and carries an ``Origin`` must come from a page of this server on a loopback address: a
web page the player opens elsewhere cannot post to it (nor through DNS rebinding); the raw-body
routes also take only their own content types, which a cross-site form cannot send.

Errors: every error is JSON ``{"error": "..."}`` with a 4xx status that says what was wrong:
400 (malformed JSON), 401 (API key), 403 (a change asked by a page of another origin), 404 (unknown
game, turn or route), 409 (the game was changed elsewhere at the same moment), 413 (body over
``max_body_bytes``, by Content-Length or while streaming; a picture: over the characters' picture
limit; a saved game: over ``max_restore_bytes``), 415 (a picture or a saved game sent as another
content type), 422 (wrong fields or types, an instruction the game refuses, a picture it cannot use,
a saved-game file it cannot restore), 429 (queue full). A refused request saves nothing.

Game ids and turn numbers are the only names taken from a URL: an id must match ``GAME_ID`` and
files are found through the store's rows, never by a path from the request.
"""
from __future__ import annotations

import collections
import contextlib
import re
import secrets
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO
from urllib.parse import urlsplit

import anyio
from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as UrlPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from animegamer.game.archive import MAX_UPLOAD_BYTES, ArchiveError
from animegamer.game.characters import MAX_PICTURE_BYTES, PICTURE_TYPES, CustomCharacter
from animegamer.game.session import Game, GameInputError, GameSession, Turn
from animegamer.game.store import GAME_ID, SessionRow, StoreError, TurnRow
from animegamer.world.rules import initial_states

PICTURE_PATH = r"/characters/[^/]+/picture"  # the routes whose body is a file, not small JSON: a picture
RESTORE_PATH = "/games/restore"  # and a saved game
ARCHIVE_TYPES = ("application/zip", "application/x-zip-compressed")  # what browsers and curl call a .zip
SPOOL_BYTES = 8 * 1024**2  # a saved game's upload beyond this goes to a temporary file, not memory
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
MAX_SEED = 2**63 - 1
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DOCS_STATIC = "/static-offline-docs"  # the docs pages' scripts, served from the package (no CDN: works offline)
# served without the API key: a load balancer's probe, and the docs (the schema, no game data), which a
# browser opens without headers
OPEN_PATHS = ("/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")

GameId = Annotated[str, UrlPath(pattern=GAME_ID, description="a game's id, as POST /games returned it")]
TurnIndex = Annotated[int, UrlPath(ge=0, le=10**9, description="0-based turn number")]


@dataclass
class ServeConfig:
    """How much the server takes on at once, and who may call it."""

    max_active_games: int = 2  # games whose turns run at the same time
    max_queue: int = 8  # turns that may wait beyond those; more get 429
    retry_after_s: int = 5  # what a 429 tells the client to wait
    max_body_bytes: int = 16 * 1024  # requests are small JSON; anything larger is refused unread
    max_restore_bytes: int = MAX_UPLOAD_BYTES  # a saved game to restore (spooled to a temporary file)
    api_key: str | None = None  # when set, every request but OPEN_PATHS needs it (Authorization: Bearer, X-API-Key)
    open_sessions: int = 32  # games kept open in memory (least recently played are closed)

    def __post_init__(self) -> None:
        if self.max_active_games < 1 or self.max_queue < 0:
            raise ValueError(f"max_active_games must be >= 1 and max_queue >= 0, got {self.max_active_games} "
                             f"and {self.max_queue}")
        if self.max_body_bytes < 1024 or self.max_restore_bytes < 1024 or self.open_sessions < 1 or \
                self.retry_after_s < 1:
            raise ValueError("max_body_bytes and max_restore_bytes must be >= 1024, open_sessions and "
                             "retry_after_s >= 1")
        if self.api_key is not None and len(self.api_key) < 8:
            raise ValueError("the API key must be at least 8 characters")


# ----------------------------------------------------------------------------- request / response bodies
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, unknown fields are mistakes


class NewGame(_Strict):
    characters: list[str] = Field(min_length=1, max_length=10, description="cast names (GET /characters)")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="same seed and instructions, same game")
    states: dict[str, int] | None = Field(None, description="start states (stamina, social, entertainment: 0..100)")


class NewCharacter(_Strict):
    name: str = Field(min_length=1, max_length=40, description="how instructions name them")
    description: str = Field(min_length=1, max_length=500,
                             description="what they look like: hair colour and style, outfit, accessories, girl / boy")


class CharacterOut(BaseModel):
    name: str
    description: str
    understood: list[str]
    reference_url: str
    note: str | None = Field(None, description="set when a picture was not redrawn well by the world's generator")


class NewTurn(_Strict):
    instruction: str = Field(description="what happens next: free text or the release's "
                                         "'Character: ..; Motion: ..; Background: ..' form")


class TurnOut(BaseModel):
    index: int
    instruction: str
    motion_level: int = Field(description="the engine's motion level, 1 (still) .. 5 (fast)")
    deltas: dict[str, int] = Field(description="the engine's state changes this turn (x5 per step)")
    states_before: dict[str, int]
    states: dict[str, int] = Field(description="absolute states after the turn, 0..100")
    seed: int
    clip_url: str
    timings: dict[str, float]


class GameOut(BaseModel):
    id: str
    characters: list[str]
    seed: int
    n_turns: int
    states: dict[str, int]
    created_at: float
    updated_at: float
    last_instruction: str
    turns: list[TurnOut] | None = Field(None, description="every turn (GET /games/{id} only)")


class ExportOut(BaseModel):
    video_url: str
    storyboard_url: str


class ErrorOut(BaseModel):
    error: str


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


# ----------------------------------------------------------------------------- the games the server holds
class GameHall:
    """The server's side of ``Game``: open sessions, per-game locks, the turn queue."""

    def __init__(self, game: Game, config: ServeConfig) -> None:
        self.game, self.config = game, config
        self._guard = threading.Lock()  # protects the dicts and the counter below
        self._locks: dict[str, threading.Lock] = {}
        self._open: collections.OrderedDict[str, GameSession] = collections.OrderedDict()
        self._waiting = 0
        self._slots = threading.BoundedSemaphore(config.max_active_games)
        self.limiter = anyio.CapacityLimiter(config.max_active_games + config.max_queue + 1)

    def row(self, gid: str) -> SessionRow:
        try:
            return self.game.store.get_session(gid)
        except StoreError:
            raise ApiError(404, f"no game {gid!r} (GET /games lists them)") from None

    def _lock(self, gid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(gid, threading.Lock())

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """A place among the running and waiting turns, or 429."""
        with self._guard:
            if self._waiting >= self.config.max_active_games + self.config.max_queue:
                raise ApiError(429, f"the server is busy ({self._waiting} turns running or waiting); retry in "
                                    f"{self.config.retry_after_s} s", {"Retry-After": str(self.config.retry_after_s)})
            self._waiting += 1
        try:
            yield
        finally:
            with self._guard:
                self._waiting -= 1

    def session(self, gid: str, n_turns: int) -> GameSession:
        """The open session of ``gid``, reopened when the store has turns it lacks (played elsewhere)."""
        with self._guard:
            s = self._open.get(gid)
        if s is None or len(s.turns) != n_turns:
            s = self.game.open_session(gid)
        with self._guard:
            self._open[gid] = s
            self._open.move_to_end(gid)
            while len(self._open) > self.config.open_sessions:
                self._open.popitem(last=False)
        return s

    def forget(self, gid: str) -> None:
        with self._guard:
            self._open.pop(gid, None)

    def play(self, gid: str, instruction: str) -> Turn:
        """One turn of ``gid`` (runs in a worker thread)."""
        with self._lock(gid):  # the game's turns one at a time, in the order they get the lock
            row = self.row(gid)  # after the lock: a game deleted meanwhile is gone
            session = self.session(gid, row.n_turns)
            session.check(instruction)  # refuse bad input before taking a slot
            with self._slots:
                try:
                    return session.step(instruction)
                except StoreError as e:  # continued by another process between our check and the save
                    self.forget(gid)
                    raise ApiError(409, f"{e}; play the turn again") from None

    def delete(self, gid: str) -> None:
        with self._lock(gid):  # after any turn of it that is running
            self.row(gid)
            self.game.delete_session(gid)
            self.forget(gid)

    def export(self, gid: str) -> tuple[Path, Path]:
        with self._lock(gid):
            row = self.row(gid)
            if row.n_turns == 0:
                raise ApiError(422, f"game {gid} has no turns yet: nothing to export")
            return self.game.export_session(gid)

    def archive(self, gid: str) -> Path:
        with self._lock(gid):  # after any turn of it that is running: the file holds whole turns
            self.row(gid)
            return self.game.archive_session(gid)

    def restore(self, source: bytes | BinaryIO) -> str:
        """A saved game restored (runs in a worker thread, in a turn's slot)."""
        with self._slots:
            try:
                return self.game.restore_session(source)
            except (ArchiveError, StoreError) as e:
                raise ApiError(422, str(e)) from None

    def add_from_picture(self, name: str, description: str | None, data: bytes) -> CustomCharacter:
        """A character of the player's own from a picture (runs in a worker thread, in a turn's slot)."""
        with self._slots:
            try:
                return self.game.add_character(name, description or None, image=data)
            except GameInputError as e:
                raise ApiError(422, str(e)) from None


# ----------------------------------------------------------------------------- shaping answers
def _turn_out(gid: str, t: Turn | TurnRow) -> TurnOut:
    idx = t.index if isinstance(t, Turn) else t.idx
    return TurnOut(index=idx, instruction=t.instruction, motion_level=t.motion_level, deltas=t.deltas,
                   states_before=t.states_before, states=t.states, seed=t.seed,
                   clip_url=f"/games/{gid}/turns/{idx}/clip.mp4", timings=t.timings)


def _game_out(row: SessionRow, turns: list[TurnRow] | None = None) -> GameOut:
    states = row.last_states or row.model.get("start_states") or initial_states()
    return GameOut(id=row.id, characters=row.characters, seed=row.seed, n_turns=row.n_turns, states=states,
                   created_at=row.created_at, updated_at=row.updated_at, last_instruction=row.last_instruction,
                   turns=[_turn_out(row.id, t) for t in turns] if turns is not None else None)


def _inside(root: Path, p: Path) -> Path:
    """``p`` if it is a file under ``root`` (a row naming anything else is not served)."""
    p = p.resolve()
    if not p.is_relative_to(root.resolve()) or not p.is_file():
        raise ApiError(404, "that file is not in the store (deleted?)")
    return p


# ----------------------------------------------------------------------------- ASGI guards
class _TooLarge(StarletteHTTPException):
    """Raised while a body streams in: an HTTP exception, so that FastAPI's body parsing passes it on as
    it is (any other exception there becomes a 400) and the app answers 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyLimit:
    """Refuses bodies over ``limit`` bytes with 413, by Content-Length or while streaming; a picture
    upload (``PICTURE_PATH``) may be as large as a character's picture may be, a saved game to restore
    up to ``restore_limit``."""

    def __init__(self, app: Any, limit: int, restore_limit: int) -> None:
        self.app, self.limit, self.restore_limit = app, limit, restore_limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = (MAX_PICTURE_BYTES if re.fullmatch(PICTURE_PATH, path) else
                 self.restore_limit if path == RESTORE_PATH else self.limit)
        message = f"the request body is larger than {limit} bytes"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await JSONResponse({"error": message}, 413)(scope, receive, send)
        seen, started = 0, False

        async def limited() -> dict:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return msg

        async def tracked(msg: dict) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, limited, tracked)
        except _TooLarge:
            if not started:
                await JSONResponse({"error": message}, 413)(scope, receive, send)


def _own_origin(origin: str, host: str, scheme: str) -> bool:
    """Whether a browser's ``Origin`` is this server itself, on a loopback address: the page's scheme,
    host and port are the request's, and the host is this machine's (a page of another site that made its
    name resolve to 127.0.0.1, DNS rebinding, has its own name as Host and is refused)."""
    try:
        parts = urlsplit(origin)
        return parts.scheme == scheme and parts.netloc.lower() == host.lower() and parts.hostname in LOOPBACK
    except ValueError:  # a malformed port or address
        return False


class SameOrigin:
    """Without an API key: a request that changes something (``UNSAFE_METHODS``) and carries an
    ``Origin`` header, as a browser's does, must come from a page of this server (403 otherwise).
    Programs (curl, httpx) send no Origin and are served; a web page the player opens cannot make the
    player's own server restore, upload, play or delete."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") in UNSAFE_METHODS:
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not _own_origin(origin, headers.get("host", ""), scope.get("scheme", "http")):
                return await JSONResponse({"error": f"a request from a page of {origin[:100]!r} may not change this "
                                                    "server's games: only its own pages may, or a program (with an "
                                                    "API key when one is set)"}, 403)(scope, receive, send)
        return await self.app(scope, receive, send)


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


class ApiKey:
    """With a key set, every request but ``OPEN_PATHS`` and the docs' scripts must carry it (Bearer or X-API-Key)."""

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in OPEN_PATHS and not path.startswith(DOCS_STATIC + "/"):
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization", b"")
            given = auth[7:] if auth[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"")
            if not secrets.compare_digest(given, self.key):
                return await JSONResponse({"error": "a valid API key is needed (header 'Authorization: Bearer KEY' "
                                                    "or 'X-API-Key: KEY')"}, 401,
                                          headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        return await self.app(scope, receive, send)


# ----------------------------------------------------------------------------- the app
def _character_out(made: CustomCharacter) -> CharacterOut:
    return CharacterOut(name=made.name, description=made.spec.description if made.spec else made.description,
                        understood=made.understood, reference_url=f"/characters/{made.name}/reference.png",
                        note=made.fit_note)


def _the_hall(request: Request) -> GameHall:
    return request.app.state.hall


Hall = Annotated[GameHall, Depends(_the_hall)]  # module level: the routes' annotations are resolved here


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for e in exc.errors():
        if e.get("type") == "json_invalid":
            return f"the body is not valid JSON ({e.get('ctx', {}).get('error', 'parse error')})"
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def create_app(game: Game, config: ServeConfig | None = None) -> FastAPI:
    """The API over ``game`` (its models and store). Serve it with uvicorn (see ``serve``)."""
    config = config or ServeConfig()
    hall = GameHall(game, config)
    errors = {c: {"model": ErrorOut} for c in (400, 403, 404, 409, 413, 415, 422, 429)}
    app = FastAPIOffline(title="AnimeGamer", version="1", responses=errors, static_url=DOCS_STATIC,
                  description="Play AnimeGamer over HTTP: create a game, play turns (an instruction in, the "
                              "motion level, the state changes and the shot out), download clips and exports. "
                              "Games are shared with `animegamer play` (same store).")
    app.state.hall = hall

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        bad_json = any(e.get("type") == "json_invalid" for e in exc.errors())
        return JSONResponse({"error": _validation_message(exc)}, 400 if bad_json else 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = {404: f"no such endpoint {request.url.path!r} (the API: /docs)",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return JSONResponse({"error": msg}, exc.status_code, headers=getattr(exc, "headers", None))

    @app.get("/health", summary="the server is up, and which model it plays")
    def health(h: Hall) -> dict[str, Any]:
        return {"status": "ok", "model": h.game.model_info.get("path"), "store": str(h.game.store.root)}

    @app.get("/characters", summary="the cast a game can be started with")
    def characters(h: Hall) -> dict[str, list[str]]:
        return {"characters": list(h.game.cast)}

    @app.post("/characters", status_code=201, response_model=CharacterOut,
              summary="add a character of your own from a description (game/characters.py)")
    def new_character(body: NewCharacter, h: Hall) -> CharacterOut:
        try:
            made = h.game.add_character(body.name, body.description)
        except GameInputError as e:
            raise ApiError(422, str(e)) from None
        return _character_out(made)

    @app.post("/characters/{name}/picture", status_code=201, response_model=CharacterOut,
              summary="add a character of your own from a picture of them (the body: the picture's bytes)",
              openapi_extra={"requestBody": {"required": True, "content": {
                  t: {"schema": {"type": "string", "format": "binary"}} for t in ("image/png", "image/jpeg")}}})
    async def new_character_from_picture(
            name: Annotated[str, UrlPath(min_length=1, max_length=40)], request: Request, h: Hall,
            description: Annotated[str | None, Query(max_length=500, description="what they look like, too")] = None,
    ) -> CharacterOut:
        kind = _content_type(request)
        if kind not in PICTURE_TYPES:
            raise ApiError(415, f"the body must be the picture itself with an image/* content type "
                                f"({', '.join(PICTURE_TYPES)}), got {kind or 'none'!r}")
        with h.admitted():  # a picture is read and fitted in a turn's place: uploads cannot crowd turns out
            data = await request.body()
            if not data:
                raise ApiError(422, "the picture is empty")
            made = await anyio.to_thread.run_sync(h.add_from_picture, name, description, data, limiter=h.limiter)
        return _character_out(made)

    @app.get("/characters/{name}/reference.png", response_class=FileResponse, summary="a character's reference picture")
    def character_reference(name: Annotated[str, UrlPath(max_length=40)], h: Hall) -> FileResponse:
        if name not in h.game.custom:
            raise ApiError(404, f"no character of your own named {name!r}")
        return FileResponse(_inside(h.game.store.root, h.game.characters.reference_path(name)), media_type="image/png")

    @app.post("/games", status_code=201, response_model=GameOut, summary="start a game")
    def new_game(body: NewGame, h: Hall) -> GameOut:
        try:
            s = h.game.new_session(body.characters, seed=body.seed, states=body.states)
        except GameInputError as e:
            raise ApiError(422, str(e)) from None
        return _game_out(h.row(s.id))

    @app.get("/games", summary="saved games, most recently played first")
    def list_games(h: Hall) -> dict[str, list[GameOut]]:
        return {"games": [_game_out(r) for r in h.game.list_sessions()]}

    @app.get("/games/{gid}", response_model=GameOut, summary="a game with all its turns")
    def get_game(gid: GameId, h: Hall) -> GameOut:
        row = h.row(gid)
        return _game_out(row, turns=h.game.store.load_turns(gid))

    @app.delete("/games/{gid}", status_code=204, summary="delete a game and its clips")
    def delete_game(gid: GameId, h: Hall) -> Response:
        h.delete(gid)
        return Response(status_code=204)

    @app.post("/games/{gid}/turns", status_code=201, response_model=TurnOut, summary="play a turn")
    async def play_turn(gid: GameId, body: NewTurn, h: Hall) -> TurnOut:
        h.row(gid)  # an unknown game is a 404 before it queues
        with h.admitted():
            try:
                turn = await anyio.to_thread.run_sync(h.play, gid, body.instruction, limiter=h.limiter)
            except GameInputError as e:
                raise ApiError(422, str(e)) from None
        return _turn_out(gid, turn)

    @app.get("/games/{gid}/turns/{index}", response_model=TurnOut, summary="one turn")
    def get_turn(gid: GameId, index: TurnIndex, h: Hall) -> TurnOut:
        return _turn_out(gid, _turn_row(h, gid, index))

    @app.get("/games/{gid}/turns/{index}/clip.mp4", response_class=FileResponse, summary="a turn's shot (MP4)")
    def clip(gid: GameId, index: TurnIndex, h: Hall) -> FileResponse:
        t = _turn_row(h, gid, index)
        return FileResponse(_inside(h.game.store.root, t.clip), media_type="video/mp4",
                            filename=f"{gid}-turn{index + 1:03d}.mp4")

    @app.post("/games/{gid}/export", response_model=ExportOut, summary="write the game's MP4 and storyboard")
    async def export(gid: GameId, h: Hall) -> ExportOut:
        await anyio.to_thread.run_sync(h.export, gid, limiter=h.limiter)
        return ExportOut(video_url=f"/games/{gid}/export.mp4", storyboard_url=f"/games/{gid}/export.png")

    @app.get("/games/{gid}/export.{kind}", response_class=FileResponse, summary="download an export (mp4 or png)")
    def download_export(gid: GameId, kind: str, h: Hall) -> FileResponse:
        if kind not in ("mp4", "png"):
            raise ApiError(404, f"exports are export.mp4 and export.png, not export.{kind}")
        h.row(gid)
        p = h.game.store.export_path(gid, f".{kind}")
        if not p.is_file():
            raise ApiError(404, f"game {gid} has not been exported yet: POST /games/{gid}/export first")
        return FileResponse(_inside(h.game.store.root, p), media_type="video/mp4" if kind == "mp4" else "image/png",
                            filename=f"{gid}.{kind}")

    @app.get("/games/{gid}/archive.zip", response_class=FileResponse,
             summary="the saved game as one file, with the custom characters it plays (POST /games/restore opens it)")
    async def archive(gid: GameId, h: Hall) -> FileResponse:
        p = await anyio.to_thread.run_sync(h.archive, gid, limiter=h.limiter)
        return FileResponse(_inside(h.game.store.root, p), media_type="application/zip", filename=f"{gid}.zip")

    @app.post("/games/restore", status_code=201, response_model=GameOut,
              summary="restore a saved game from its file (GET /games/{id}/archive.zip; the body: the file's bytes)",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/zip": {"schema": {"type": "string", "format": "binary"}}}}})
    async def restore(request: Request, h: Hall) -> GameOut:
        kind = _content_type(request)
        if kind not in ARCHIVE_TYPES:
            raise ApiError(415, f"the body must be the saved game's file as application/zip, got {kind or 'none'!r}")
        with h.admitted(), tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as body:
            size = 0
            async for piece in request.stream():  # BodyLimit stops it past max_restore_bytes (413)
                size += len(piece)
                body.write(piece)  # memory up to SPOOL_BYTES, then a temporary file
            if not size:
                raise ApiError(422, "the body is empty: send the saved game's file (application/zip)")
            gid = await anyio.to_thread.run_sync(h.restore, body, limiter=h.limiter)
        return _game_out(h.row(gid))

    app.add_middleware(BodyLimit, limit=config.max_body_bytes, restore_limit=config.max_restore_bytes)
    if config.api_key:
        app.add_middleware(ApiKey, key=config.api_key)  # outermost: nothing is read for a caller without the key
    else:
        app.add_middleware(SameOrigin)  # outermost: nothing is read for another site's page
    return app


def _turn_row(h: GameHall, gid: str, index: int) -> TurnRow:
    row = h.row(gid)
    found = h.game.store.load_turns(gid, only=index)
    if not found:
        raise ApiError(404, f"game {gid} has {row.n_turns} turns (0..{row.n_turns - 1}); no turn {index}")
    return found[0]


def check_exposure(host: str, config: ServeConfig) -> None:
    """Off this machine only with an API key: the API plays, deletes and writes files."""
    if host not in LOOPBACK and not config.api_key:
        raise ValueError(f"serving on {host} exposes the games to the network: give an API key (--api-key or "
                         "$ANIMEGAMER_API_KEY), or serve on 127.0.0.1")
