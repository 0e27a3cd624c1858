"""The HTML page is self-contained and renders in a real headless browser (Debian's chromium)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def page(digamma_checkpoint, tmp_path_factory):
    import mobius.sources.config
    from tests.mobius.report.conftest import MODEL_TYPE

    assert MODEL_TYPE in mobius.sources.config.known_model_types()
    report = mobius.explain(digamma_checkpoint)
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(report.render_html(), encoding="utf-8")
    return path


def test_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text and "src=" not in text
    assert "data-status='blocked'" in text and "<details" in text


def test_page_renders_in_chromium(page, tmp_path):
    assert CHROMIUM, (
        "the browser check needs Debian's chromium: apt-get install chromium (.ci/run does)"
    )

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )

    dom = run("--dump-dom").stdout
    assert "layers.0–2" in dom and "aten.digamma.default" in dom
    assert "add a lowering for aten.digamma.default used in layers.0–2.mlp" in dom
    shot = tmp_path / "shot.png"
    run(f"--screenshot={shot}", "--window-size=1200,900")
    assert shot.is_file() and shot.stat().st_size > 10_000
