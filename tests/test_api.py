"""`animegamer serve` (game/api.py) with tiny models: the endpoints, hostile requests, concurrency,
the API key, and one real uvicorn server on a loopback port."""
from __future__ import annotations

import io
import json
import threading
import time

import httpx
import numpy as np
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient
from PIL import Image
from tiny_game import CAST, RUN

from animegamer.game.api import ServeConfig, check_exposure, create_app
from animegamer.game.characters import MAX_PICTURE_BYTES
from animegamer.game.session import Game
from animegamer.game.store import frames_of
from animegamer.world.character_gen import random_character, reference_sheet

torch.set_num_threads(1)


@pytest.fixture
def client(game):
    with TestClient(create_app(game, ServeConfig(max_body_bytes=4096))) as c:
        yield c


def _snapshot(game: Game) -> tuple:
    """Everything a request could change: the games, their turns, the files of the store."""
    rows = [(r.id, r.n_turns, r.updated_at) for r in game.store.list_sessions()]
    files = sorted(str(p.relative_to(game.store.root)) for p in game.store.root.rglob("*")
                   if p.is_file() and "sqlite" not in p.name)
    return rows, files


def test_a_game_through_http(client, game):
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/characters").json() == {"characters": CAST}
    r = client.post("/games", json={"characters": ["qiqi", "Mika"], "seed": 7})
    assert r.status_code == 201, r.text
    g = r.json()
    assert g["characters"] == ["Qiqi", "Mika"] and g["n_turns"] == 0 and g["states"] == {
        "stamina": 50, "social": 50, "entertainment": 50}
    gid = g["id"]
    turns = []
    for text in (RUN, "Mika waves at Qiqi"):
        r = client.post(f"/games/{gid}/turns", json={"instruction": text})
        assert r.status_code == 201, r.text
        turns.append(r.json())
    assert [t["index"] for t in turns] == [0, 1] and turns[1]["states_before"] == turns[0]["states"]
    assert 1 <= turns[0]["motion_level"] <= 5 and set(turns[0]["deltas"]) == {"stamina", "social", "entertainment"}
    # the HTTP game is the store's game: the same turns, the same clip bytes
    saved = game.open_session(gid)
    assert [t.instruction for t in saved.turns] == [RUN, "Mika waves at Qiqi"]
    clip = client.get(turns[1]["clip_url"])
    assert clip.status_code == 200 and clip.headers["content-type"] == "video/mp4"
    assert clip.content == saved.turns[1].video_path.read_bytes()
    full = client.get(f"/games/{gid}").json()
    assert full["n_turns"] == 2 and [t["instruction"] for t in full["turns"]] == [RUN, "Mika waves at Qiqi"]
    one = client.get(f"/games/{gid}/turns/1").json()
    assert full["states"] == turns[1]["states"] and {**one, "timings": None} == {**turns[1], "timings": None}
    listed = client.get("/games").json()["games"]
    assert [x["id"] for x in listed] == [gid] and listed[0]["last_instruction"] == "Mika waves at Qiqi"
    assert listed[0]["turns"] is None and listed[0]["states"] == turns[1]["states"]
    # export, download
    assert client.get(f"/games/{gid}/export.mp4").status_code == 404  # not exported yet
    urls = client.post(f"/games/{gid}/export").json()
    video, board = client.get(urls["video_url"]), client.get(urls["storyboard_url"])
    assert video.status_code == 200 and video.content[4:8] == b"ftyp"
    assert board.status_code == 200 and board.content[:8] == b"\x89PNG\r\n\x1a\n"
    # same seed + same instructions = same game (reproducible through the API too)
    again = client.post("/games", json={"characters": ["Qiqi", "Mika"], "seed": 7}).json()["id"]
    t0 = client.post(f"/games/{again}/turns", json={"instruction": RUN}).json()
    assert t0["motion_level"] == turns[0]["motion_level"] and t0["states"] == turns[0]["states"]
    assert np.array_equal(frames_of(game.open_session(again).turns[0].video_path), frames_of(saved.turns[0].video_path))
    # delete
    assert client.delete(f"/games/{gid}").status_code == 204
    assert client.get(f"/games/{gid}").status_code == 404 and not game.store.clip_dir(gid).exists()


