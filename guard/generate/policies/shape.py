"""Exact object shapes (allowlists: `Obj` names every field an object may carry and what each must
be) and the CEL validations that hold an object to one. tests/apiserver/test_policy_schema.py gives
the reason for each other field of the type, proving every field was decided on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guard.generate.policies.cel import Validation, lit, quote, regex, shown
from guard.generate.policies.cel import field as at


@dataclass(frozen=True, slots=True)
class Expr:
    """Any CEL condition on the value (written with `{v}`), e.g. a relation to another field."""

    cel: str
    what: str


def exact(value: Any) -> Expr:
    """The field equals this JSON value exactly (lists in order, maps with exactly these keys)."""
    return Expr(f"{{v}} == {lit(value)}", f"exactly {shown(value)}")


def matching(pattern: str, what: str) -> Expr:
    """A string matching an anchored RE2 pattern."""
    return Expr(f"type({{v}}) == string && {{v}}.matches({regex(pattern)})", what)


def int_in(lo: int, hi: int) -> Expr:
    return Expr(
        f"type({{v}}) == int && {{v}} >= {lo} && {{v}} <= {hi}", f"an integer in [{lo}, {hi}]"
    )


# Fields the API server fills itself (uid, resourceVersion, timestamps…): any value.
SYSTEM = Expr("true", "set by the API server")


@dataclass(frozen=True, slots=True)
class Field:
    shape: Shape
    required: bool = True
    create_only: bool = False


def opt(shape: Shape) -> Field:
    return Field(shape, required=False)


@dataclass(frozen=True, slots=True)
class Obj:
    """Exactly `fields` (a bare shape is a required one)."""

    fields: Mapping[str, Field | Shape]

    def __post_init__(self) -> None:
        wrapped = {k: f if isinstance(f, Field) else Field(f) for k, f in self.fields.items()}
        object.__setattr__(self, "fields", wrapped)


@dataclass(frozen=True, slots=True)
class One:
    """A list of exactly one item of the given shape (the one container)."""

    item: Obj


Shape = Expr | Obj | One
CREATE = "request.operation == 'CREATE'"


def validations(shape: Obj, base: str, path: str) -> list[Validation]:
    """Every validation holding the object at CEL expression `base` (a map) to `shape`; `path`
    is how a refusal names the object (``spec.template.spec``)."""
    names = lit(list(shape.fields))
    out = [
        Validation(
            f"{base}.all(k, k in {names})",
            f"{path or 'the object'} may not hold field(s) ",
            f"{base}.filter(k, !(k in {names})).join(', ')",
        )
    ]
    for name, f in shape.fields.items():
        assert isinstance(f, Field)  # Obj wraps a bare shape
        when = CREATE if f.create_only else None
        out += [v.guarded(when) for v in _field(base, name, f, join(path, name))]
    return out


def join(path: str, name: str) -> str:
    """How a refusal names a field: ``spec.template.spec.hostPID``, ``labels[app.k8s.io/x]``."""
    if not name.replace("_", "").isalnum():
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else name


def _field(base: str, name: str, f: Field, path: str) -> list[Validation]:
    present, value = f"{quote(name)} in {base}", at(base, name)
    if f.shape == SYSTEM:
        return []  # any value; still on the object's allowlist
    match f.shape:
        case Obj():
            out = [Validation(present, f"{path} is required")] if f.required else []
            return out + [v.guarded(present) for v in validations(f.shape, value, path)]
        case One(item):
            one = f"{present} && size({value}) == 1"
            first = [
                Validation(
                    one if f.required else f"!({present}) || size({value}) == 1",
                    f"{path} must hold exactly one item",
                )
            ]
            return first + [v.guarded(one) for v in validations(item, f"{value}[0]", f"{path}[0]")]
        case _:
            check = f.shape.cel.replace("{v}", value)
            said = f"{path} must be {f.shape.what}"
            if f.required:
                return [Validation(f"{present} && ({check})", said)]
            return [Validation(f"!({present}) || ({check})", said)]


UPDATE = "request.operation == 'UPDATE'"
# What the API server itself changes in the metadata of an admitted object.
SYSTEM_META_CHANGES = (
    "resourceVersion",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
GARBAGE_COLLECTORS = (
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
)


def changed_keys(part: str, skip: tuple[str, ...]) -> str:
    """CEL: the keys of `object.<part>` (a map), but `skip`, that differ from `oldObject`'s."""
    new, old, skipped = f"object.{part}", f"oldObject.{part}", lit(list(skip))
    return (
        f"({new}.filter(k, !(k in {skipped}) && (!(k in {old}) || {old}[k] != {new}[k])) + "
        f"{old}.filter(k, !(k in {skipped}) && !(k in {new})))"
    )


def fixed_once_admitted(what: str, meta_free: tuple[str, ...]) -> list[Validation]:
    """On UPDATE an admitted object keeps its spec and metadata, but the API server's own fields
    and `meta_free` (its controllers' changes): else an UPDATE could pick another allowed value."""
    skip = (*SYSTEM_META_CHANGES, *meta_free)
    meta, spec = changed_keys("metadata", skip), changed_keys("spec", ())
    return [
        Validation(
            f"!({UPDATE}) || size({spec}) == 0",
            f"an admitted {what}'s spec never changes; changed: spec.",
            f"{spec}.join(', spec.')",
        ),
        Validation(
            f"!({UPDATE}) || size({meta}) == 0",
            f"an admitted {what}'s metadata never changes"
            + (f" (but {', '.join(meta_free)})" if meta_free else "")
            + "; changed: metadata.",
            f"{meta}.join(', metadata.')",
        ),
    ]


def owners_fixed_once_admitted(what: str) -> Validation:
    """ownerReferences stay as created; only the garbage collector may remove them (orphaning
    on a `propagationPolicy: Orphan` delete). Without them a Pod could be re-adopted by
    another Job whose labels it was given."""
    old = "oldObject.metadata.?ownerReferences.orValue([])"
    new = "object.metadata.?ownerReferences.orValue([])"
    return Validation(
        f"!({UPDATE}) || {new} == {old} || "
        f"(size({new}) == 0 && request.userInfo.username in {lit(list(GARBAGE_COLLECTORS))})",
        f"an admitted {what}'s ownerReferences never change (only the garbage collector "
        "removes them)",
    )


# ServiceAccount admission copies the Jobs' ServiceAccount's imagePullSecrets into every Pod;
# names only, a few of them (the image itself is pinned, a pull secret cannot change it).
MAX_PULL_SECRETS = 8
PULL_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
IMAGE_PULL_SECRETS = Expr(
    f"size({{v}}) <= {MAX_PULL_SECRETS} && {{v}}.all(s, s.all(k, k == 'name') && "
    f"s.?name.orValue('').matches({regex(PULL_SECRET_NAME)}))",
    f"at most {MAX_PULL_SECRETS} entries, each only a Secret name",
)
