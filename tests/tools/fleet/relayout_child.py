"""`episodic repack` of one dataset as a separate process (to be killed): `python relayout_child.py SRC DST
OPTIONS SLEEP_S` writes SRC anew at DST with OPTIONS (`RelayoutOptions` as JSON), sleeping SLEEP_S after each
file (so a test can kill it between files), and prints the result as JSON."""

from __future__ import annotations

import json
import sys
import time

from episodic.storage import open_source
from episodic.tools.fleet import relayout as R
from episodic.tools.fleet.relayout_plan import RelayoutOptions

if __name__ == "__main__":
    src, dst, options, pause = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
    for name in ("_write_data", "_write_video"):
        write = getattr(R, name)

        def slow(*args, _write=write, **kwargs):
            _write(*args, **kwargs)
            time.sleep(pause)

        setattr(R, name, slow)
    print(json.dumps(R.relayout(open_source(src), dst, RelayoutOptions.from_json(options))), flush=True)
