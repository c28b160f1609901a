"""The exceptions of `lake` (re-exported by the package: `lake.LakeError`, ...).

They are plain Python classes whose `__module__` is `lake`, so that they pickle by reference
(`ProcessPoolExecutor`, `multiprocessing`, Ray): an exception raised in a worker process is
re-raised in the caller as the same class, with its message, `kind` and `transient`.

Every error of lake's libraries has one kind (a name from one closed list, the same as
`lake --json`'s `{"error": {"kind"}}`); its class is a table over that kind, `_CLASS_OF_KIND`
below, which docs/errors.md lists and a test keeps equal to it. The native module raises every
error through `error_of_kind`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "LakeError",
    "GuardError",
    "PolicyError",
    "LineageError",
    "StorageError",
    "InputError",
    "ObjectMissingError",
    "ObjectMismatchError",
]


class LakeError(Exception):
    """Any error of lake. `transient` is True when retrying the same call can help (throttling,
    timeouts, dropped connections, a lost race); False for refusals and bad input, which fail
    the same way until something changes. Nothing was deleted by a call that raised, and a write
    that raised committed nothing unless its message says otherwise.

    `kind` names the error for code that acts on it, stable across releases (the same names as
    `lake --json`'s `{"error": {"kind"}}`, listed in docs/errors.md): a GC rule's (`horizon`,
    `policy_floor`, `clock_skew`, `cutoff_too_late`, `bound_to_root`, ...), or what failed
    (`unavailable`, `storage`, `lineage_incomplete`, `journal_pending`, `guard`, `table_name`,
    `corrupt`, `invalid_input`, ...). `transient` follows from it: only `unavailable`,
    `conflict` and `journal_pending` are transient."""

    # Instance attributes only (set by `__init__`): an exception raised in a Ray task reaches
    # `ray.get`'s caller as `RayTaskError(StorageError)`, an instance of both classes that was not
    # made by `__init__` and forwards the attributes it lacks to the task's exception (its
    # `cause`); class-level defaults would shadow that and read `transient` False, `kind` None.
    transient: bool
    kind: "str | None"

    def __init__(self, message: str = "", transient: bool = False, kind: "str | None" = None) -> None:
        super().__init__(message)
        self.transient = bool(transient)
        self.kind = kind

    def __reduce__(self) -> Any:
        # (class, constructor arguments, state): the message and every attribute survive a
        # round trip through pickle.
        return (type(self), (str(self), self.transient, self.kind), dict(self.__dict__))


class GuardError(LakeError):
    """The publication guard refused a reference to an object too old to publish (GC may be
    collecting it): nothing was committed. Copy the object to a fresh key
    or upload it again."""


class PolicyError(LakeError):
    """A GC safety rule refused the call: a horizon below the policy floor, a clock skew past the
    bound, a plan of another lake or horizon, a document GC would write inside the lake."""


class LineageError(LakeError):
    """The journal cannot account for a table's versions (a version another Lance client wrote,
    a missing or edited journal entry, a table that went backwards): GC plans nothing and apply
    deletes nothing until it is repaired or a new plan is made. With `transient` True (kind
    `journal_pending`) it is a writer between its Lance commit and its journal entry: run the same
    call again once it has finished, and do not repair (a repair would race the writer)."""


class StorageError(LakeError):
    """The store failed (a local file, or S3): `transient` says whether retrying can help
    (`kind` `unavailable`: throttling, timeouts, dropped connections) or not (`storage`)."""


class InputError(LakeError, ValueError):
    """A value given to lake is unusable: a count out of range, an invalid table name, a
    location without its `uri`, a corrupt plan file, a reference column of another layout. It
    is also a `ValueError`. Wrong types raise `TypeError`, as Python's conventions want."""


class ObjectMissingError(LakeError):
    """An object a reference names does not exist (deleted, or never written): `kind` is
    `object_missing`, and the message names the key or URI."""


