"""Process limits raised when any crossbeat command starts."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("crossbeat")


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one, as Go's runtime does for every
    program: each connection, segment and pinned read holds a descriptor, and the usual soft
    default of 1024 is a few hundred clients. Returns the soft limit in force (processes
    started from this one inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # e.g. above fs.nr_open
            log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft
