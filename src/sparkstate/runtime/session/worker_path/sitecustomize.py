"""Run at the start of every Python process Spark starts for sparkstate (this folder is on
their ``PYTHONPATH``, see ``runtime/session/classic.py``): import pyspark from the installed
package rather than from the copy zipped inside it.

Spark puts ``pyspark.zip`` first on its Python processes' path, and Python caches no bytecode
for modules imported from a zip, so each process compiled pyspark's modules again: about 1-2 s
of CPU for each data-source planner, streaming source runner, stateful-processor driver
worker and Python worker, several per query. When the zip is the one inside the installed
pyspark package (a pip install: the same files), it moves behind that package. Another
``sitecustomize`` on the path still runs after this one.
"""

import importlib.util
import os
import sys


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` with the zips of an installed pyspark package after the other entries."""
    shipped = [p for p in path if p.endswith(".zip") and f"{os.sep}pyspark{os.sep}python{os.sep}lib{os.sep}" in p]
    installed = [
        p for p in path if p not in shipped and os.path.isfile(os.path.join(p, "pyspark", "__init__.py"))
        and any(z.startswith(os.path.join(p, "pyspark") + os.sep) for z in shipped)
    ]
    if not installed:
        return path
    return [p for p in path if p not in shipped] + shipped


def _chain() -> None:
    """Run the ``sitecustomize`` this one hides, if the environment has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_sitecustomize_next", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if __name__ == "sitecustomize":  # imported by Python's start-up, not by a test
    sys.path[:] = prefer_installed_pyspark(sys.path)
    _chain()