class ObjectMismatchError(LakeError):
    """An object's bytes differ from what its reference records, its size in bytes or its
    SHA-256 (rewritten, truncated or corrupted outside lake): `kind` is `object_mismatch`, and the
    message names the object, the expected size and digest, and what was found. A verified read
    raises it instead of returning the bytes."""


#: The class of each kind: every kind of lake's libraries, in the order of docs/errors.md.
_CLASS_OF_KIND: "dict[str, type[LakeError]]" = {
    "unavailable": StorageError,
    "conflict": LakeError,
    "journal_pending": LineageError,
    "invalid_input": InputError,
    "table_name": InputError,
    "piece_refused": InputError,
    "piece_committed": InputError,
    "guard": GuardError,
    "object_unreachable": InputError,
    "object_missing": ObjectMissingError,
    "object_mismatch": ObjectMismatchError,
    "not_a_lake": LakeError,
    "no_such_table": LakeError,
    "corrupt": LakeError,
    "lineage_incomplete": LineageError,
    "plan_incomplete": LineageError,
    "unreadable": LakeError,
    "commit_uncertain": LakeError,
    "committed_unchecked": LakeError,
    "table": LakeError,
    "checkpoint": LakeError,
    "inventory_report": LakeError,
    "horizon": PolicyError,
    "policy_floor": PolicyError,
    "clock_skew": PolicyError,
    "cutoff_too_late": PolicyError,
    "bound_to_root": PolicyError,
    "bound_to_min_age": PolicyError,
    "bound_to_manifest": PolicyError,
    "shard_mismatch": PolicyError,
    "store_capability": PolicyError,
    "root": PolicyError,
    "output": PolicyError,
    "storage": StorageError,
    "incomplete": LakeError,
    "internal": LakeError,
}


#: Python's spelling of each action a library message may advise. A message names an action
#: neutrally, in backquotes (`refs recover`); the exception gets a note with the way to do it from
#: Python. The names are `lake_common::Remedy::name`'s (a test keeps them equal).
_REMEDIES: "dict[str, str]" = {
    "init": "lake.init(root, min_age=...)",
    "refs recover": "lk.refs.recover() (or recover(wait=False))",
    "refs repair": "the command `lake refs repair ROOT --table TABLE --version VERSION` (no Python method yet), only once no writer of that table is running",
    "refs bind": "the command `lake refs bind ROOT --table TABLE` (no Python method yet)",
    "refs verify": "lk.refs.verify()",
    "cleanup": "lk.table(name).cleanup(older_than=...)",
    "branch create": "the command `lake branch create ROOT --table TABLE --name BRANCH --from VERSION`",
    "branch delete": "the command `lake branch delete ROOT --table TABLE --name BRANCH`",
    "config unset": "the command `lake config ROOT --table TABLE --unset KEY`",
    "copy fresh": "upload the file again with lk.objects.put(...) (a fresh key) and reference that",
    "allow below policy": "lk.gc.plan(..., allow_below_policy=True)",
    "max clock skew": "the command `lake gc ... --max-clock-skew DUR` (the Python package keeps the default bound)",
}


def _add_note(error: BaseException, note: str) -> None:
    """Adds `note` to `error.__notes__` once (`add_note` on Python 3.11+; before, the attribute
    `add_note` would set)."""
    if note in (getattr(error, "__notes__", None) or []):
        return
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", []), note]


def error_of_kind(kind: str, message: str, transient: bool) -> LakeError:
    """The exception for an error of `kind` (its class from `_CLASS_OF_KIND`; `LakeError` for a
    kind this package does not know, from a newer native module), with a note giving Python's way
    to do each action its message advises."""
    error = _CLASS_OF_KIND.get(kind, LakeError)(message, transient, kind)
    for name, spelling in _REMEDIES.items():
        if f"`{name}`" in message:
            _add_note(error, f"in Python: {spelling}")
    return error


for _cls in (LakeError, GuardError, PolicyError, LineageError, StorageError, InputError, ObjectMissingError, ObjectMismatchError):
    _cls.__module__ = "lake"
del _cls
