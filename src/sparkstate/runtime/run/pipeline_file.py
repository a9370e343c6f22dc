"""A user's own job, from a pipeline file or module, for ``sparkstate run|explain PIPELINE``.

``PIPELINE`` is ``path/to/pipeline.py``, ``path/to/pipeline.py:NAME``, ``package.module:NAME``
or ``package.module``. The file is imported as a module that is not ``__main__``, so its
``if __name__ == "__main__": job.run(...)`` does not run, and ``NAME`` (or, without one, the
module's only :class:`~sparkstate.job.Job`) is the job. ``NAME`` may also be a function that
takes no arguments and returns a ``Job``. (A job is recognised as the job description it is:
the runtime does not import the ``Job`` class, which imports the runtime.)

Whatever the file's code raises while it is imported or while ``NAME()`` builds the job, a
``sys.exit()`` in it included, becomes a :class:`JobDefinitionError` naming the file and the
line of the file where it happened.

Spark's Python workers may not be able to import the file (another directory, another
machine), so its functions and classes travel to them by value (``cloudpickle``'s
``register_pickle_by_value``), as those of a script run with ``python pipeline.py`` do. Modules
the file imports travel by reference and must be importable where Spark runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from sparkstate.api.job import JobDescription
from sparkstate.errors import JobDefinitionError


def is_pipeline(spec: str) -> bool:
    """Whether a ``JOB`` argument names a pipeline (a ``.py`` file or ``module:name``) rather
    than a seed job (seed jobs' names have neither)."""
    target = spec.split(":", 1)[0]
    return target.endswith(".py") or ":" in spec or "/" in target


def load_pipeline(spec: str) -> JobDescription:
    """The job ``spec`` names (module docs); a :class:`JobDefinitionError` says what is wrong."""
    target, _, name = spec.partition(":")
    module = _import_file(target, spec) if target.endswith(".py") or "/" in target else _import_module(target, spec)
    _travel_by_value(module)
    if name:
        if not hasattr(module, name):
            raise JobDefinitionError(f"pipeline {spec!r}: {target} has no {name!r}; its jobs: {_listed(module)}")
        return _as_job(getattr(module, name), spec, name, _module_file(module))
    jobs = _jobs(module)
    if len(jobs) == 1:
        return next(iter(jobs.values()))
    if not jobs:
        raise JobDefinitionError(
            f"pipeline {spec!r}: {target} defines no sparkstate Job at module level; define one "
            "(job = Job(...)...), or name a function that returns one: PIPELINE:NAME"
        )
    raise JobDefinitionError(
        f"pipeline {spec!r}: {target} defines {len(jobs)} jobs ({', '.join(sorted(jobs))}); name one: "
        f"{target}:{sorted(jobs)[0]}"
    )


def _import_file(target: str, spec: str) -> ModuleType:
    path = Path(target)
    if not path.is_file():
        raise JobDefinitionError(f"pipeline {spec!r}: no file {target} (from {Path.cwd()})")
    # a name of its own, not __main__: the file's run-when-executed block stays out
    name = "sparkstate_pipeline_" + re.sub(r"\W", "_", path.stem)
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise JobDefinitionError(f"pipeline {spec!r}: {target} cannot be imported as Python")
    module = importlib.util.module_from_spec(loader_spec)
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the file's own imports of its neighbours, as `python FILE` finds them
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # a sys.exit() in the file ends the import, not the command
        del sys.modules[name]
        raise JobDefinitionError(f"pipeline {spec!r}: importing {target} failed{_failure(exc, path)}") from exc
    return module


def _import_module(target: str, spec: str) -> ModuleType:
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as `python -m` finds a module of the current directory
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and target.startswith(exc.name):
            raise JobDefinitionError(f"pipeline {spec!r}: no module {exc.name!r} (a file is named with its .py: "
                                     f"{target.replace('.', '/')}.py)") from exc
        raise JobDefinitionError(f"pipeline {spec!r}: importing {target} failed: {exc}") from exc
    except (Exception, SystemExit) as exc:
        raise JobDefinitionError(f"pipeline {spec!r}: importing {target} failed"
                                 f"{_failure(exc, _spec_file(target))}") from exc


def _spec_file(target: str) -> Path | None:
    """The file of the module ``target`` (one whose import failed: it is not in ``sys.modules``)."""
    try:
        found = importlib.util.find_spec(target)
    except (Exception, SystemExit):
        return None
    return Path(found.origin) if found is not None and found.origin and found.has_location else None


def _module_file(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file) if file else None


def _where(exc: BaseException, path: Path | None) -> str:
    """`` at FILE:LINE``: the deepest line of the user's file in the exception's traceback."""
    if path is None:
        return ""
    lines = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    return f" at {path}:{lines[-1].lineno}" if lines else ""


def _failure(exc: BaseException, path: Path | None) -> str:
    """`` at FILE:LINE: what happened``, for an exception the code of the pipeline's file raised or
    its ``sys.exit()``."""
    if isinstance(exc, SystemExit):
        return (f"{_where(exc, path)}: it called sys.exit({'' if exc.code is None else repr(exc.code)}). The file is "
                "imported, not run as a script: define the job without exiting, and keep sys.exit() under "
                "`if __name__ == \"__main__\":`")
    return f"{_where(exc, path)}: {''.join(traceback.format_exception_only(exc)).strip()}"


def _travel_by_value(module: ModuleType) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def _jobs(module: ModuleType) -> dict[str, JobDescription]:
    return {n: v for n, v in vars(module).items() if isinstance(v, JobDescription) and not n.startswith("_")}


def _listed(module: ModuleType) -> str:
    return ", ".join(sorted(_jobs(module))) or "none at module level"


def _as_job(value: Any, spec: str, name: str, path: Path | None) -> JobDescription:
    if isinstance(value, JobDescription):
        return value
    if callable(value):
        try:
            made = value()
        except (Exception, SystemExit) as exc:
            tb = exc.__traceback__
            if isinstance(exc, TypeError) and tb is not None and tb.tb_next is None:  # the call itself: it takes arguments
                raise JobDefinitionError(f"pipeline {spec!r}: calling it with no arguments failed: {exc}") from exc
            raise JobDefinitionError(f"pipeline {spec!r}: calling {name}() failed{_failure(exc, path)}") from exc
        if isinstance(made, JobDescription):
            return made
        raise JobDefinitionError(f"pipeline {spec!r}: calling it returned {type(made).__name__}, not a sparkstate Job")
    raise JobDefinitionError(f"pipeline {spec!r} is a {type(value).__name__}, not a sparkstate Job "
                             "(or a function that returns one)")
