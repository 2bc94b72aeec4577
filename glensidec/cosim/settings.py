"""How a Python process hands settings to a cocotb testbench it starts, and how the
testbench reads them: one environment variable, GLENSIDEC_TB_SETTINGS, holding one JSON
object. Every testbench in sim/ and bench/, and the program co-simulation
(glensidec.cosim.runner -> cocotb_program), use it; the keys are theirs:

- `parameters`: the RTL parameters the design was built with ({"ROWS": 16, ...});
- a testbench's own inputs (`layers`, `layer`, `vectors`, `seed`, `job`, the program
  co-simulation's `library`, `args`, `manifest`, `array`) and where it writes results
  (`out`, `report`, `progress`).

The starter builds the whole object at once (`settings_env(parameters=..., layers=...)`),
so there is one place per run that says everything the testbench is told.
"""

from __future__ import annotations

import json
import os
from typing import Any

SETTINGS_ENV = "GLENSIDEC_TB_SETTINGS"


def settings_env(**settings: Any) -> dict[str, str]:
    """The environment entry that hands `settings` (JSON-serialisable) to a testbench."""
    return {SETTINGS_ENV: json.dumps(settings, sort_keys=True)}


def testbench_settings() -> dict[str, Any]:
    """Inside a testbench: the settings it was started with ({} when none)."""
    settings: dict[str, Any] = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    return settings