def test_hostile_requests_get_4xx_and_change_nothing(client, game):
    gid = client.post("/games", json={"characters": ["Qiqi"], "seed": 1}).json()["id"]
    assert client.post(f"/games/{gid}/turns", json={"instruction": RUN}).status_code == 201
    before = _snapshot(game)
    hostile = [
        ("POST", "/games", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 400),
        ("POST", f"/games/{gid}/turns", {"content": b'{"instruction": "Qiqi ru', "headers": {
            "content-type": "application/json"}}, 400),
        ("POST", "/games", {"json": {"characters": "Qiqi"}}, 422),  # a string, not a list
        ("POST", "/games", {"json": {"characters": []}}, 422),
        ("POST", "/games", {"json": {"characters": ["Nobody"]}}, 422),
        ("POST", "/games", {"json": {"characters": ["Qiqi"], "seed": "7"}}, 422),  # a string seed
        ("POST", "/games", {"json": {"characters": ["Qiqi"], "seed": -1}}, 422),
        ("POST", "/games", {"json": {"characters": ["Qiqi"], "states": {"stamina": 500}}}, 422),
        ("POST", "/games", {"json": {"characters": ["Qiqi"], "extra": 1}}, 422),
        ("POST", f"/games/{gid}/turns", {"json": {"instruction": 5}}, 422),
        ("POST", f"/games/{gid}/turns", {"json": {}}, 422),
        ("POST", f"/games/{gid}/turns", {"json": {"instruction": "   "}}, 422),
        ("POST", f"/games/{gid}/turns", {"json": {"instruction": "Mika runs"}}, 422),  # not in this game
        ("POST", f"/games/{gid}/turns", {"json": {"instruction": "x" * 600}}, 422),
        ("POST", f"/games/{gid}/turns", {"json": {"instruction": "a" * 5000}}, 413),  # over the body limit
        ("POST", "/games/ffffffffffff/turns", {"json": {"instruction": RUN}}, 404),
        ("GET", f"/games/{gid}/turns/5/clip.mp4", {}, 404),
        ("GET", f"/games/{gid}/turns/-1/clip.mp4", {}, 422),
        ("GET", "/games/..%2F..%2Fgames.sqlite/turns/0/clip.mp4", {}, 404),
        ("GET", f"/games/{gid}/turns/0/..%2F..%2F..%2Fgames.sqlite", {}, 404),
        ("GET", "/games/a.b/turns/0/clip.mp4", {}, 422),  # not a game id
        ("GET", f"/games/{gid}/export.sqlite", {}, 404),
        ("DELETE", "/games/nothing-here", {}, 404),
        ("PUT", f"/games/{gid}", {"json": {}}, 405),
    ]
    for method, url, kw, status in hostile:
        r = client.request(method, url, **kw)
        assert r.status_code == status, (method, url, r.status_code, r.text)
        assert r.json()["error"], (method, url)
    assert len(hostile) >= 20
    assert _snapshot(game) == before
    msg = client.post(f"/games/{gid}/turns", json={"instruction": "Mika runs"}).json()["error"]
    assert "Mika is not in this game" in msg
    assert "not valid JSON" in client.post("/games", content=b"{", headers={"content-type": "application/json"}
                                           ).json()["error"]


