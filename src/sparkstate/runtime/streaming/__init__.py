"""The streaming query: the plan (Python or native path), the stateful processor that runs the
key groups, and the query built from a job."""
