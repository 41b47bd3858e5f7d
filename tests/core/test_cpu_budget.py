"""Torch's thread count follows the CPUs the process may use: affinity and the cgroup CPU quota.
Fake cgroup trees stand in for a container's /sys/fs/cgroup."""
import torch

from nogradlab import device, notebook, timing


def _tree(tmp_path, files: dict, proc: str):
    for rel, text in files.items():
        p = tmp_path / "cg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "cgroup").write_text(proc)
    return dict(cgroup_root=str(tmp_path / "cg"), proc_cgroup=str(tmp_path / "cgroup"))


def test_cgroup_v2_quota_caps_the_affinity(tmp_path):
    # Binder / docker --cpus 2 on a 64-core host
    paths = _tree(tmp_path, {"cpu.max": "200000 100000\n"}, "0::/\n")
    assert device.cpu_budget(affinity=set(range(64)), **paths) == 2


def test_fractional_quota_rounds_up_and_never_below_one(tmp_path):
    assert device.cpu_budget(affinity=set(range(8)),
                             **_tree(tmp_path, {"cpu.max": "150000 100000"}, "0::/")) == 2
    assert device.cpu_budget(affinity=set(range(8)),
                             **_tree(tmp_path, {"cpu.max": "10000 100000"}, "0::/")) == 1


def test_no_quota_means_the_affinity(tmp_path):
    paths = _tree(tmp_path, {"cpu.max": "max 100000\n"}, "0::/\n")
    assert device.cpu_budget(affinity={0, 1, 2}, **paths) == 3
    assert device.cpu_budget(affinity={0, 5}, cgroup_root=str(tmp_path / "none"),
                             proc_cgroup=str(tmp_path / "missing")) == 2


def test_a_parent_cgroups_quota_counts_too(tmp_path):
    paths = _tree(tmp_path, {"cpu.max": "max 100000", "kube/pod1/cpu.max": "max 100000",
                             "kube/cpu.max": "400000 100000"}, "0::/kube/pod1\n")
    assert device.cpu_budget(affinity=set(range(32)), **paths) == 4


def test_cgroup_v1_cfs_quota(tmp_path):
    files = {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
             "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
             "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}
    paths = _tree(tmp_path, files, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    assert device.cpu_budget(affinity=set(range(16)), **paths) == 3
    unlimited = _tree(tmp_path / "u", {"cpu/cpu.cfs_quota_us": "-1",
                                       "cpu/cpu.cfs_period_us": "100000"}, "2:cpu:/\n")
    assert device.cpu_budget(affinity=set(range(16)), **unlimited) == 16


def test_affinity_smaller_than_quota(tmp_path):
    paths = _tree(tmp_path, {"cpu.max": "800000 100000"}, "0::/")
    assert device.cpu_budget(affinity={3}, **paths) == 1


def test_this_machine():
    n = device.cpu_budget()
    assert 1 <= n <= len(__import__("os").sched_getaffinity(0))
    assert device.describe("cpu")["cpu_budget"] == n


def test_timing_and_setup_use_no_more_threads_than_the_budget(monkeypatch, capsys):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(max(2, before))
        monkeypatch.setattr(device, "cpu_budget", lambda **_: 1)
        t = timing.measure(lambda: None, min_run_time=0.01, warmup=0)
        assert t.threads == 1
        c = timing.compare({"a": lambda: None, "b": lambda: None}, rounds=2, min_run_time=0.01)
        assert c.threads == 1
        assert timing.measure(lambda: None, min_run_time=0.01, num_threads=2).threads == 2
        assert torch.get_num_threads() == max(2, before)  # timing restores the pool
        notebook.setup("cpu", "tiny")
        assert torch.get_num_threads() == 1  # the notebook's own pool follows the budget
        monkeypatch.setattr(device, "cpu_budget", lambda **_: 64)
        assert device.limit_threads() == 1  # never raised
    finally:
        torch.set_num_threads(before)
