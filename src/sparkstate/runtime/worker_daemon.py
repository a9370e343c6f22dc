"""PySpark's Python worker daemon, importing pyspark from the installed package.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path. Python
cannot cache bytecode for modules imported from a zip, so every new worker compiled
pyspark's modules again: about 1-2 s of CPU per worker here, paid in the first batch of
every run (measured: importing the worker's modules took 1.7-3.0 s from the zip, 0.9-1.1 s
from the installed package). When that zip is the one inside the installed pyspark package
(a pip install: the same files), this daemon moves it behind the installed package and then
runs ``pyspark.daemon`` unchanged. Spark starts it through ``spark.python.daemon.module``.
"""

from __future__ import annotations

import os
import runpy
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


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
