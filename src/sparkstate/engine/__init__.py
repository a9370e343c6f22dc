"""Engine-neutral execution, shared by the in-process harness and the Spark runtime.

The keyed operator (``operator``), the window operator (``windows``), how a job's keyed
function is compiled (``compile``), key groups and their buckets (``keygroups``), events on
their way to the operator (``events``) and output rows (``output``). Nothing here imports
pyspark or ``sparkstate.runtime``: the harness runs this code exactly as Spark does.
"""
