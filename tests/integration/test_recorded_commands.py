"""Every command that a committed result file or a page of the docs records still runs: its module
or script answers ``--help``, and every flag the recorded command passes is one that today's command
line offers. A result whose command no longer runs cannot be reproduced (issue #54)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Where commands are recorded: the results' JSON ("command") and tables, the docs, the front page,
#: and the tiny checkpoints' cards.
SOURCES = (
    sorted((REPO / "benchmarks" / "results").glob("*.json"))
    + sorted((REPO / "benchmarks" / "results").glob("*.md"))
    + sorted((REPO / "docs").glob("*.md"))
    + [REPO / "README.md"]
    + sorted((REPO / "checkpoints").glob("*/README.md"))
)
COMMAND = re.compile(
    r"python (-m (?P<module>sdaccel[\w.]*)|(?P<script>benchmarks/[\w/]+\.py))(?P<args>[^`\"\n|]*)"
)


def recorded_commands() -> dict[str, list[tuple[str, str]]]:
    """Each target (``-m module`` or a script) with the recorded commands' flags and their source."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in SOURCES:
        text = path.read_text()
        if path.suffix == ".json":
            text = "\n".join(_json_commands(json.loads(text)))
        for match in COMMAND.finditer(text):
            target = f"-m {match['module']}" if match["module"] else match["script"]
            found.setdefault(target, []).append((match["args"], str(path.relative_to(REPO))))
    return found


def _json_commands(value) -> list[str]:
    if isinstance(value, dict):
        return [
            c
            for k, v in value.items()
            for c in ([v] if k == "command" and isinstance(v, str) else _json_commands(v))
        ]
    if isinstance(value, list):
        return [c for v in value for c in _json_commands(v)]
    return []


def flags(args: str) -> set[str]:
    try:
        words = shlex.split(args)
    except ValueError:
        words = args.split()
    return {w.split("=")[0] for w in words if re.fullmatch(r"--[a-z][\w-]*(=.*)?", w)}


COMMANDS = recorded_commands()


def test_the_sources_record_commands():
    assert len(COMMANDS) >= 10, sorted(COMMANDS)
    assert "benchmarks/bench_whole_image.py" in COMMANDS


@pytest.mark.parametrize("target", sorted(COMMANDS))
def test_a_recorded_command_runs_and_its_flags_exist(target):
    argv = [sys.executable, *target.split(), "--help"]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    where = sorted({source for _, source in COMMANDS[target]})
    assert run.returncode == 0, (
        f"`python {target} --help` failed (recorded in {where}):\n{run.stderr[-2000:]}"
    )
    offered = set(re.findall(r"--[a-z][\w-]*", run.stdout))
    missing = {
        (flag, source) for args, source in COMMANDS[target] for flag in flags(args) if flag not in offered
    }
    assert missing == set(), f"flags that `python {target}` no longer offers: {sorted(missing)}"


def test_the_flag_check_reads_a_command_line():
    assert flags(" sd15 --rows a b --runs=3 -v --lcm-variant x") == {"--rows", "--runs", "--lcm-variant"}
