"""The seed jobs, each a small keyed function on the UPI payment generator.

``JOBS`` maps a CLI name to its :class:`~sparkstate.jobs.registry.SeedJob`; ``sparkstate jobs``
lists them and ``sparkstate run NAME`` runs one.
"""

from sparkstate.jobs.registry import JOBS, SeedJob, get_job

__all__ = ["JOBS", "SeedJob", "get_job"]
