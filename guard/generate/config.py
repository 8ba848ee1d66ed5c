"""``gpu-node-guard config check DIR``: render a site's overlay with kustomize and prove that every
consumer of its settings sees the same values (docs/deploy.md, "The check"). One line per problem;
exit 1 when there is one, 2 when the overlay does not render."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from guard.generate import alert_queries, alerts, policies
from guard.generate.policies import params
from guard.names import SETTINGS_CONFIGMAP
from guard.settings import (
    COMPOUND_OF,
    CRONJOB_ENV,
    LAYOUT_SETTINGS,
    SITE_SETTINGS,
    Settings,
    SettingsError,
    compound_key,
    fixed_settings,
    site_options,
)
from guard.settings_flags import env_options

KUSTOMIZE_VERSION = "v5.7.1"  # the kustomize of kubectl v1.34 (hack/deploytest/build.sh)
CRONJOB = "gpu-node-guard"
AGENT = "gpu-node-guard-agent"
# From `images:` (image-wiring), never from settings.env.
IMAGES = ("image", "loadtest_image")
_PARAM = re.compile(r"params\.\?data\[\?'(GUARD_[A-Z0-9_]+)'\]\.orValue\('((?:[^'\\]|\\.)*)'\)")


class ConfigError(Exception):
    """The overlay cannot be rendered or read (one line)."""


@dataclass(frozen=True, slots=True)
class Rendered:
    """The documents of one rendered overlay, by (kind, namespace, name)."""

    docs: dict[tuple[str, str, str], dict[str, Any]]

    @classmethod
    def of(cls, documents: Iterable[dict[str, Any]]) -> Rendered:
        out = {}
        for d in documents:
            meta = d.get("metadata") or {}
            out[(str(d.get("kind")), str(meta.get("namespace", "")), str(meta.get("name")))] = d
        return cls(out)

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for (k, _, _), d in self.docs.items() if k == kind]

    def one(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [d for (k, _, n), d in self.docs.items() if (k, n) == (kind, name)]
        return found[0] if len(found) == 1 else None


def find_kustomize(given: str = "") -> list[str]:
    """The kustomize to render with: `given`, $KUSTOMIZE, `kustomize` on PATH, the one
    hack/deploytest/build.sh builds, or `kubectl kustomize`."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    built = cache / "gpu-node-guard" / "kustomize" / KUSTOMIZE_VERSION / "kustomize"
    for candidate in (given, os.environ.get("KUSTOMIZE", ""), shutil.which("kustomize") or ""):
        if candidate:
            return [candidate, "build"]
    if built.is_file():
        return [str(built), "build"]
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize"]
    raise ConfigError("no kustomize: give --kustomize, or run `make deploytest`")


