"""Who can do what on the guard's surfaces: one row per (identity, surface, request) with the
answer the real API server gives. tests/apiserver/test_red_team.py (v1.34.4) and
tests/dra/test_red_team_dra.py (v1.37.2) send each row of their tier; docs/security.md ("Who can
do what") quotes the table as `render()` writes it (`python -m tests.redteam_table write`;
tests/unit/test_redteam_table.py fails when they differ).

A row whose answer another test proves (a Lease written in the future is taken over by the next
run; Node updates still pass without the settings) names that test in `proved_by`: the row's own
request is still sent here, the consequence is that test's.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Tier = Literal["apiserver", "dra"]
RBAC = "RBAC"  # `by` of a request refused by authorization (403), before any admission policy

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"
BEGIN = (
    "<!-- red-team table: generated from tests/redteam_table.py"
    " (python -m tests.redteam_table write) -->"
)
END = "<!-- end of the red-team table -->"

WHO_SAYS: dict[str, str] = {
    "guard-token": "the guard's token (minted by the guard namespace's admin)",
    "guard-ns-admin": "the admin of `gpu-node-guard`",
    "jobs-ns-admin": "the admin of `gpu-node-guard-jobs`",
    "create-only": "a user who may only create Jobs and Pods in `gpu-node-guard-jobs`",
    "kubelet": "a kubelet (`system:node:<name>`, group `system:nodes`)",
    "cluster-admin": "a cluster admin (`system:masters`)",
}


@dataclass(frozen=True, slots=True)
class Row:
    """One request: `who` sends `action` on `surface`; `allowed`, or refused `by` a policy (its
    name, and `words` of its message) or by RBAC (403). `known_gap`: a hole docs/security.md
    does not claim closed, with its reason (none today)."""

    tier: Tier
    who: str  # a key of WHO_SAYS
    surface: str
    action: str
    allowed: bool
    by: str = ""
    words: str = ""
    why: str = ""
    proved_by: str = ""
    known_gap: str = ""

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", f"{self.surface} {self.action}".lower()).strip("-")
        return f"{self.who}-{slug}"


SETTINGS = "settings ConfigMap"
LEASE = "cycle Lease"
FENCE = "fence Job"
CLAIM = "ResourceClaim"
RULE = "DeviceTaintRule"
RECORDS = "the guard's node records"
ARCHIVE = "ledger archive"

SCOPE = "gpu-node-guard-guard-scope"
NODE_SCOPE = "gpu-node-guard-node-scope"
FENCE_JOB = "gpu-node-guard-fence-job"
CLAIMS = "gpu-node-guard-device-claims"
CLAIMS_OTHERS = "gpu-node-guard-device-claims-others"
TAINTS = "gpu-node-guard-device-taints"
LEDGER = "gpu-node-guard-ledger"

ONLY_GUARD_FENCES = "only the guard's ServiceAccount creates fence Jobs"
NO_RBAC = "no RBAC grant"
HIJACK = "tests/apiserver/test_lease_hijack.py::test_a_run_takes_over_a_hijacked_lease_and_cordons"
ANOTHER_GPU = (
    "tests/unit/test_plan_device_taint.py::test_a_pass_on_another_claim_or_gpu_keeps_the_taint"
)
WITHOUT = (
    "tests/apiserver/test_settings_missing.py::"
    "test_without_the_settings_everyone_else_still_updates_nodes"
)


def _settings_rows() -> list[Row]:
    t: Tier = "apiserver"
    rows = [
        Row(
            t,
            "guard-token",
            SETTINGS,
            "update (another GUARD_IMAGE)",
            False,
            SCOPE,
            "writes only its ledger ConfigMap",
            "its ledger and archives only",
        ),
        Row(t, "guard-token", SETTINGS, "delete", False, RBAC, why="no delete at all"),
        Row(
            t,
            "guard-token",
            SETTINGS,
            "create it anew (once gone)",
            False,
            SCOPE,
            "writes only its ledger ConfigMap",
            "a token cannot choose the image its own Jobs run",
        ),
        Row(
            t,
            "guard-ns-admin",
            SETTINGS,
            "update (another GUARD_IMAGE)",
            True,
            why="root-equivalent: the policies admit her image",
        ),
        Row(
            t,
            "guard-ns-admin",
            SETTINGS,
            "delete",
            True,
            why="then no policy refuses what is not the guard's",
            proved_by=WITHOUT,
        ),
    ]
    for who in ("jobs-ns-admin", "create-only", "kubelet"):
        for action in ("update (another GUARD_IMAGE)", "delete", "create it anew (once gone)"):
            rows.append(Row(t, who, SETTINGS, action, False, RBAC, why=NO_RBAC))
    return rows


def _lease_rows() -> list[Row]:
    t: Tier = "apiserver"
    rows = [
        Row(
            t,
            "guard-token",
            LEASE,
            "update: holder `attacker` (not `<pod>-<pid>`)",
            False,
            SCOPE,
            "holderIdentity is a run's",
            "no run writes that holder",
        ),
        Row(
            t,
            "guard-token",
            LEASE,
            "update: leaseDurationSeconds 2147483647",
            False,
            SCOPE,
            "leaseDurationSeconds is 1..270",
            "a run writes at most 270 s",
        ),
        Row(
            t,
            "guard-token",
            LEASE,
            "update: renewTime in 2100",
            True,
            why="no policy sees time: the next run takes it over",
            proved_by=HIJACK,
        ),
        Row(
            t,
            "guard-token",
            LEASE,
            "create another Lease",
            False,
            SCOPE,
            "only Lease is gpu-node-guard-cycle",
            "its one Lease",
        ),
        Row(t, "guard-token", LEASE, "delete", False, RBAC, why="get and update only"),
        Row(
            t,
            "guard-ns-admin",
            LEASE,
            "update: holder `attacker` (not `<pod>-<pid>`)",
            True,
            why="guard scope binds the guard only: the next run takes it over",
            proved_by=HIJACK,
        ),
        Row(
            t,
            "guard-ns-admin",
            LEASE,
            "update: leaseDurationSeconds 2147483647",
            True,
            why="the next run takes it over",
            proved_by=HIJACK,
        ),
    ]
    for who in ("jobs-ns-admin", "create-only", "kubelet"):
        rows.append(
            Row(
                t,
                who,
                LEASE,
                "update: holder `attacker` (not `<pod>-<pid>`)",
                False,
                RBAC,
                why=NO_RBAC,
            )
        )
    return rows


def _fence_rows() -> list[Row]:
    t: Tier = "apiserver"
    rows = [
        Row(
            t,
            "guard-token",
            FENCE,
            "create `fence set`, in shape",
            True,
            why="one GPU of a GPU node: the cordon's order of harm",
        ),
        Row(
            t,
            "guard-token",
            FENCE,
            "create `fence lift`, in shape",
            True,
            why="one GPU of a GPU node",
        ),
        Row(
            t,
            "guard-token",
            FENCE,
            "create `fence set --drain` (the settings say no drain)",
            False,
            FENCE_JOB,
            "--drain only where the site sets fence_drain",
            "the site's choice, not the token's",
        ),
    ]
    for who in ("jobs-ns-admin", "create-only", "cluster-admin"):
        for action in ("set", "lift"):
            rows.append(
                Row(
                    t,
                    who,
                    FENCE,
                    f"create `fence {action}`, in shape",
                    False,
                    FENCE_JOB,
                    ONLY_GUARD_FENCES,
                    "no fence without the guard's record",
                )
            )
    rows += [
        Row(
            t,
            "jobs-ns-admin",
            FENCE,
            "create `fence set` labelled as an evidence Job",
            False,
            "gpu-node-guard-evidence-job",
            "command must be gpu-node-guard evidence collect",
            "the evidence Job's argv has no `fence`",
        ),
        Row(
            t,
            "jobs-ns-admin",
            FENCE,
            "create `fence set` with no component label",
            False,
            "gpu-node-guard-jobs-namespace",
            "component label must name a guard kind",
            "no Job there but a guard kind's",
        ),
        Row(
            t,
            "guard-ns-admin",
            FENCE,
            "create `fence set`, in shape",
            False,
            RBAC,
            why="no rights in the jobs namespace (she can mint the guard's token)",
        ),
        Row(t, "kubelet", FENCE, "create `fence set`, in shape", False, RBAC, why=NO_RBAC),
    ]
    return rows


def _record_rows() -> list[Row]:
    t: Tier = "apiserver"
    odd = "a reader that meets it anyway (a person's write) leaves the node as it is, with a WARN"
    return [
        Row(
            t,
            "guard-token",
            RECORDS,
            "write `loadtest-result: passed, trust me`",
            False,
            NODE_SCOPE,
            "only as failed job/<name> at <time>",
            "only the form the guard writes",
        ),
        Row(
            t,
            "guard-token",
            RECORDS,
            "write `onboarding-failed: <time> job/<name> none; all fine`",
            False,
            NODE_SCOPE,
            "only as <time> job/<name> <item>",
            "only the form the guard writes",
        ),
        Row(
            t,
            "guard-token",
            RECORDS,
            "write `loadtest-result: failed job/<name> at <time>`",
            True,
            why="the guard's own form: the node waits for a reboot (a denial of service)",
        ),
        Row(
            t,
            "cluster-admin",
            RECORDS,
            "write `loadtest-result: passed, trust me`",
            True,
            why=f"no policy refuses what is not the guard's; {odd}",
            proved_by=(
                "tests/unit/test_check_records.py::"
                "test_a_result_record_not_in_the_guards_form_is_unreadable"
            ),
        ),
    ]


def _archive_rows() -> list[Row]:
    t: Tier = "apiserver"
    esc = "create one whose line carries an ESC byte"
    words = "an archive holds no control or format characters"
    why = "no escape bytes into a terminal or a log"
    return [
        Row(t, "guard-token", ARCHIVE, esc, False, LEDGER, words, why),
        Row(t, "guard-ns-admin", ARCHIVE, esc, False, LEDGER, words, why),
        Row(
            t,
            "guard-token",
            ARCHIVE,
            "create one as the guard writes it (the ESC as `\\x1b`)",
            True,
            why="the guard's archive writer stores control characters as escapes",
            proved_by=("tests/unit/test_check_records.py::test_an_archive_stores_no_escape_bytes"),
        ),
    ]


def _claim_rows() -> list[Row]:
    t: Tier = "dra"
    theirs = "the guard's load-test claim is the guard's alone"
    rows = [
        Row(
            t,
            "guard-token",
            CLAIM,
            "create its claim: one GPU by UUID",
            True,
            why="one device, tolerating only its taint",
        ),
        Row(
            t,
            "guard-token",
            CLAIM,
            "create a claim for any GPU",
            False,
            CLAIMS,
            "selects exactly one GPU",
            "the GPU the taint is on, no other",
        ),
        Row(t, "guard-token", CLAIM, "delete its claim", True, why="after the device passed"),
        Row(t, "guard-token", CLAIM, "relabel its claim", False, RBAC, why="no update or patch"),
    ]
    for who in ("jobs-ns-admin", "cluster-admin"):
        rows += [
            Row(
                t,
                who,
                CLAIM,
                "create a claim in the jobs namespace",
                False,
                CLAIMS_OTHERS,
                "only gpu-node-guard's ServiceAccount creates ResourceClaims",
                theirs,
            ),
            Row(
                t,
                who,
                CLAIM,
                "delete the guard's claim",
                False,
                CLAIMS_OTHERS,
                "only gpu-node-guard's ServiceAccount deletes",
                theirs,
            ),
            Row(
                t,
                who,
                CLAIM,
                "relabel the guard's claim",
                False,
                CLAIMS_OTHERS,
                "labels and annotations of a ResourceClaim",
                theirs,
            ),
        ]
    status = "write the status of the guard's claim (another device)"
    rows += [
        Row(t, "guard-token", CLAIM, status, False, RBAC, why="no status grant"),
        Row(t, "jobs-ns-admin", CLAIM, status, False, RBAC, why="the `admin` role has none"),
        Row(t, "kubelet", CLAIM, status, False, RBAC, why="the Node authorizer: get only"),
        Row(
            t,
            "cluster-admin",
            CLAIM,
            status,
            True,
            why="root-equivalent; a pass still counts only from the tainted device",
            proved_by=ANOTHER_GPU,
        ),
        Row(
            t,
            "jobs-ns-admin",
            CLAIM,
            "add a finalizer to the guard's claim",
            True,
            why="a denial of service, as deleting the guard's Jobs is: the claim's delete waits",
        ),
    ]
    for who in ("guard-ns-admin", "create-only", "kubelet"):
        rows += [
            Row(t, who, CLAIM, "create a claim in the jobs namespace", False, RBAC, why=NO_RBAC),
            Row(t, who, CLAIM, "delete the guard's claim", False, RBAC, why=NO_RBAC),
        ]
    return rows


def _rule_rows() -> list[Row]:
    t: Tier = "dra"
    rows = [
        Row(
            t,
            "guard-token",
            RULE,
            "create its rule: one device, NoSchedule",
            True,
            why="one device of a faulted GPU",
        ),
        Row(
            t,
            "guard-token",
            RULE,
            "create a NoExecute rule",
            False,
            TAINTS,
            "never NoExecute",
            "the guard evicts nothing",
        ),
        Row(
            t,
            "guard-token",
            RULE,
            "delete a guard-labelled rule",
            True,
            why="after the device passed",
        ),
        Row(
            t,
            "guard-token",
            RULE,
            "delete a rule not the guard's",
            False,
            TAINTS,
            "deletes only its own DeviceTaintRules",
            "a person's rule stays",
        ),
        Row(
            t,
            "guard-token",
            RULE,
            "change a guard-labelled rule",
            False,
            RBAC,
            why="no update or patch",
        ),
        Row(
            t,
            "cluster-admin",
            RULE,
            "create a guard-labelled rule",
            True,
            why="root-equivalent: nothing here defends against her",
        ),
        Row(t, "cluster-admin", RULE, "delete a guard-labelled rule", True, why="root-equivalent"),
    ]
    for who in ("guard-ns-admin", "jobs-ns-admin", "create-only", "kubelet"):
        rows += [
            Row(t, who, RULE, "create a guard-labelled rule", False, RBAC, why=NO_RBAC),
            Row(t, who, RULE, "delete a guard-labelled rule", False, RBAC, why=NO_RBAC),
        ]
    return rows


ROWS: list[Row] = [
    *_settings_rows(),
    *_lease_rows(),
    *_fence_rows(),
    *_record_rows(),
    *_archive_rows(),
    *_claim_rows(),
    *_rule_rows(),
]


def rows_of(tier: Tier) -> list[Row]:
    return [r for r in ROWS if r.tier == tier]


def answer(row: Row) -> str:
    if row.allowed:
        return "allowed"
    if row.by == RBAC:
        return "refused: 403 (RBAC)"
    return f"refused: `{row.by}`"


def render() -> str:
    """The markdown table docs/security.md quotes, between its markers."""
    lines = [
        BEGIN,
        *(f"- **{who}**: {says}" for who, says in WHO_SAYS.items()),
        "",
        "| who | surface | request | answer | why | also proved by |",
        "|---|---|---|---|---|---|",
    ]
    for r in ROWS:
        why = r.why + (f" (known gap: {r.known_gap})" if r.known_gap else "")
        proved = f"`{r.proved_by.split('/')[-1]}`" if r.proved_by else ""
        lines.append(f"| {r.who} | {r.surface} | {r.action} | {answer(r)} | {why} | {proved} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def quoted(text: str) -> str | None:
    """The table as `text` quotes it (markers included), or None without its markers."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start : end + len(END)] + "\n"


def write(doc: Path = DOC) -> None:
    text = doc.read_text(encoding="utf-8")
    old = quoted(text)
    if old is None:
        raise SystemExit(f"{doc}: no red-team table markers")
    doc.write_text(text.replace(old, render()), encoding="utf-8")


def mismatch(row: Row, status: int, message: str) -> str:
    """'' when the answer (`status` 0: admitted) is the row's; what differs otherwise."""
    if row.allowed:
        return "" if status == 0 else f"expected allowed, got {status}: {message}"
    if row.by == RBAC:
        return "" if status == 403 else f"expected 403 (RBAC), got {status}: {message}"
    policy = f"ValidatingAdmissionPolicy '{row.by}'"
    if status == 422 and policy in message and row.words in message:
        return ""
    return f"expected 422 by {row.by} saying {row.words!r}, got {status}: {message}"


if __name__ == "__main__":
    if sys.argv[1:] == ["write"]:
        write()
    else:
        sys.stdout.write(render())
