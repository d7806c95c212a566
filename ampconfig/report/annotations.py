"""GitHub Actions workflow commands (``::error file=...,line=...::message``): what ``validate --format github``
and ``lock --check --format github`` print, so a pull request shows each finding on the line it is about.

Format and escaping: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

from ampconfig.errors import Problem, Severity


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotation(
    level: str, message: str, file: str | None = None, line: int | None = None, title: str | None = None
) -> str:
    """One workflow command: ``level`` is error, warning or notice."""
    properties = []
    if file:
        properties.append(f"file={_escape_property(file)}")
    if line is not None:
        properties.append(f"line={line}")
    if title:
        properties.append(f"title={_escape_property(title)}")
    head = f"::{level}"
    return (f"{head} {','.join(properties)}" if properties else head) + f"::{_escape_data(message)}"


def format_github(problem: Problem) -> str:
    """A finding as an annotation: its JSON path is the title, its hint follows the message."""
    message = problem.message + (f" ({problem.hint})" if problem.hint else "")
    level = "notice" if problem.severity is Severity.NOTE else problem.severity.value
    return github_annotation(level, message, problem.file, problem.line, problem.json_path)