def test_api_key(game):
    with TestClient(create_app(game, ServeConfig(api_key="s3cret-key"))) as c:
        assert c.get("/health").status_code == 200  # the probe stays open, and the docs
        assert c.get("/openapi.json").status_code == 200 and c.get("/docs").status_code == 200
        r = c.post("/games", json={"characters": ["Qiqi"]})
        assert r.status_code == 401 and "API key" in r.json()["error"]
        assert c.get("/games", headers={"Authorization": "Bearer wrong-key!"}).status_code == 401
        assert c.get("/games", headers={"Authorization": "Bearer s3cret-key"}).status_code == 200
        assert c.get("/games", headers={"X-API-Key": "s3cret-key"}).status_code == 200
    assert game.store.list_sessions() == []
    with pytest.raises(ValueError, match="API key"):
        check_exposure("0.0.0.0", ServeConfig())
    check_exposure("0.0.0.0", ServeConfig(api_key="s3cret-key"))
    check_exposure("127.0.0.1", ServeConfig())


def test_queue_full_gets_429(game, monkeypatch):
    """One slot, no queue: while a turn runs, a second game's turn is refused with Retry-After."""
    release, started = threading.Event(), threading.Event()
    step = type(game.decoder).forward

    def slow(self, *a, **k):
        started.set()
        assert release.wait(30)
        return step(self, *a, **k)

    monkeypatch.setattr(type(game.decoder), "forward", slow)
    with TestClient(create_app(game, ServeConfig(max_active_games=1, max_queue=0, retry_after_s=3))) as c:
        a = c.post("/games", json={"characters": ["Qiqi"]}).json()["id"]
        b = c.post("/games", json={"characters": ["Qiqi"]}).json()["id"]
        out: dict = {}
        th = threading.Thread(target=lambda: out.update(r=c.post(f"/games/{a}/turns", json={"instruction": RUN})))
        th.start()
        assert started.wait(30)
        r = c.post(f"/games/{b}/turns", json={"instruction": RUN})
        assert r.status_code == 429 and r.headers["retry-after"] == "3" and "busy" in r.json()["error"]
        release.set()
        th.join(30)
        assert out["r"].status_code == 201
        assert game.store.get_session(b).n_turns == 0
        assert c.post(f"/games/{b}/turns", json={"instruction": RUN}).status_code == 201  # free again