def render(directory: Path, kustomize: list[str]) -> Rendered:
    try:
        done = subprocess.run(
            [*kustomize, str(directory)], capture_output=True, text=True, timeout=120, check=False
        )
    except OSError as exc:
        raise ConfigError(f"cannot run {kustomize[0]}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"{directory} does not render: {last}")
    try:
        return Rendered.of(d for d in yaml.safe_load_all(done.stdout) if isinstance(d, dict))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{directory}: kustomize wrote no YAML ({exc})") from None


# ── The checks (pure: rendered documents in, problem lines out) ─────────────────────────────


def _guard_containers(cron: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if cron is None:
        return []
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return [c for c in spec["containers"] if c.get("name") == "guard"]


def effective_env(cron: Mapping[str, Any], data: Mapping[str, str]) -> dict[str, str]:
    """The CronJob container's GUARD_* environment as the kubelet builds it: the ConfigMap
    (envFrom), then its env entries, which win (a fieldRef to the namespace: the CronJob's)."""
    env = dict(data)
    (container,) = _guard_containers(cron) or [{}]
    for entry in container.get("env") or []:
        ref = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif ref == "metadata.namespace":
            env[entry["name"]] = str(cron["metadata"].get("namespace", ""))
    return env


def _settings(env: Mapping[str, str], where: str) -> Settings:
    try:
        return Settings(**env_options(env, frozenset(), where))
    except click.UsageError as exc:
        raise ConfigError(exc.format_message()) from None
    except SettingsError as exc:
        raise ConfigError(f"{where}: the guard refuses these settings: {exc}") from None


def check(r: Rendered) -> tuple[Settings | None, list[str]]:
    """The site's effective settings (None when unreadable) and every incoherence found."""
    problems: list[str] = []
    cms = [d for d in r.kind("ConfigMap") if d["metadata"]["name"] == SETTINGS_CONFIGMAP]
    cron = r.one("CronJob", CRONJOB)
    if len(cms) != 1 or cron is None:
        found = f"found {len(cms)} and {int(cron is not None)}"
        return None, [
            f"the overlay must render one ConfigMap {SETTINGS_CONFIGMAP} and the CronJob "
            f"{CRONJOB} ({found})"
        ]
    data = {str(k): str(v) for k, v in (cms[0].get("data") or {}).items()}
    problems += _keys(data)
    problems += _cronjob(cron, cms[0])
    env = effective_env(cron, data)
    try:
        s = _settings(env, f"the CronJob's settings (ConfigMap {SETTINGS_CONFIGMAP} and env)")
    except ConfigError as exc:
        return None, [*problems, str(exc)]
    problems += _policies(r, s, data, env)
    problems += _images(r, s)
    problems += _alerts(r, s, env)
    return s, problems


def _keys(data: Mapping[str, str]) -> list[str]:
    """Only the site's settings and the images (image-wiring writes them) belong in the
    ConfigMap: each other key is one line saying what it is (docs/deploy.md, "Settings by
    lifetime")."""
    site = {params.env_name(n) for n in (*site_options(SITE_SETTINGS), *IMAGES)}
    what = {n: "a fixed value of the guard" for n in fixed_settings()}
    what |= {n: "the CronJob's own (its manifest)" for n in CRONJOB_ENV}
    what |= {n: "a layout name, written into the manifests and policies" for n in LAYOUT_SETTINGS}
    what |= {
        n: f"now the key {compound_key(n)}= of {params.env_name(c)}" for n, c in COMPOUND_OF.items()
    }
    what = {params.env_name(n): why for n, why in what.items()}
    out = []
    for key in sorted(set(data) - site):
        if key in what:
            out.append(f"{key}: {what[key]}, not a site setting (docs/deploy.md)")
        else:
            out.append(f"{key}: not a setting of the guard (it ignores it)")
    return out


def _cronjob(cron: Mapping[str, Any], cm: Mapping[str, Any]) -> list[str]:
    (container,) = _guard_containers(cron) or [{}]
    refs = [e.get("configMapRef", {}).get("name") for e in container.get("envFrom") or []]
    out = []
    if refs != [SETTINGS_CONFIGMAP]:
        out.append(
            f"the CronJob must read ConfigMap {SETTINGS_CONFIGMAP} whole (envFrom), reads {refs}"
        )
    if cm["metadata"].get("namespace") != cron["metadata"].get("namespace"):
        out.append(f"ConfigMap {SETTINGS_CONFIGMAP} must be in the CronJob's namespace")
    data = cm.get("data") or {}
    for entry in container.get("env") or []:
        name = entry.get("name", "")
        if "value" in entry and name in data and str(entry["value"]) != str(data[name]):
            out.append(
                f"{name}: the CronJob's env says {entry['value']!r}, its ConfigMap (what "
                f"the policies read) {data[name]!r}"
            )
    return out


def _policies(
    r: Rendered, s: Settings, data: Mapping[str, str], env: Mapping[str, str]
) -> list[str]:
    out = []
    layout = _layout(s)
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    expected = {
        (d["kind"], d["metadata"]["name"]): d
        for docs in policies.documents(layout).values()
        for d in docs
    }
    found = {(kind, d["metadata"]["name"]): d for kind in kinds for d in r.kind(kind)}
    for kind, name in sorted(set(expected) - set(found)):
        out.append(f"{kind} {name} is missing from the rendered overlay")
    for kind, name in sorted(set(found) - set(expected)):
        out.append(f"{kind} {name} is not one the guard generates")
    for kind, name in sorted(set(expected) & set(found)):
        if found[(kind, name)]["spec"] != expected[(kind, name)]["spec"]:
            out.append(
                f"{kind} {name} is not the generated one for this layout (edited, "
                "patched or stale): `python -m guard.generate.policies write`"
            )
    # What the policies read from the params: each key, or the default they carry.
    read: dict[str, set[str]] = {}
    for doc in r.kind("ValidatingAdmissionPolicy"):
        for key, default in (m for text in _strings(doc["spec"]) for m in _PARAM.findall(text)):
            read.setdefault(key, set()).add(default.replace("\\'", "'").replace("\\\\", "\\"))
    for key in sorted(read):
        name = key.removeprefix("GUARD_").lower()
        for default in sorted(read[key]):
            seen = data.get(key, default)
            policy = env_options({key: seen}, frozenset(), f"the policies' params ({key})")
            runs = env_options({key: env[key]}, frozenset(), "the CronJob") if key in env else {}
            if policy.get(name, getattr(Settings(), name)) != runs.get(name, getattr(s, name)):
                out.append(
                    f"{key}: the policies admit {seen!r}, the CronJob runs with "
                    f"{env.get(key, params.default_text(Settings(), name))!r}"
                )
    return out


def _strings(doc: Any) -> Iterable[str]:
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, Mapping | list):
        for value in doc.values() if isinstance(doc, Mapping) else doc:
            yield from _strings(value)


def _images(r: Rendered, s: Settings) -> list[str]:
    cron = r.one("CronJob", CRONJOB)
    agent = r.one("DaemonSet", AGENT)
    pairs = [("the CronJob's container", c) for c in _guard_containers(cron)]
    if agent is not None:
        pairs += [
            ("the agent's container", c) for c in agent["spec"]["template"]["spec"]["containers"]
        ]
    return [
        f"{what} runs {c.get('image')!r}, the policies admit GUARD_IMAGE {s.image!r}"
        for what, c in pairs
        if c.get("image") != s.image
    ]


def _rule_exprs(groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str(rule.get("alert") or rule.get("record")): str(rule.get("expr"))
        for g in groups
        for rule in g.get("rules") or []
    }


def _alerts(r: Rendered, s: Settings, env: Mapping[str, str]) -> list[str]:
    rules = [d for d in r.kind("PrometheusRule") if d["metadata"]["name"] == "gpu-node-guard"]
    if not rules:
        return []  # an overlay without the alerts component
    found = _rule_exprs(rules[0]["spec"]["groups"])
    wanted = _rule_exprs(alerts.rule_groups(s, alert_queries.AlertParams()))
    out = _substituted(found, s, env)
    found, wanted = _blanked(found), _blanked(wanted)
    for name in sorted(wanted):
        if found.get(name) != wanted[name]:
            out.append(
                f"alerts: {name} does not follow the site (its expression): the rules carry the "
                "defaults there; build them with guard.generate.alerts.render (docs/alerts.md)"
            )
    return out + _runbook_links(rules[0]["spec"]["groups"], s)


def _substituted(found: Mapping[str, str], s: Settings, env: Mapping[str, str]) -> list[str]:
    """Each string the alerts component copies a setting into holds the site's text."""
    out = []
    for sub in alerts.substitutions():
        key = params.env_name(sub.setting)
        pieces = found.get(sub.rule, "").split('"')
        text = pieces[sub.index] if sub.index < len(pieces) else None
        text = found.get(sub.rule) if sub.index < 0 else text
        site = env.get(key, params.default_text(Settings(), sub.setting))
        if text != site:
            out.append(
                f"alerts: {sub.rule} carries {key} {text!r}, the site's is {site!r} (list "
                "../../components/alerts, which copies it from the settings)"
            )
    if len(s.user_code_xids) > alert_queries.USER_CODE_FALLBACK_MAX:
        most = alert_queries.USER_CODE_FALLBACK_MAX
        out.append(
            f"GUARD_USER_CODE_XIDS: {len(s.user_code_xids)} Xids; before the guard's "
            f"first push the alerts read the first {most}"
        )
    return list(dict.fromkeys(out))


def _blanked(exprs: Mapping[str, str]) -> dict[str, str]:
    """The expressions with the strings the alerts component substitutes emptied."""
    out = dict(exprs)
    for sub in alerts.substitutions():
        if sub.rule in out and sub.index < 0:
            out[sub.rule] = ""
        elif sub.rule in out:
            pieces = out[sub.rule].split('"')
            if sub.index < len(pieces):
                pieces[sub.index] = ""
            out[sub.rule] = '"'.join(pieces)
    return out


def _runbook_links(groups: Iterable[Mapping[str, Any]], s: Settings) -> list[str]:
    """Every alert links the site's runbook (GUARD_RUNBOOK_BASE_URL), not the default's."""
    off = sorted(
        str(rule["alert"])
        for g in groups
        for rule in g.get("rules") or []
        if "alert" in rule
        and not str((rule.get("annotations") or {}).get("runbook_url", "")).startswith(
            s.runbook_base_url + "#"
        )
    )
    if not off:
        return []
    return [
        f"alerts: {len(off)} rule(s) ({', '.join(off[:3])}…) do not link the site's "
        f"GUARD_RUNBOOK_BASE_URL {s.runbook_base_url!r} (list the alerts component)"
    ]


def _layout(s: Settings) -> Settings:
    """The site's layout, every other setting at its default."""
    return Settings(**{n: getattr(s, n) for n in LAYOUT_SETTINGS})


# ── Command ─────────────────────────────────────────────────────────────────────────────────


@click.group()
def config() -> None:
    """Check a site's configuration (its kustomize overlay)."""


@config.command("check")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--kustomize",
    "binary",
    default="",
    help="kustomize binary (default: $KUSTOMIZE, PATH, `make deploytest`'s, kubectl)",
)
def check_command(directory: Path, binary: str) -> None:
    """Render DIRECTORY (a kustomization) and prove its CronJob, admission policies and alert
    rules see the same settings. Exit 0 coherent, 1 with one line per problem, 2 unrendered."""
    try:
        rendered = render(directory, find_kustomize(binary))
    except ConfigError as exc:
        click.echo(f"config check {directory}: {exc}", err=True)
        sys.exit(2)
    s, problems = check(rendered)
    for line in problems:
        click.echo(f"config check {directory}: {line}", err=True)
    if problems or s is None:
        sys.exit(1)
    site = rendered.one("ConfigMap", SETTINGS_CONFIGMAP) or {}
    policies_read = sum(
        "paramRef" in d["spec"] for d in rendered.kind("ValidatingAdmissionPolicyBinding")
    )
    click.echo(
        f"config check {directory}: coherent: {len(site.get('data') or {})} settings in "
        f"{SETTINGS_CONFIGMAP}; the CronJob, {policies_read} policy bindings (params) "
        f"and {len(rendered.kind('PrometheusRule'))} PrometheusRule agree "
        f"(breaker {s.breaker_max_nodes}, image {s.image})"
    )


if __name__ == "__main__":
    config()
