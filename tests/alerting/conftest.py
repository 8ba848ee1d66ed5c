"""The alerting tier: real Prometheus, Alertmanager and Pushgateway (Debian packages).

Outside CI a missing binary skips the tier with one line; under CI=true it fails (tests/tiers.py).
`push_stack` is the reusable Pushgateway fixture: a real Pushgateway scraped by a real Prometheus
(honor_labels, as docs/metrics.md asks of a site). It is shared by the session, so each test
pushes under a grouping key (namespace) of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.alerting import servers
from tests.tiers import unavailable

PUSH_SCRAPE_S = 1  # the tests read pushes back; how often is not what they test


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "alerting: needs real Prometheus, Alertmanager and Pushgateway servers"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.alerting)


def need(*tools: str) -> None:
    missing = [t for t in tools if servers.find(t) is None]
    if missing:
        packages = sorted({servers.PACKAGES[t] for t in missing})
        unavailable(
            "alerting",
            f"{', '.join(missing)} not found",
            f"install the Debian package(s) {' '.join(packages)}",
        )


@dataclass(frozen=True, slots=True)
class PushStack:
    pushgateway_url: str
    prometheus_url: str
    workdir: Path


@contextmanager
def push_stack_in(workdir: Path, rule_files: Sequence[Path] = ()) -> Iterator[PushStack]:
    """Pushgateway + Prometheus scraping it every second, optionally evaluating `rule_files`."""
    need("prometheus", "pushgateway")
    (workdir / "pushgateway").mkdir()
    (workdir / "prometheus").mkdir()
    with servers.pushgateway(workdir / "pushgateway") as gateway:
        config = {
            "global": {"scrape_interval": f"{PUSH_SCRAPE_S}s"},
            "rule_files": [str(f) for f in rule_files],
            "scrape_configs": [
                {
                    "job_name": "pushgateway",
                    "honor_labels": True,
                    "static_configs": [{"targets": [gateway.removeprefix("http://")]}],
                }
            ],
        }
        with servers.prometheus(config, workdir / "prometheus") as prom:
            yield PushStack(gateway, prom, workdir)


@pytest.fixture(scope="session")
def push_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PushStack]:
    with push_stack_in(tmp_path_factory.mktemp("push-stack")) as stack:
        yield stack