def test_real_server_two_games_concurrently(game):
    """uvicorn on a loopback port; two clients each play 3 turns of their own game at the same time."""
    config = uvicorn.Config(create_app(game, ServeConfig(max_active_games=2)), host="127.0.0.1", port=0,
                            log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        scripts = {"Qiqi": [RUN, "Qiqi sits down and reads", "Qiqi waves"],
                   "Mika": ["Mika dances happily", "Mika walks slowly at night", "Mika eats calmly"]}
        results: dict[str, list] = {}

        def player(name: str) -> None:
            with httpx.Client(base_url=base, timeout=60) as h:
                gid = h.post("/games", json={"characters": [name]}).json()["id"]
                got = [h.post(f"/games/{gid}/turns", json={"instruction": t}) for t in scripts[name]]
                results[name] = [gid, got]

        players = [threading.Thread(target=player, args=(n,)) for n in scripts]
        for p in players:
            p.start()
        for p in players:
            p.join(120)
        for name, (gid, got) in results.items():
            assert [r.status_code for r in got] == [201] * 3, [r.text for r in got]
            assert [r.json()["index"] for r in got] == [0, 1, 2]
            saved = game.open_session(gid)  # no interleaving: each game holds exactly its own script, in order
            assert [t.instruction for t in saved.turns] == scripts[name] and saved.characters == [name]
            for a, b in zip(saved.turns, saved.turns[1:]):
                assert b.states_before == a.states
        # two turns of ONE game sent at the same moment: both played, one after the other
        gid = results["Qiqi"][0]
        same: list = []
        texts = ["Qiqi jumps", "Qiqi sleeps"]
        both = [threading.Thread(target=lambda t=t: same.append(httpx.post(f"{base}/games/{gid}/turns",
                                                                         json={"instruction": t}, timeout=60)))
                for t in texts]
        for p in both:
            p.start()
        for p in both:
            p.join(120)
        assert sorted(r.status_code for r in same) == [201, 201]
        saved = game.open_session(gid)
        assert len(saved.turns) == 5 and sorted(t.instruction for t in saved.turns[3:]) == sorted(texts)
        assert saved.turns[4].states_before == saved.turns[3].states
        assert sorted(r.json()["index"] for r in same) == [3, 4]
        with httpx.Client(base_url=base, timeout=30) as h:
            assert json.loads(h.get("/openapi.json").text)["info"]["title"] == "AnimeGamer"
            docs = h.get("/docs")
            assert docs.status_code == 200 and "cdn." not in docs.text  # the docs work offline
            assert h.get("/static-offline-docs/swagger-ui-bundle.js").status_code == 200
    finally:
        server.should_exit = True
        thread.join(30)
    assert not thread.is_alive()


def test_your_own_character_through_http(client, game):
    r = client.post("/characters", json={"name": "Neko", "description": "a girl with short green hair in a red hoodie"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert "green hair" in made["understood"] and client.get("/characters").json()["characters"][-1] == "Neko"
    picture = client.get(made["reference_url"])
    assert picture.status_code == 200 and picture.content[:4] == b"\x89PNG"
    gid = client.post("/games", json={"characters": ["Neko"]}).json()["id"]
    assert client.post(f"/games/{gid}/turns", json={"instruction": "Neko waves"}).status_code == 201
    for body, status in (({"name": "Neko", "description": "blue hair"}, 422), ({"name": "Momo", "description": "x"}, 422),
                         ({"name": "", "description": "blue hair"}, 422), ({"name": "Momo"}, 422)):
        assert client.post("/characters", json=body).status_code == status
    assert client.get("/characters/Nobody/reference.png").status_code == 404
    assert client.get("/characters").json()["characters"] == CAST + ["Neko"]


def test_your_own_character_from_a_picture_through_http(client, game):
    """POST /characters/NAME/picture: the body is the picture; bad pictures get 4xx and add nothing."""
    buf = io.BytesIO()
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(buf, format="PNG")
    sheet = buf.getvalue()
    assert len(sheet) > 4096  # larger than the client's JSON requests may be
    r = client.post("/characters/Momo/picture", content=sheet, headers={"content-type": "image/png"})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "Momo" and client.get(r.json()["reference_url"]).content[:4] == b"\x89PNG"
    assert game.custom["Momo"].sprite.is_file()
    gid = client.post("/games", json={"characters": ["Momo"]}).json()["id"]
    assert client.post(f"/games/{gid}/turns", json={"instruction": "Momo waves"}).status_code == 201
    r = client.post("/characters/Lulu/picture", params={"description": "a boy with short red hair"}, content=sheet,
                    headers={"content-type": "image/png"})
    assert r.status_code == 201 and "red hair" in r.json()["understood"]  # a picture and words
    white = io.BytesIO()
    Image.new("RGB", (200, 200), "white").save(white, format="PNG")
    for name, body, kind, status, said in (
            ("Kiki", b"not a picture", "image/png", 422, "not a picture this game can read"),
            ("Kiki", white.getvalue(), "image/png", 422, "no character stands out"),
            ("Kiki", b"", "image/png", 422, "empty"),
            ("Kiki", sheet, "application/json", 415, "image/* content type"),
            ("Momo", sheet, "image/png", 422, "already taken"),
            ("Kiki", b"x" * (MAX_PICTURE_BYTES + 1), "image/png", 413, "larger than")):
        r = client.post(f"/characters/{name}/picture", content=body, headers={"content-type": kind})
        assert r.status_code == status and said in r.json()["error"], (name, kind, r.text)
        assert "/tmp" not in r.json()["error"]  # the server's temporary file is not named
    assert client.get("/characters").json()["characters"] == CAST + ["Momo", "Lulu"]
    assert client.post("/games", json={"characters": ["Qiqi"], "extra": "x" * 20000}).status_code == 413  # JSON stays small
