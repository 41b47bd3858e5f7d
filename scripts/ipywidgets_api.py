"""Dump the ipywidgets API nogradlab.widgets may rely on: for each widget class, its traits (the
keyword arguments it accepts) and public methods, as JSON. tests/lab/test_widgets_compat.py checks
nogradlab/lab/widgets.py against the dump of the oldest supported release (7.7.0):

    pip install --no-deps --target /tmp/w77 ipywidgets==7.7.0 ipython_genutils
    PYTHONPATH=/tmp/w77 python scripts/ipywidgets_api.py > tests/data/ipywidgets_7.7.0_api.json
"""
import inspect
import json
import sys

import ipywidgets as W

out = {"version": W.__version__, "classes": {}}
for name in sorted(dir(W)):
    cls = getattr(W, name)
    if inspect.isclass(cls) and hasattr(cls, "class_trait_names"):
        out["classes"][name] = {
            "traits": sorted(cls.class_trait_names()),
            "methods": sorted(m for m in dir(cls) if not m.startswith("_")
                              and callable(getattr(cls, m, None))),
        }
json.dump(out, sys.stdout, indent=0, sort_keys=True)
