"""The adapter onto Spark: session, sources and sinks, the stateful processor, the query and
its run loop, checkpoints. The package of sparkstate that imports pyspark and py4j; nothing
below it does (see docs/design/layers.md)."""

# source bindings in modules of their own register themselves with spark_sources.spark_source
# when imported: importing the package registers them before any binding is looked up
from sparkstate.runtime.io import kafka_source as _kafka_source  # noqa: E402,F401
