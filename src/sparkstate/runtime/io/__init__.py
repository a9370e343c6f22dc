"""Sources and sinks on Spark: each binding turns a source or sink spec into a streaming
DataFrame or a writer, and prepares what it needs itself."""
