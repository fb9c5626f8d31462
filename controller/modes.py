"""The switch's queue disciplines by name, the families they fall in, and their thresholds' defaults:
what the data plane's port_mode actions (p4src/egress.p4) do, said once for the controller
(dataplane.py), the YAML schema, the command line and the reading side (metrics, plots), which must
not import finsy for it."""

from __future__ import annotations

DROPTAIL = "droptail"               # drop at a full queue: the default, and all a Linux bridge does
MODES = (DROPTAIL, "ecn", "pcn", "pcn-host")
MARKING_MODES = ("ecn", "pcn", "pcn-host")   # the modes that mark ECN at K (droptail only drops)
K_PRE_MODES = ("pcn", "pcn-host")   # the modes with a lower threshold K_pre for background (the others ignore it)
WINDOW_MODES = ("pcn",)             # the modes whose pre-drain windows the controller opens from burst reports
ANNOUNCE_MODES = ("pcn-host",)      # the modes whose bursts the hosts announce ahead (PCN-START), holding K_pre
K, K_PRE = 40, 10   # the default thresholds (packets): ECN marking, and background's while a burst is expected
