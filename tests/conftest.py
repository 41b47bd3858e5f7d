"""Shared pytest set-up: print the papermill pass's times and memory at the end of the session (and
write them to test-artifacts/papermill/times.json). They are figures, not limits: a slower machine
takes longer; `make bench` prints them beside the budgets."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    import sys

    mod = sys.modules.get("test_notebooks") or sys.modules.get("tests.test_notebooks")
    runs = getattr(mod, "RUNS", None)
    if not runs:
        return
    tr = terminalreporter
    tr.section("notebooks through papermill (device=cpu, scale=tiny)")
    for stem, r in runs.items():
        above = f"   {r['above_floor'] / 1e6:+5.0f} MB over the import floor" if "above_floor" in r else ""
        tr.write_line(f"{stem:<40} {r['seconds']:7.1f} s   kernel peak RSS {r['peak_rss'] / 1e6:7.0f} MB{above}")
    total = sum(r["seconds"] for r in runs.values())
    peak = max(r["peak_rss"] for r in runs.values())
    tr.write_line(f"{'total':<40} {total:7.1f} s   highest peak RSS {peak / 1e6:7.0f} MB")
    try:
        import json

        from nogradlab.outdir import write_text_atomic

        out = mod.OUT_DIR / "times.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps({"total_seconds": total, "notebooks": runs}, indent=1))
    except (OSError, AttributeError):
        pass
