"""bench/returns.py: the replayed schedule of a return, with and without the return's turns."""

from __future__ import annotations

from bench.returns import Case, chain, returned_after, table, time_to_return
from guard.settings import Settings

S = Settings()
REBOOT = Case("reboot", "reboot", ("conformance", "loadtest"))


def test_the_steps_are_the_return_checks_own():
    assert chain() == ("conformance", "loadtest")
    reset = chain(
        boot="boot-1", guarded_xid=S.reset_class_xids[0], reset_done="2026-09-21T05:30:00Z r"
    )
    assert reset == ("conformance", "loadtest")


def test_without_the_loop_each_run_takes_one_step():
    # back at 2 s, the cycle at 7 s makes the conformance Job, the next run's cycle (307 s) the
    # load test, the one after (607 s) returns the node.
    assert returned_after(REBOOT, 2, 4, loop=False, s=S) == 605


def test_with_the_loop_each_step_follows_its_result_within_a_poll():
    # the cycle at 7 s; conformance readable at 22 s: the poll then (+1 s read) makes the load
    # test; readable 95 s later (118 s), the poll at 122 s (+1 s) returns the node.
    assert returned_after(REBOOT, 2, 4, loop=True, s=S) == 121


def test_a_step_past_the_watch_is_the_next_runs():
    # back at 200 s: conformance at the poll of 202 s (+1), readable 218 s, load test at 222 s,
    # readable 318 s: after this run's watch (240 s); the next run's cycle (307 s) is earlier, so
    # its first poll after 318 s returns it.
    assert returned_after(REBOOT, 200, 4, loop=True, s=S) == 322 + 1 - 200


def test_the_table_says_whether_the_targets_are_met():
    rows = table(time_to_return(15), 15)  # the published step
    looped = [r for r in rows if "| yes |" in r]
    assert looped and all(r.count(" met") == 2 for r in looped)
    assert all("missed" in r for r in rows if "no (before)" in r)
