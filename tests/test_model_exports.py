"""``nodetopo.model`` is the address of every record (``from nodetopo.model import X``), and each of
its modules is imported when one of its names is first asked for: a fresh import loads none."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = """\
import json, sys
import nodetopo.model as model
loaded_at_import = sorted(m for m in sys.modules if m.startswith("nodetopo.model."))
wrong = []
for name in model.__all__:
    value = getattr(model, name)
    home = sys.modules[f"nodetopo.model.{model._MODULE_OF[name]}"]
    if vars(home).get(name) is not value or getattr(value, "__module__", home.__name__) != home.__name__:
        wrong.append(name)
try:
    model.NoSuchRecord
    unknown = "no error"
except AttributeError as e:
    unknown = str(e)
print(json.dumps({
    "loaded_at_import": loaded_at_import,
    "all": sorted(model.__all__),
    "table": sorted(model._MODULE_OF),
    "wrong": wrong,
    "unknown": unknown,
    "in_dir": sorted(set(model.__all__) - set(dir(model))),
}))
"""


def test_every_name_is_its_modules_own_and_imported_when_asked() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    assert report["loaded_at_import"] == []
    assert report["all"] == report["table"]  # every exported name has its module, and no more
    assert report["wrong"] == []
    assert report["unknown"] == "module 'nodetopo.model' has no attribute 'NoSuchRecord'"
    assert report["in_dir"] == []
