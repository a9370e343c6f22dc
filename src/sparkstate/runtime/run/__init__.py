"""A run as its phases: open (checkpoint, lock, --fresh, restore) -> bind (source and sinks) ->
query -> loop -> finish."""
