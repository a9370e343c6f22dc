"""The code blocks of the documentation (README.md and every page under docs/), as a reader
runs them. Per page: every ```python block in document order, in one namespace (a block may
use what an earlier one on the same page defined, never another page's), as a module that is
not ``__main__`` (so ``if __name__ == "__main__":`` runs of a job are left out). Every ```bash
block is a shell script, and each ``sparkstate`` command in it a command line of the CLI."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: the namespace's ``__name__``: not importable, so Spark's workers get its classes by value
MODULE = "docs_example"

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the block's first code line
    section: str  # the heading above it
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and the site's pages, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path = README, lang: str | None = None, text: str | None = None) -> list[Block]:
    """The fenced code blocks of ``path`` (of language ``lang``, or all), their indentation
    (an admonition's or a list's) removed."""
    text = path.read_text() if text is None else text
    found, section, code, start, indent, kind = [], "", None, 0, "", ""
    for number, line in enumerate(text.splitlines(), 1):
        if code is None:
            fence = _FENCE.match(line)
            if fence:
                code, start, indent, kind = [], number + 1, fence["indent"], fence["lang"]
            elif line.startswith("#"):
                section = line.lstrip("#").strip()
        elif line.strip() == "```":
            if lang is None or kind == lang:
                found.append(Block(path, start, section, kind, "\n".join(code) + "\n"))
            code = None
        else:
            code.append(line[len(indent):] if line.startswith(indent) else line)
    assert code is None, f"{path}: a code block opened on line {start - 1} is never closed"
    return found


def python_blocks(path: Path = README) -> list[Block]:
    return blocks(path, "python")


def run_blocks(blocks: list[Block], namespace: dict | None = None, substitute: dict[str, str] | None = None) -> dict:
    """Execute ``blocks`` in order in one namespace; ``substitute`` replaces text first (a
    server's URL); each must occur in some block. Errors name the page's line."""
    namespace = {"__name__": MODULE} if namespace is None else namespace
    unused = dict(substitute or {})
    for block in blocks:
        code = block.code
        for old, new in (substitute or {}).items():
            if old in code:
                code = code.replace(old, new)
                unused.pop(old, None)
        # blank lines in front keep the page's line numbers in tracebacks
        compiled = compile("\n" * (block.line - 1) + code, str(block.path), "exec")
        exec(compiled, namespace)
    assert not unused, f"not in the examples any more: {sorted(unused)}"
    return namespace


_SEPARATORS = {"&&", "||", ";", "|", "&"}


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script, as words (``$ `` prompts, line continuations,
    comments and leading ``VAR=value`` assignments removed)."""
    lines = "\n".join(line[2:] if line.startswith("$ ") else line for line in script.splitlines())
    found: list[list[str]] = []
    for line in lines.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.commenters = "#"
        lexer.whitespace_split = True
        current: list[str] = []
        for word in lexer:
            if word in _SEPARATORS:
                found.append(current)
                current = []
            elif not current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
                continue
            else:
                current.append(word)
        found.append(current)
    return [c for c in found if c]
