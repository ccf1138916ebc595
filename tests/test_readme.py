"""README.md's commands exist: every command in a shell block names a real make target or `dagster-ir` subcommand.

The subcommands come from the command line's own parser (`assets.cli.main.build_parser`), the targets from the
Makefile's rules, so a renamed command or target fails here before a newcomer copies it.
"""

import argparse
import re
import shlex
from pathlib import Path

import pytest

from assets.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, line number of the fence, lines) of every fenced code block."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = re.match(r"^\s*```\s*([\w+-]*)", lines[i])
        if match:
            start, body, i = i + 1, [], i + 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((match[1].lower(), start, body))
        i += 1
    return blocks


def commands(text: str) -> list[tuple[int, list[str]]]:
    """(line number, words) of every command in the shell blocks, environment assignments left out."""
    found = []
    for language, start, body in fenced_blocks(text):
        if language not in SHELL_BLOCKS:
            continue
        for offset, line in enumerate(body):
            words = shlex.split(line, comments=True)
            while words and ENV_ASSIGNMENT.match(words[0]):
                words = words[1:]
            if words:
                found.append((start + offset + 1, words))
    return found


def make_targets(makefile: Path) -> set[str]:
    return {m[1] for m in re.finditer(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(?!=)", makefile.read_text(), re.M)}


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def check(words: list[str], targets: set[str], parser: argparse.ArgumentParser) -> str | None:
    """Why `words` is not a command of this project, or None when it is."""
    program = words[0]
    if program == "make":
        named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        missing = [t for t in named if t not in targets]
        return None if named and not missing else f"make target {missing or '(none)'} not in the Makefile"
    if Path(program).name == "dagster-ir":
        rest = words[1:]
        while rest and rest[0] == "--data":
            rest = rest[2:]
        commands_here = subcommands(parser)
        if not rest or rest[0] not in commands_here:
            return f"dagster-ir subcommand {rest[:1]} not in assets/cli/main.py (have {sorted(commands_here)})"
        nested = [a for a in commands_here[rest[0]]._actions if isinstance(a, argparse._SubParsersAction)]
        if nested and (len(rest) < 2 or rest[1] not in nested[0].choices):
            return f"dagster-ir {rest[0]} subcommand {rest[1:2]} not in {sorted(nested[0].choices)}"
        return None
    return f"{program!r} is neither make nor dagster-ir"


def test_every_readme_command_names_a_real_target_or_subcommand():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = commands(text)
    assert any(words[:2] == ["make", "demo"] for _, words in found)
    assert any(words[:2] == ["make", "test"] for _, words in found)
    targets, parser = make_targets(ROOT / "Makefile"), build_parser()
    problems = [
        f"README.md:{line}: {' '.join(words)}: {why}" for line, words in found if (why := check(words, targets, parser))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("make dmeo", "make target ['dmeo'] not in the Makefile"),
        (".venv/bin/dagster-ir reprodcue --collection x", "dagster-ir subcommand ['reprodcue']"),
        ("dagster-ir catalog qurey 'select 1'", "dagster-ir catalog subcommand ['qurey']"),
        ("cd data && duckdb catalog.duckdb", "'cd' is neither make nor dagster-ir"),
    ],
)
def test_a_misspelt_command_is_caught(line, problem):
    ((_, words),) = commands(f"```bash\n{line}\n```\n")
    why = check(words, {"demo", "test"}, build_parser())
    assert why is not None and why.startswith(problem), why


def test_blocks_commands_and_targets_are_read_as_written(tmp_path):
    text = "```yaml\nmake: nothing\n```\n```bash\nA=1 B=2 make demo  # comment\n# only a comment\n\n```\n"
    assert commands(text) == [(5, ["make", "demo"])]
    makefile = "PY ?= x\n.PHONY: a\n$(BIN)/.x: y\na: b\nb-c:\n\tcmd: not a target\n"
    path = tmp_path / "Makefile"
    path.write_text(makefile)
    assert make_targets(path) == {"a", "b-c"}


def test_every_relative_link_of_the_readme_reaches_a_file():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if t and not (ROOT / t).exists()]
    assert not missing, missing
