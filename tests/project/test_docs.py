"""The documentation: the README stays a five-minute page whose set-up commands are the
ones CI runs, and the docs/ site builds cleanly (strict: a broken link or anchor, or a page
missing from the nav, fails the build)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"

DEMO_COMMAND = "pip install -e . && edgenn demo"
TEST_COMMAND = "pip install -e '.[test]' && python -m pytest -q"


def _nav_pages(node) -> list[str]:
    """Every page a (possibly nested) mkdocs nav names."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    if isinstance(node, list):
        return [p for v in node for p in _nav_pages(v)]
    return []


def test_site_builds_strict(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout)
        print(proc.stderr)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_setup_commands_verbatim():
    lines = README.read_text(encoding="utf-8").splitlines()
    # each command on its own indented (code block) line, exactly as written
    for command in (DEMO_COMMAND, TEST_COMMAND):
        assert f"    {command}" in lines, f"README.md lost the set-up command: {command}"


def test_ci_runs_the_readme_test_command():
    ci_lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip()]
    last = ci_lines[-1]
    assert "python -m pytest -q" in last and "python -m pytest -q" in TEST_COMMAND
    assert "'.[test]'" in last and "'.[test]'" in TEST_COMMAND
    # the install half: the same `pip install -e '.[test]'` (CI adds `python -m` and `-q`)
    install = last.split("&&")[0]
    assert "pip install" in install and "-e '.[test]'" in install
    assert last.split("&&")[1].strip() == TEST_COMMAND.split("&&")[1].strip()


def test_every_docs_page_in_nav():
    config = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs"
    nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages, "docs/ has no pages"
    assert pages - nav == set(), f"docs pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"nav entries without a page: {sorted(nav - pages)}"
