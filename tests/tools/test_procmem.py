"""tools.procmem: the peak-memory watcher and the memory cgroup that benchmarks/session.py
--memory-limit runs notebooks in. The cgroup tests that need a real memory controller (Linux, root)
skip without one; the others use a directory that stands in for one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tools.procmem import MemoryLimit, MemoryLimitUnavailable, PeakRSS

HOLD = ("import time; b = bytearray({n}); b[::4096] = b'x' * len(b[::4096]); print('held', flush=True); "
        "time.sleep({s})")


def _real_cgroups() -> bool:
    try:
        MemoryLimit(2**26)
    except MemoryLimitUnavailable:
        return False
    return True


needs_cgroup = pytest.mark.skipif(not _real_cgroups(), reason="no writable memory cgroup here (Linux, root)")


@pytest.mark.parametrize("bad", [0, -1, 1000, "1GB", None, True, float("nan"), float("inf")])
def test_a_bad_limit_is_refused_before_any_work(bad, tmp_path):
    with pytest.raises(ValueError, match=r"number of bytes >= 1 MiB \(e\.g\. 1e9\)"):
        MemoryLimit(bad, parent=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_parent_that_is_no_cgroup_directory_is_refused(tmp_path):
    with pytest.raises(MemoryLimitUnavailable, match="not a writable cgroup directory"):
        MemoryLimit(1e9, parent=str(tmp_path / "missing"))


def test_it_makes_its_group_writes_the_cap_and_removes_only_its_own(tmp_path, monkeypatch):
    """Against a stand-in for a cgroup v1 directory: a group of its own with the cap (swap capped
    alike), the command run inside it, and on exit that group removed and nothing else."""
    (tmp_path / "memory.limit_in_bytes").write_text("9223372036854771712")
    (tmp_path / "someone-elses").mkdir()
    removed = []
    monkeypatch.setattr(MemoryLimit, "_rmdir", staticmethod(lambda p: (removed.append(p), shutil.rmtree(p))))
    box = MemoryLimit(1e9, parent=str(tmp_path))
    assert box.version == 1
    with box:
        mine = box.path
        assert os.path.dirname(mine) == str(tmp_path) and os.path.basename(mine).startswith("nogradlab-")
        assert open(os.path.join(mine, "memory.limit_in_bytes")).read() == "1000000000"
        r = box.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        assert r.returncode == 0
        assert box.pids() == [int(r.stdout)]  # the command itself joined the group (sh exec'd into it)
        st = box.stats()
        assert st["limit_bytes"] == 10**9 and st["oom_kills"] == 0 and st["cgroup_version"] == 1
    assert removed == [mine] and not os.path.exists(mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.limit_in_bytes", "someone-elses"]
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        box.run(["true"])


@pytest.mark.parametrize("version, files, anon", [
    (1, {"memory.max_usage_in_bytes": "52428800\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
         "memory.stat": "rss 1\ntotal_rss 3145728\ntotal_shmem 1048576\nworkingset_refault_file 10\npgmajfault 7\n"},
     4 * 2**20),
    (2, {"memory.peak": "52428800\n", "memory.events": "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n",
         "memory.stat": "anon 3145728\nfile 9\nshmem 1048576\nworkingset_refault_file 10\npgmajfault 7\n"},
     4 * 2**20),
])
def test_stats_read_each_cgroup_version(version, files, anon, tmp_path, monkeypatch):
    """The figures as each version's files give them (stand-in files): peak charge, OOM kills,
    anonymous memory (anon/rss and shmem), file pages read back (pages of 4 KiB), major faults."""
    if version == 1:
        (tmp_path / "memory.limit_in_bytes").write_text("max")
    monkeypatch.setattr(MemoryLimit, "_rmdir", staticmethod(shutil.rmtree))
    with MemoryLimit(2**30, parent=str(tmp_path)) as box:
        assert box.version == version
        assert open(os.path.join(box.path, "memory.limit_in_bytes" if version == 1 else "memory.max")).read() \
            == str(2**30)
        for name, text in files.items():
            open(os.path.join(box.path, name), "w").write(text)
        st = box.stats()
    assert st == {"limit_bytes": 2**30, "peak_bytes": 52428800, "anon_peak_bytes": anon, "oom_kills": 2,
                  "refault_bytes": 10 * os.sysconf("SC_PAGE_SIZE"), "major_faults": 7, "cgroup_version": version}


@needs_cgroup
def test_a_command_over_the_cap_is_killed_and_counted():
    with MemoryLimit(64 * 2**20) as box:
        path = box.path
        r = box.run([sys.executable, "-c", HOLD.format(n=300 * 2**20, s=0)], capture_output=True, text=True)
        st = box.stats()
    assert r.returncode == -9 and "held" not in r.stdout
    assert st["oom_kills"] >= 1
    assert not os.path.exists(path)


@needs_cgroup
def test_a_command_under_the_cap_runs_and_its_anonymous_memory_is_seen():
    with MemoryLimit(512 * 2**20) as box:
        r = box.run([sys.executable, "-c", HOLD.format(n=100 * 2**20, s=0.5)], capture_output=True, text=True)
        st = box.stats()
    assert r.returncode == 0 and "held" in r.stdout
    assert st["oom_kills"] == 0
    assert 100 * 2**20 <= st["anon_peak_bytes"] <= 512 * 2**20


@needs_cgroup
def test_what_still_runs_in_the_group_is_killed_on_exit_and_on_timeout():
    with MemoryLimit(256 * 2**20) as box:
        path = box.path
        r = box.run(["/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
        orphan = int(r.stdout)
        assert orphan in box.pids()  # left behind by its parent, still in the group
        t0 = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            box.run(["sleep", "60"], timeout=0.5)
        assert time.monotonic() - t0 < 30
    assert not os.path.exists(f"/proc/{orphan}") or open(f"/proc/{orphan}/stat").read().split()[2] == "Z"
    assert not os.path.exists(path)


def test_peak_rss_reports_anonymous_memory_below_the_resident_peak():
    with PeakRSS(interval=0.02) as rss:
        subprocess.run([sys.executable, "-c", HOLD.format(n=200 * 2**20, s=0.6)], check=True,
                       capture_output=True)
    assert rss.anon_peak >= 200 * 2**20
    assert rss.anon_peak <= rss.peak

