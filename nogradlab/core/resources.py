"""What this process may use of the machine: CPUs (:func:`cpu_budget`) and memory not yet taken
(:func:`memory_headroom`), read from the scheduler's affinity, the cgroup's limits and ``/proc/meminfo``.

Imports no torch: ``nogradlab estimate`` asks before it loads torch whether a second process is worth
starting (:mod:`nogradlab.estimate.split`).
"""
from __future__ import annotations

import math
import os

__all__ = ["cpu_budget", "memory_headroom"]


def _read(path) -> "str | None":
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _quota(text_quota, text_period) -> "float | None":
    """CPUs allowed by a CFS quota over a period (None: no quota)."""
    try:
        quota, period = float(text_quota), float(text_period)
    except (TypeError, ValueError):
        return None
    if quota <= 0 or period <= 0:  # v1 writes -1 for "no limit"
        return None
    return quota / period


def _cgroup_quotas(root: str, proc_cgroup: str) -> list:
    """The CPU quotas (in CPUs) of this process's cgroup and its ancestors, v2 and v1."""
    lines = (_read(proc_cgroup) or "").splitlines()
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.strip("/")
        # the process's own cgroup, then each parent up to the mount's root (a container usually
        # sees its own cgroup as the root)
        rel = [path] if path else []
        while rel and "/" in rel[-1]:
            rel.append(rel[-1].rsplit("/", 1)[0])
        rel.append("")
        if controllers == "":  # cgroup v2: one unified hierarchy, cpu.max = "QUOTA PERIOD"
            for r in rel:
                text = _read(os.path.join(root, r, "cpu.max"))
                if text:
                    q, _, per = text.partition(" ")
                    found.append(_quota(None if q == "max" else q, per or "100000"))
        elif "cpu" in controllers.split(","):  # cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                for r in rel:
                    base = os.path.join(root, mount, r)
                    found.append(_quota(_read(os.path.join(base, "cpu.cfs_quota_us")),
                                        _read(os.path.join(base, "cpu.cfs_period_us"))))
    return [q for q in found if q is not None]


def cpu_budget(*, affinity=None, cgroup_root: str = "/sys/fs/cgroup",
               proc_cgroup: str = "/proc/self/cgroup") -> int:
    """How many CPUs this process may really use: the CPUs it may be scheduled on
    (``os.sched_getaffinity``) capped by its cgroup's CPU quota (v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us / cpu.cfs_period_us``, the process's cgroup and its parents), rounded up;
    at least 1. A container given 2 CPUs on a 64-core host (Binder, Docker ``--cpus 2``) answers 2,
    where ``os.cpu_count()`` and torch's default thread pool see 64.

    ``affinity`` (a set of CPU ids), ``cgroup_root`` and ``proc_cgroup`` are for tests."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # macOS, Windows
            affinity = range(os.cpu_count() or 1)
    n = max(1, len(affinity))
    quotas = _cgroup_quotas(cgroup_root, proc_cgroup)
    if quotas:
        n = min(n, max(1, math.ceil(min(quotas) - 1e-9)))
    return n


def _cgroup_dirs(root: str, proc_cgroup: str) -> list:
    """The cgroup v2 folders of this process, its own first, then each parent up to the mount's root."""
    out = []
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1] == "":
            rel = parts[2].strip().strip("/")
            while rel:
                out.append(os.path.join(root, rel))
                rel = rel.rpartition("/")[0]
            out.append(root)
    return out


def memory_headroom(*, meminfo: str = "/proc/meminfo", cgroup_root: str = "/sys/fs/cgroup",
                    proc_cgroup: str = "/proc/self/cgroup") -> "int | None":
    """Bytes this process could still take before the machine or its container runs short: the
    smaller of ``MemAvailable`` (``/proc/meminfo``) and, for each cgroup v2 folder of the process with a
    limit, ``memory.max - memory.current``. None where neither can be read (macOS, Windows).

    ``meminfo``, ``cgroup_root`` and ``proc_cgroup`` are for tests."""
    found = []
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                found.append(int(line.split()[1]) * 1024)
            except (IndexError, ValueError):
                pass
    for d in _cgroup_dirs(cgroup_root, proc_cgroup):
        limit, used = _read(os.path.join(d, "memory.max")), _read(os.path.join(d, "memory.current"))
        if limit and limit != "max" and used:
            try:
                found.append(max(0, int(limit) - int(used)))
            except ValueError:
                pass
    return min(found) if found else None
