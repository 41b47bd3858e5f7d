"""Settings (device, scale, seed) are resolved once per entry point and passed down (issue 42, deliverable 3).

Before: ``scale`` was resolved 4 times on the CLI ``claims`` path for one claim and twice from a notebook's
setup and one check; the seed 3 times and twice. The resolvers are counted here by wrapping them."""
import collections
import contextlib
import inspect
import io
from pathlib import Path

import pytest

from nogradlab import claims
from nogradlab.__main__ import main
from nogradlab.core import device as _device
from nogradlab.core import settings as _settings
from nogradlab.core import workloads as _workloads
from nogradlab.lab import notebook

REPORT_PY = str(Path(_settings.__file__).resolve().parents[1] / "run" / "report.py")


@pytest.fixture
def counted(monkeypatch):
    """Every call of the resolvers counted, by resolver, and for ``resolve_scale`` by the file calling it.
    The settings a notebook's setup remembers are restored afterwards."""
    monkeypatch.setattr(_settings, "_REMEMBERED", None)
    calls = collections.Counter()

    def wrap(module, name):
        real = getattr(module, name)

        def counting(*args, **kwargs):
            calls[name] += 1
            if name == "resolve_scale":
                calls["resolve_scale from " + inspect.stack()[1].filename] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    wrap(_settings, "resolve")
    wrap(_workloads, "resolve_scale")
    wrap(_device, "check_seed")
    return calls


def test_the_cli_claims_path_resolves_the_settings_once(counted):
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["claims", "--ids", "C30", "--device", "cpu", "--scale", "auto", "--no-results", "--no-progress"])
    assert rc == 0
    assert counted["resolve"] == 1 and counted["check_seed"] == 1, counted
    # the one left is report.build_doc's (run/report.py takes device and scale strings): see the next test
    assert counted["resolve_scale"] - counted["resolve_scale from " + REPORT_PY] == 1, counted


def test_the_cli_claims_path_resolves_the_scale_once_in_all(counted):
    with contextlib.redirect_stdout(io.StringIO()):
        main(["claims", "--ids", "C30", "--device", "cpu", "--scale", "auto", "--no-results", "--no-progress"])
    assert counted["resolve_scale"] == 1, counted


def test_a_notebooks_setup_and_a_check_resolve_the_settings_once(counted):
    with contextlib.redirect_stdout(io.StringIO()):
        device, scale = notebook.setup(device="auto", scale="auto", seed=0)
        r = claims.check("C30", device=device, scale=scale, seed=0)
    assert (device, scale) == ("cpu", "tiny") and r.scale == "tiny"
    assert (counted["resolve"], counted["resolve_scale"], counted["check_seed"]) == (1, 1, 1), counted


def test_a_learners_keywords_are_resolved_at_the_door_and_still_checked(counted):
    with contextlib.redirect_stdout(io.StringIO()):
        notebook.setup(device="cpu", scale="tiny", seed=0)
    counted.clear()
    # other values than the ones setup handed out are resolved (once), and checked
    for bad, allowed in (({"scale": "huge"}, "auto, tiny, small, full"), ({"seed": True}, "integer"),
                         ({"device": "tpu"}, "cpu")):
        kwargs = {"device": "cpu", "scale": "tiny", "seed": 0, **bad}
        with pytest.raises(ValueError, match=allowed):
            claims.check("C30", **kwargs)
    assert counted["resolve"] == 3


def test_settings_are_checked_and_not_given_twice():
    s = _settings.resolve("cpu", "auto", 7)
    assert (str(s.device), s.scale, s.seed) == ("cpu", "tiny", 7)
    with pytest.raises(ValueError, match="tiny, small, full"):
        _settings.Settings(s.device, "auto", 0)
    with pytest.raises(TypeError, match="torch.device"):
        _settings.Settings("cpu", "tiny", 0)
    with pytest.raises(ValueError, match="not both"):
        _settings.given(s, device="cpu")
    with pytest.raises(ValueError, match="not both"):
        claims.check("C30", scale="tiny", settings=s)
    assert _settings.given(s) is s
    with pytest.raises(ValueError, match="--seed"):
        _settings.resolve("cpu", "tiny", 2 ** 64, seed_name="--seed")
