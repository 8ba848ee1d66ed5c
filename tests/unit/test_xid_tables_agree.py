"""One fact, two users: the reset-class Xids of the return check and of the evidence verdict.

The return check asks for `reset-done` instead of a reboot for `Settings.reset_class_xids`; the
evidence Job tells on-call to reset the GPU for the `reset` rows of guard/data/xid-classes.tsv.
If they disagree, on-call is told to reset a GPU the guard then waits to see rebooted, or the
other way round.
"""

from __future__ import annotations

from guard.settings import Settings
from guard.xid_tables import Repair, load_classes


def test_default_reset_class_xids_are_the_reset_rows_of_the_verdict_table() -> None:
    table = load_classes()
    reset_rows = sorted(code for code, verdict in table.classes.items() if verdict is Repair.RESET)
    assert sorted(Settings().reset_class_xids) == reset_rows
