"""The site's values in the guard Jobs: where the settings fix an argv word or a Job field, the
policy admits exactly that value from the params on CREATE (docs/security.md, "The site's values");
the word's own pattern (argv.py) still applies."""

from __future__ import annotations

from dataclasses import dataclass

from guard.generate.policies import argv, params
from guard.generate.policies.cel import Validation, quote, regex
from guard.generate.policies.kinds import tolerations
from guard.settings import Settings

CMD = "variables.cmd"
CREATE = "request.operation == 'CREATE'"


@dataclass(frozen=True, slots=True)
class Word:
    """The value after `flag` is the site's: `same` (CEL, `{w}` the word) holds."""

    flag: str
    pattern: str
    same: str
    settings: tuple[str, ...]

    def validation(self) -> Validation:
        w = f"{CMD}[i]"
        same = self.same.replace("{w}", w)
        return Validation(
            f"variables.argvAt.all(i, i == 0 || i >= size({CMD}) || {CMD}[i - 1] != "
            f"{quote(self.flag)} || !{w}.matches({regex(self.pattern)}) || ({same}))",
            f"{self.flag} must be the site's {' or '.join(self.settings)} "
            f"({', '.join(map(params.env_name, self.settings))} in the settings ConfigMap)",
        ).guarded(CREATE)


def _optional(flag: str, variable: str, setting: str) -> Validation:
    """An optional flag: present exactly when the setting is set, with its value."""
    value = (
        f"variables.argvAt.all(i, i == 0 || i >= size({CMD}) || {CMD}[i - 1] != "
        f"{quote(flag)} || {CMD}[i] == variables.{variable})"
    )
    return Validation(
        f"(({quote(flag)} in {CMD}) == (variables.{variable} != '')) && {value}",
        f"{flag} must be given exactly when the site sets {setting} "
        f"({params.env_name(setting)} in the settings ConfigMap), with its value",
    ).guarded(CREATE)


def variables(kind: str, s: Settings) -> list[tuple[str, str]]:
    """The site's values a kind's policies read (typed as the guard parses them)."""
    p = params
    common = [
        ("cmd", "variables.container.?command.orValue([])"),
        *tolerations(s),
        (
            "deadline",
            p.integer(s, "loadtest_deadline_s" if kind == "loadtest" else "evidence_deadline_s"),
        ),
        ("ttls", "[" + ", ".join(p.integer(s, t) for t in _ttls(kind)) + "]"),
    ]
    if kind == "loadtest":
        return [
            *common,
            (
                "durations",
                f"[{p.integer(s, 'loadtest_duration_s')}, {p.integer(s, 'onboarding_burnin_s')}]",
            ),
            ("size", p.integer(s, "loadtest_matrix_size")),
            ("minRatio", p.ratio(s, "loadtest_min_ratio")),
            ("allreduce", p.flag(s, "loadtest_allreduce")),
            ("allreduceMinRatio", p.ratio(s, "loadtest_allreduce_min_ratio")),
            ("allreduceTimeout", p.integer(s, "loadtest_allreduce_timeout_s")),
            ("memoryXids", p.xids(s, "memory_class_xids")),
        ]
    if kind == "fence":
        return [*common, ("drain", p.flag(s, "fence_drain"))]
    if kind == "conformance":
        return [
            *common,
            ("cpVersion", p.text(s, "conformance_control_plane_version")),
            ("allowedDns", p.words(s, "conformance_allowed_dns")),
        ]
    return common


def _ttls(kind: str) -> tuple[str, ...]:
    return ("job_ttl_s", "boot_check_job_ttl_s") if kind == "conformance" else ("job_ttl_s",)


_LOADTEST_WORDS = (
    Word(
        "--duration-s",
        argv.SECONDS,
        "int({w}) in variables.durations",
        ("loadtest_duration_s", "onboarding_burnin_s"),
    ),
    Word("--size", argv.SIZE, "int({w}) == variables.size", ("loadtest_matrix_size",)),
    Word("--min-ratio", argv.RATIO, "double({w}) == variables.minRatio", ("loadtest_min_ratio",)),
    Word(
        "--allreduce-min-ratio",
        argv.RATIO,
        "double({w}) == variables.allreduceMinRatio",
        ("loadtest_allreduce_min_ratio",),
    ),
    Word(
        "--allreduce-timeout-s",
        argv.SECONDS,
        "int({w}) == variables.allreduceTimeout",
        ("loadtest_allreduce_timeout_s",),
    ),
    Word(
        "--memory-class-xids",
        argv.XID_LIST,
        "{w}.split(',').map(x, int(x)) == variables.memoryXids",
        ("memory_class_xids",),
    ),
)


def argv_checks(kind: str) -> list[Validation]:
    """The argv words of `kind` that the site's settings fix (Job and Pod alike)."""
    if kind == "loadtest":
        words = [w.validation() for w in _LOADTEST_WORDS]
        allreduce = Validation(
            f"!({CMD}.exists(w, w == (variables.allreduce ? '--no-allreduce' : '--allreduce')))",
            "--allreduce or --no-allreduce must be the site's loadtest_allreduce "
            "(GUARD_LOADTEST_ALLREDUCE in the settings ConfigMap)",
        ).guarded(CREATE)
        return [*words[:3], allreduce, *words[3:]]
    if kind == "fence":
        return [
            Validation(
                f"variables.drain || !('--drain' in {CMD})",
                "--drain only where the site sets fence_drain "
                f"({params.env_name('fence_drain')} in the settings ConfigMap)",
            ).guarded(CREATE)
        ]
    if kind == "conformance":
        return [
            _optional("--control-plane-version", "cpVersion", "conformance_control_plane_version"),
            _optional("--allowed-dns", "allowedDns", "conformance_allowed_dns"),
        ]
    return []


def job_checks(kind: str) -> list[Validation]:
    """The Job's own fields the settings fix."""
    ttls = " or ".join(_ttls(kind))
    deadline = "loadtest_deadline_s" if kind == "loadtest" else "evidence_deadline_s"
    return [
        Validation(
            "object.spec.?activeDeadlineSeconds.orValue(0) == variables.deadline",
            f"spec.activeDeadlineSeconds must be the site's {deadline} "
            f"({params.env_name(deadline)} in the settings ConfigMap)",
        ).guarded(CREATE),
        Validation(
            "object.spec.?ttlSecondsAfterFinished.orValue(0) in variables.ttls",
            f"spec.ttlSecondsAfterFinished must be the site's {ttls} (in the settings ConfigMap)",
        ).guarded(CREATE),
    ]
