"""The adapter onto Spark: session, sources and sinks, the stateful processor, the query and
its run loop, checkpoints. The package of sparkstate that imports pyspark and py4j; nothing
below it does (see docs/design.md, "Layers")."""
