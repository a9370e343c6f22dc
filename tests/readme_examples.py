"""The Python examples of README.md, as a reader runs them: every ```python block, in
document order, in one namespace (a block may use what an earlier one defined), as a module
that is not ``__main__`` (so ``if __name__ == "__main__":`` runs of a job are left out)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
#: the namespace's ``__name__``: not importable, so Spark's workers get its classes by value
MODULE = "readme_example"


@dataclass(frozen=True)
class Block:
    line: int  # of the block's first code line in README.md
    section: str  # the heading above it
    code: str


def python_blocks(text: str | None = None) -> list[Block]:
    text = README.read_text() if text is None else text
    blocks, section, code, start = [], "", None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if code is None:
            if line.startswith("#"):
                section = line.lstrip("#").strip()
            elif line.strip() == "```python":
                code, start = [], number + 1
        elif line.strip() == "```":
            blocks.append(Block(start, section, "\n".join(code) + "\n"))
            code = None
        else:
            code.append(line)
    return blocks


def run_blocks(blocks: list[Block], namespace: dict | None = None, substitute: dict[str, str] | None = None) -> dict:
    """Execute ``blocks`` in order in one namespace; ``substitute`` replaces text first (a
    server's URL); each must occur in some block. Errors name the README line."""
    namespace = {"__name__": MODULE} if namespace is None else namespace
    unused = dict(substitute or {})
    for block in blocks:
        code = block.code
        for old, new in (substitute or {}).items():
            if old in code:
                code = code.replace(old, new)
                unused.pop(old, None)
        # blank lines in front keep the README's line numbers in tracebacks
        compiled = compile("\n" * (block.line - 1) + code, str(README), "exec")
        exec(compiled, namespace)
    assert not unused, f"not in README.md's examples any more: {sorted(unused)}"
    return namespace

