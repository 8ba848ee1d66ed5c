"""Every alert rule gives the same answers on every engine, over the promtool tests' own data.

promtool tests the rules on Prometheus 2 and 3, each with its own promtool: Debian's (Prometheus
2) in tests/unit/test_alerts.py, a file at a time, and Prometheus 3's here. For the engines
without promtool, the input series of every test in tests/rules/ are loaded into every engine
(each test in a time slot of its own, four days apart, longer than any rule's window), and each
alert's expression is evaluated as an instant query at every eval_time of every test, and 30 s
later; each answer must equal Prometheus 2's. The `for:` and annotation logic is the rule
evaluator's and the same everywhere, so equal expression answers are equal alerts.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from guard.example.promserver import openmetrics_file
from guard.generate import alert_queries, alerts
from guard.settings import Settings
from tests.engines import (
    ENGINES,
    Engine,
    LocalPrometheus,
    PrometheusUnavailable,
    binaries,
    load_openmetrics,
    serve,
)
from tests.prom_client import PromClient
from tests.tiers import require_engine

pytestmark = pytest.mark.prometheus
RULES = Path(__file__).resolve().parents[2] / "tests" / "rules"
# Not at 00:00 UTC: VictoriaMetrics 1.79 does not show a series whose first sample is exactly at
# midnight UTC to an instant query at that instant (docs/engines.md).
BASE = datetime(2026, 1, 1, 6, 0, tzinfo=UTC)
GAP = timedelta(days=4)  # more than the longest window of any rule (3 days) plus lookback
STEP_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def test_promtool_of_prometheus3_passes_the_rule_tests():
    # Prometheus 2's promtool is the one on PATH, run over the same files by the unit tier
    # (about 3 CPU-minutes each run: once is enough).
    engine: Engine = "prometheus3"
    require_engine(engine)
    promtool = binaries(engine).rules_promtool
    files = sorted(p.name for p in RULES.glob("*.test.yaml"))
    result = subprocess.run(
        [promtool, "test", "rules", *files],
        cwd=RULES,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def seconds(text: str) -> int:
    """
    >>> seconds("25h55m"), seconds("90s")
    (93300, 90)
    """
    parts = re.findall(r"(\d+)([smhd])", text)
    assert "".join(n + u for n, u in parts) == text, text
    return sum(int(n) * STEP_UNITS[u] for n, u in parts)


_STEPS = re.compile(r"^(-?[0-9.e]+)(?:([+-])([0-9.e]+))?x([0-9]+)$")


def expand(values: str) -> list[float | None]:
    """promtool's series notation: ``axN`` is N+1 values, ``a+bxN`` (``a-bxN``) N+1 values from
    a in steps of b, ``_xN`` N gaps, ``stale`` one gap.

    >>> expand("1x2 _x2 0+2x3 5-1x1 stale 7")
    [1.0, 1.0, 1.0, None, None, 0.0, 2.0, 4.0, 6.0, 5.0, 4.0, None, 7.0]
    """
    out: list[float | None] = []
    for token in values.split():
        steps = _STEPS.match(token)
        if token in ("_", "stale"):
            out.append(None)
        elif token.startswith("_x"):
            out.extend([None] * int(token[2:]))
        elif steps:
            start, sign, step, count = steps.groups()
            delta = float(step or 0) * (-1 if sign == "-" else 1)
            out.extend(float(start) + i * delta for i in range(int(count) + 1))
        else:
            out.append(float(token))
    return out


_LABEL = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class RuleTest:
    name: str
    start: datetime
    interval_s: int
    series: tuple[tuple[str, str, tuple[float | None, ...]], ...]  # (name, labels, values)
    eval_times: tuple[datetime, ...]

    @property
    def end(self) -> datetime:
        longest = max(len(v) for _, _, v in self.series)
        return self.start + timedelta(seconds=longest * self.interval_s)


def rule_tests() -> list[RuleTest]:
    found, start = [], BASE
    for path in sorted(RULES.glob("*.test.yaml")):
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            series = []
            for item in test["input_series"]:
                name, _, rest = item["series"].partition("{")
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(_LABEL.findall(rest)))
                series.append((name.strip(), labels, tuple(expand(str(item["values"])))))
            times = sorted({seconds(t["eval_time"]) for t in test.get("alert_rule_test", [])})
            evals = tuple(start + timedelta(seconds=t) for t in times)
            rt = RuleTest(
                test["name"], start, seconds(test.get("interval", "1m")), tuple(series), evals
            )
            found.append(rt)
            start = rt.end + GAP
    return found


def write_openmetrics(tests: list[RuleTest], path: Path) -> None:
    """One family per metric name, one series per label set, samples in time order."""
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for rt in tests:
        for name, labels, values in rt.series:
            points = samples.setdefault(name, {}).setdefault(labels, [])
            base = rt.start.timestamp()
            points.extend(
                (base + i * rt.interval_s, v) for i, v in enumerate(values) if v is not None
            )
    with path.open("w", encoding="utf-8") as out:
        for name in sorted(samples):
            out.write(f"# TYPE {name} gauge\n")
            for labels, points in sorted(samples[name].items()):
                for stamp, value in sorted(points):
                    out.write(f"{name}{{{labels}}} {value:g} {stamp:.3f}\n")
        out.write("# EOF\n")


@pytest.fixture(scope="module")
def rule_data() -> Iterator[tuple[list[RuleTest], dict[Engine, LocalPrometheus]]]:
    tests = rule_tests()
    first = tests[0].eval_times[0]
    servers: dict[Engine, LocalPrometheus] = {}
    with ExitStack() as stack:
        for engine in ENGINES:
            try:
                binaries(engine)
            except PrometheusUnavailable:
                if engine == "prometheus2":
                    require_engine(engine)
                continue
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gng-rules-")))
            write_openmetrics(tests, openmetrics_file(data_dir))
            load_openmetrics(data_dir, engine)
            query = 'count({__name__=~"DCGM_FI_DEV_XID_ERRORS|kube_.+"})'
            servers[engine] = stack.enter_context(
                serve(data_dir, engine, ready_at=first, ready_query=query)
            )
        yield tests, servers


def answers(server: LocalPrometheus, expr: str, at: datetime) -> list[tuple[str, float]]:
    """(labels, value) of each series; a label with an empty value is no label (Prometheus' data
    model; VictoriaMetrics 1.79 shows `max by` labels that no series has as empty ones)."""
    found = PromClient(server.url).vector("alert", expr, at)
    labelled = (
        (",".join(f"{k}={v}" for k, v in s.labels if k != "__name__" and v), round(s.value, 6))
        for s in found
    )
    return sorted(labelled)


def inlined(groups: list[dict[str, object]]) -> list[tuple[str, str]]:
    """Each alert and recording rule's expression with the records it reads written in (an
    instant query has no rule evaluator to record them). The recorded breaker limit is a bare
    number (`or 5` is no vector expression): left as a name, absent on every engine alike."""
    records: dict[str, str] = {}
    out = []
    for group in groups:
        for rule in group["rules"]:  # type: ignore[attr-defined]
            expr = rule["expr"]
            for name, body in records.items():
                expr = re.sub(rf"(?<![\w:]){re.escape(name)}(?![\w:])", f"({body})", expr)
            if "alert" in rule:
                out.append((rule["alert"], expr))
            elif not re.fullmatch(r"[0-9.]+", expr):
                records[rule["record"]] = expr
                out.append((rule["record"], expr))
    return out


EXPRS = [
    pytest.param(expr, id=name)
    for name, expr in inlined(alerts.rule_groups(Settings(), alert_queries.AlertParams()))
]


@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "prometheus2"])
@pytest.mark.parametrize("expr", EXPRS)
def test_alert_expression_answers_as_on_prometheus_2(rule_data, engine, expr):
    tests, servers = rule_data
    if engine not in servers:
        require_engine(engine)
    reference, server = servers["prometheus2"], servers[engine]
    differ = []
    for rt in tests:
        for at in rt.eval_times:
            for when in (at, at + timedelta(seconds=30)):
                want, got = answers(reference, expr, when), answers(server, expr, when)
                if want != got:
                    offset = when - rt.start
                    differ.append(f"{rt.name} at {offset}: prometheus2 {want} {engine} {got}")
    assert not differ, "\n".join(differ[:10])
