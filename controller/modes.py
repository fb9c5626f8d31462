"""The switch's queue disciplines by name, and the families they fall in: what the data plane's
port_mode actions (p4src/egress.p4) do, said once for the controller (dataplane.py), the YAML schema
and the reading side (metrics, plots), which must not import finsy for it."""

from __future__ import annotations

MODES = ("droptail", "ecn", "pcn", "pcn-host")
MARKING_MODES = ("ecn", "pcn", "pcn-host")   # the modes that mark ECN at K (droptail only drops)
K_PRE_MODES = ("pcn", "pcn-host")   # the modes with a lower threshold K_pre for background (the others ignore it)
WINDOW_MODES = ("pcn",)             # the modes whose pre-drain windows the controller opens from burst reports
