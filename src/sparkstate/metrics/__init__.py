"""Progress, checkpoint and state-size figures of running jobs."""
