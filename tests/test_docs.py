"""Every command and code block in README.md and GUIDE.md runs as written.

- ```python blocks run in a fresh interpreter (cwd: a temporary directory).
- ```bash blocks run line by line from the repository root, `.venv/bin` first on PATH.
- ```console blocks hold `$ command` lines followed by the output they print; the output shown
  must appear, line by line and in order (timings excepted), in what the command really prints.
- A block right after `<!-- doc-test: skip: REASON -->` is not run (the test command itself).
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from child_env import child_env

REPO = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(?:<!-- doc-test: skip: (?P<skip>[^>]+?) -->\s*\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)
VOLATILE = re.compile(r"\(traced in [\d.]+ s\)|\d+\.\d+ s\b")


def blocks():
    for name in ("README.md", "GUIDE.md"):
        text = (REPO / name).read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            if match["lang"] in ("python", "bash", "console"):
                # blocks inside list items are indented like the item's text
                yield pytest.param(match["lang"], textwrap.dedent(match["body"]), match["skip"], id=f"{name}:{line}")


def environment():
    env = child_env(HF_HUB_OFFLINE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def run(command, cwd):
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("lang, body, skip", list(blocks()))
def test_doc_block_runs(lang, body, skip, tmp_path):
    if skip:
        pytest.skip(skip)
    if lang == "python":
        result = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=environment(), capture_output=True,
                                text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    elif lang == "bash":
        for command in [line for line in body.splitlines() if line.strip() and not line.startswith("#")]:
            command = command.split("  #", 1)[0]
            result = run(command, REPO)
            assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    else:
        check_console(body)


def check_console(body):
    sessions, current = [], None
    for line in body.splitlines():
        if line.startswith("$ "):
            current = (line[2:], [])
            sessions.append(current)
        elif current is not None and line.strip():
            current[1].append(line)
    assert sessions, "a console block needs `$ command` lines"
    for command, expected in sessions:
        status = None
        if " # exit " in command:
            command, status = command.rsplit(" # exit ", 1)
        result = run(command, REPO)
        assert result.returncode == int(status or 0), f"{command}: exit {result.returncode}\n{result.stderr[-2000:]}"
        actual = [VOLATILE.sub("", line).rstrip() for line in (result.stdout + result.stderr).splitlines()]
        position = 0
        for line in expected:
            wanted = VOLATILE.sub("", line).rstrip()
            try:
                position = actual.index(wanted, position) + 1
            except ValueError:
                pytest.fail(f"{command}: the documented line\n  {line}\nis not in the output (in order):\n"
                            + "\n".join(actual[-60:]))


def test_readme_names_every_zoo_model():
    from zoo._entries import export_names

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [name for name in export_names() if name.endswith("ForConditionalGeneration") and f"`{name}`" not in readme]
    assert not missing, f"README.md's zoo list lacks {missing}"


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def markdown_files():
    return [REPO / "README.md", REPO / "GUIDE.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "zoo").glob("*/README.md"))]


def missing_link_targets(path: Path) -> list[str]:
    """Links in ``path`` to files that are not in the repository (notes kept outside it, typos)."""
    missing = []
    text = path.read_text(encoding="utf-8")
    # code spans are no links: `self.lm_head[generation_steps](hidden_states)` quoted in a report
    text = re.sub(r"`[^`\n]+`", lambda span: " " * len(span.group(0)), text)
    for match in LINK.finditer(text):
        target = match["target"].split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue  # an anchor in the same file, or a URL
        resolved = (path.parent / target).resolve()
        line = text[: match.start()].count("\n") + 1
        if not resolved.exists() or REPO not in (resolved, *resolved.parents):
            missing.append(f"{path.relative_to(REPO)}:{line}: {match['target']}")
    return missing


def test_markdown_links_point_to_files_in_the_repository():
    missing = [entry for path in markdown_files() for entry in missing_link_targets(path)]
    assert not missing, "links to files that are not in the repository:\n" + "\n".join(missing)


def test_link_check_catches_a_link_outside_the_repository(tmp_path):
    doc = REPO / "docs" / "_link_check_probe.md"
    doc.write_text("see [notes](../../shared/notes.md) and [guide](../GUIDE.md)\n")
    try:
        assert missing_link_targets(doc) == ["docs/_link_check_probe.md:1: ../../shared/notes.md"]
    finally:
        doc.unlink()
