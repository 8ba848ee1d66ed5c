"""The cadence, the CronJob's deadline and the cycle's own deadline are one fact in several files;
and the layout names the manifests pin are not runtime settings a site flips without a word.

Where each appears (read by this test): manifests/base/cronjob.yaml (`schedule`,
`activeDeadlineSeconds`, `startingDeadlineSeconds`), guard/settings.py (`cadence_s`,
`CRONJOB_DEADLINE_S`, `cycle_deadline_s`, `prometheus_timeout_s`), guard/generate/alert_queries.py
(`not_running_after_s`, three cycles), the settings.env files (none may move them), and the docs
that quote them (README.md, docs/deploy.md, docs/writes.md, docs/benchmarks.md).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from guard.cli import cli
from guard.example.promserver import prometheus_config
from guard.example.scenario import Scenario
from guard.generate.alert_queries import AlertParams
from guard.settings import (
    CRONJOB_DEADLINE_S,
    CRONJOB_ENV,
    LAYOUT_SETTINGS,
    RENDER_SETTINGS,
    SITE_GROUPS,
    SITE_SETTINGS,
    WATCH_MARGIN_S,
    Settings,
    fixed_settings,
    setting_default,
    setting_fields,
)

REPO = Path(__file__).resolve().parents[2]
CRONJOB = REPO / "manifests" / "base" / "cronjob.yaml"
TIMING = ("GUARD_CADENCE_S", "GUARD_CYCLE_DEADLINE_S", "GUARD_PROMETHEUS_LIMITS")


def cronjob_spec() -> dict:
    (cron,) = [d for d in yaml.safe_load_all(CRONJOB.read_text()) if d and d["kind"] == "CronJob"]
    return dict(cron["spec"])


def schedule_minutes(schedule: str) -> int:
    found = re.fullmatch(r"\*/(\d+) \* \* \* \*", schedule)
    assert found, f"{schedule!r}: not an every-N-minutes schedule"
    return int(found.group(1))


def test_the_schedule_the_deadline_and_the_cycle_deadline_are_one_fact() -> None:
    spec, s = cronjob_spec(), Settings()
    cadence_s = schedule_minutes(spec["schedule"]) * 60
    deadline = spec["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert s.cadence_s == cadence_s  # the plan's "within two cycles" counts in schedules
    assert deadline == CRONJOB_DEADLINE_S < cadence_s  # a cycle ends before the next one starts
    # a run killed at the deadline is gone before the next tick: Forbid never skips a slot for it
    grace = spec["jobTemplate"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert deadline + grace < cadence_s
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] + deadline <= cadence_s + deadline  # skipped, not piled
    # The cycle stops retrying with room left for its last write and its push.
    assert s.cycle_deadline_s <= CRONJOB_DEADLINE_S - 10
    assert s.prometheus_timeout_s < CRONJOB_DEADLINE_S
    assert AlertParams().not_running_after_s == 3 * cadence_s


def test_no_settings_file_moves_the_timing() -> None:
    """The schedule and the deadline live in the CronJob: a site that set GUARD_CADENCE_S in
    settings.env would make the plan count in cycles the CronJob does not run."""
    for env in sorted(REPO.glob("manifests/**/settings.env")):
        names = {
            line.split("=", 1)[0]
            for line in env.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        }
        assert not names & set(TIMING), env


@pytest.mark.parametrize(
    ("doc", "quoted"),
    [
        ("README.md", "`*/{m} * * * *`"),
        ("README.md", "`activeDeadlineSeconds` ({d})"),
        ("docs/deploy.md", "`*/{m} * * * *`"),
        ("docs/deploy.md", "{d} s deadline"),
        ("docs/writes.md", "`activeDeadlineSeconds: {d}`"),
        ("docs/benchmarks.md", "`*/{m}`"),
    ],
)
def test_the_docs_quote_the_manifests_timing(doc: str, quoted: str) -> None:
    spec = cronjob_spec()
    minutes = schedule_minutes(spec["schedule"])
    text = quoted.format(m=minutes, d=spec["jobTemplate"]["spec"]["activeDeadlineSeconds"])
    assert text in (REPO / doc).read_text(), f"{doc} does not say {text}"


def test_a_namespace_other_than_the_manifests_warns_at_start() -> None:
    """The one layout name a run can be given (its pod's namespace, GUARD_NAMESPACE): one WARN
    line naming it, the value and what the manifests pin; the command still runs (a site that
    regenerated its policies and manifests may mean it). The other layout names are no setting."""
    out = CliRunner().invoke(
        cli, ["render", "evidence", "--node", "gpu-1"], env={"GUARD_NAMESPACE": "other-name"}
    )
    warns = [line for line in out.stderr.splitlines() if line.startswith("WARN layout setting")]
    assert out.exit_code == 0, out.output
    assert len(warns) == 1, out.stderr
    assert "GUARD_NAMESPACE" in warns[0] and repr(setting_default("namespace")) in warns[0]
    assert set(LAYOUT_SETTINGS) - {"namespace"} <= set(fixed_settings())


def test_the_defaults_are_the_manifests_and_say_nothing() -> None:
    out = CliRunner().invoke(cli, ["render", "evidence", "--node", "gpu-1"])
    assert out.exit_code == 0 and "WARN" not in out.stderr, out.stderr


def test_the_watch_keeps_to_the_deadline_and_polls_once_per_scrape(tmp_path: Path) -> None:
    """The watch ends `WATCH_MARGIN_S` before the CronJob's deadline, counted from the Job's
    schedule (the pod reads its Job's name, which carries it); it polls and re-reads a due node
    on the scrape grid, which divides the cycle's step; the example's Prometheus and scenarios
    scrape at that interval."""
    spec, s = cronjob_spec(), Settings()
    deadline = spec["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert s.watch_until_s == deadline - WATCH_MARGIN_S > 0
    (guard,) = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {
        e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in guard["env"]
    }
    assert env["GUARD_JOB_NAME"] == "metadata.labels['batch.kubernetes.io/job-name']"
    assert s.query_step_s % s.scrape_interval_s == 0
    assert Scenario(datetime.now(UTC), 1, ()).scrape_s == s.scrape_interval_s
    config = yaml.safe_load(prometheus_config(tmp_path).read_text())
    assert config["global"]["scrape_interval"] == f"{s.scrape_interval_s}s"


def test_every_setting_has_one_lifetime() -> None:
    """A field is the site's (one group), the CronJob's own, or fixed: never two of them. The
    CronJob's manifest writes only its own values, and its settings.env only the site's."""
    site = [name for group in SITE_GROUPS.values() for name in group]
    assert len(site) == len(set(site)) == len(SITE_SETTINGS)
    assert not set(site) & set(CRONJOB_ENV)
    every = {f.name for f in setting_fields()}
    assert set(site) | set(CRONJOB_ENV) | set(fixed_settings()) == every
    assert set(RENDER_SETTINGS) <= set(site)
    (guard,) = cronjob_spec()["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    written = {e["name"] for e in guard["env"] if e["name"].startswith("GUARD_")}
    assert written <= {"GUARD_" + n.upper() for n in CRONJOB_ENV}, written
    base = (REPO / "manifests" / "base" / "settings.env").read_text().splitlines()
    keys = {line.split("=", 1)[0] for line in base if line.strip() and not line.startswith("#")}
    assert keys <= {"GUARD_" + n.upper() for n in SITE_SETTINGS}, keys
