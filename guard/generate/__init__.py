"""The generators: the alert rules (`alerts`, `alert_queries`), the admission policies
(`policies`) and the site-configuration check (`config`) that proves an overlay agrees
with both. They write files of the repository; `run` imports none of them.
"""

from __future__ import annotations

import yaml


class BlockDumper(yaml.SafeDumper):
    """Multi-line strings (PromQL, the dashboard's JSON) as `|` blocks, readable in a review."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


BlockDumper.add_representer(str, _str)
