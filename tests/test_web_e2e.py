"""End to end in a real browser: the web UI on loopback with tiny models, one turn typed and played.

Needs Debian's chromium (/usr/bin/chromium) and PyPI playwright (driving that binary through
executable_path; playwright's own browser download is not used). Skipped when either is missing.
The screenshot goes to $ANIMEGAMER_E2E_SCREENSHOT or the test's tmp dir.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("ANIMEGAMER_CHROMIUM", "/usr/bin/chromium")
pytest.importorskip("gradio")
sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)

from animegamer.game.session import Game  # noqa: E402
from tiny_game import tiny_models  # noqa: E402

CAST = ["Qiqi", "Mika", "Ren"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from animegamer.game.web import launch

    game = Game.from_models(*tiny_models(), store=tmp_path_factory.mktemp("saves"), cast=CAST)
    demo, url = launch(game, host="127.0.0.1", port=_free_port(), block=False, quiet=True)
    yield game, url
    demo.close()


def test_play_one_turn_in_the_browser(server, tmp_path):
    game, url = server
    shot = Path(os.environ.get("ANIMEGAMER_E2E_SCREENSHOT", tmp_path / "web_after_turn.png"))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url, wait_until="domcontentloaded")
            box = page.locator("#instruction textarea")
            box.wait_for(timeout=60_000)
            box.fill("Character: Qiqi; Motion: happily dance; Background: night town.")
            page.locator("#play").click()
            page.locator("#shot video").wait_for(timeout=90_000)  # the new shot is playing
            page.locator("#ag-states .ag-meta", has_text="turn 1").wait_for(timeout=30_000)
            values = [int(page.locator(f'#ag-states [data-state="{n}"]').get_attribute("data-value"))
                      for n in ("stamina", "social", "entertainment")]
            page.locator("#history", has_text="happily dance").wait_for(timeout=30_000)
            # a bad input gets a clear message and changes nothing
            box.fill("Character: Nobody; Motion: run; Background: day town.")
            page.locator("#play").click()
            page.locator("#ag-message", has_text="unknown character").wait_for(timeout=30_000)
            page.locator("#export").click()
            page.locator("#ag-message", has_text="exported").wait_for(timeout=60_000)
            page.wait_for_timeout(500)
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            # a second tab is a second game
            other = browser.new_page(viewport={"width": 1280, "height": 1000})
            other.goto(url, wait_until="domcontentloaded")
            other.locator("#instruction textarea").fill("Qiqi sits by the window and reads")
            other.locator("#play").click()
            other.locator("#ag-states .ag-meta", has_text="turn 1").wait_for(timeout=90_000)
        finally:
            browser.close()
    sessions = sorted(game.list_sessions(), key=lambda r: r.created_at)
    assert [r.n_turns for r in sessions] == [1, 1] and sessions[0].id != sessions[1].id
    assert values == [game.open_session(sessions[0].id).states[n] for n in ("stamina", "social", "entertainment")]
    assert shot.stat().st_size > 10_000
