"""The store's operations: ONE table of everything that may be asked of a system store.

Every function of system/ that reads or changes the store on behalf of the console or a launcher
is declared here with `@operation`: its request name, the arguments a caller may send (each with
its type), the arguments the store itself fills in from the caller it observed, and who may call
it. The same function runs in both places a store can be:

* the owner's process (a private store, or the owner of a shared one): the function is called
  in-process, on SQLite, exactly as written;
* a member of a shared store: the call becomes a typed request (`{"op": name, "args": {...}}`)
  to the owner's store service (system/store_service.py), which checks the arguments against
  the table, fills in the caller's identity, process id and the cluster's nodes from what IT
  observed (the kernel's SO_PEERCRED, /proc, its own cluster description), and runs the same
  function on its own connection, as one transaction.

So nothing is written twice, and a member can ask for nothing but these operations: no SQL, no
transaction held between requests, no row the operations would not write themselves.

Values cross the socket in a small tagged JSON encoding (`encode`/`decode`): tuples, bytes,
enums and the dataclasses of `WIRE_TYPES` keep their types, and a decoded dataclass has every
field checked against its annotation before it is built. Errors cross as their CsError class and
message, so a member sees the same one sentence (and exit code) the owner would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from cs2sim.system.errors import CsError

__all__ = [
    "Caller",
    "Operation",
    "OPERATIONS",
    "RequestError",
    "operation",
    "current_caller",
    "acting_for",
    "process_of",
    "encode",
    "decode",
    "conforms",
    "wire",
    "wire_types",
    "receiver",
    "FILLS",
    "MAY",
    "error_reply",
    "raise_error",
]


class RequestError(CsError):
    """A request the store service cannot take (unknown, malformed, or over a limit)."""

    exit_code = 2


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, as the store service observed it (never as the caller said)."""

    uid: int  # SO_PEERCRED
    pid: int  # SO_PEERCRED: the process that connected
    os_name: str  # the uid's login name
    account: Any  # the users.Identity this connection acts as
    # the connecting process's identity, verified when called (procfs.ProcessId; RequestError
    # once that process has ended: its pid may name another process by then)
    verify: Callable[[], Any] | None = None


_CALLER: ContextVar[Caller | None] = ContextVar("cs2sim_store_caller", default=None)


def current_caller() -> Caller | None:
    """The caller the store service is running an operation for (None in the caller's own
    process: then the process itself is the caller)."""
    return _CALLER.get()


@contextlib.contextmanager
def acting_for(caller: Caller) -> Iterator[None]:
    """Run an operation on behalf of `caller` (the service's dispatch only)."""
    from cs2sim.system.oslogin import ACTING_FOR

    token = _CALLER.set(caller)
    acting = ACTING_FOR.set(caller.os_name)
    try:
        yield
    finally:
        ACTING_FOR.reset(acting)
        _CALLER.reset(token)


def process_of(pid: int) -> Any:
    """The identity (procfs.ProcessId) of the process a record is about, read now: in the
    service, the connecting process's, verified through its pidfd (RequestError if it has ended);
    in the caller's own process, `pid`'s from /proc (None if it is gone)."""
    caller = _CALLER.get()
    if caller is not None and caller.verify is not None:
        return caller.verify()
    from cs2sim.system import procfs

    return procfs.identify(pid)


# What the service fills in for a member, from its own observation: argument -> source.
FILLS: dict[str, str] = {
    "identity": "the caller's account (its OS login's, or the one its password login proved)",
    "user": "the caller's account name",
    "admin": "whether the caller's account has the admin role",
    "pid": "the caller's process id (SO_PEERCRED), verified when used: still the process that"
    " connected (its pidfd, SO_PEERPIDFD), its start time and uid from /proc",
    "nodes": "the cluster's nodes, from the owner's cluster description",
    "none": "nothing (the service's own clock)",
}
# Who may call: the rule each operation enforces (and audits) itself.
MAY: dict[str, str] = {
    "anyone": "anyone the service admits (read, or an attempt the operation judges and audits)",
    "admin": "an admin account; anyone else is refused and the attempt audited",
    "owner-or-admin": "the owner of the job, or an admin; anyone else is refused (audited)",
    "self-or-admin": "an account for itself, or an admin for any account",
    "own": "anyone, in their own name only (the records it writes are the caller's)",
}


@dataclass(frozen=True)
class Operation:
    """One row of the table."""

    name: str
    fn: Callable[..., Any]  # the function as written (called with the store, or the Machine)
    args: Mapping[str, Any]  # what a caller may send: argument -> its type
    fill: Mapping[str, str] = field(default_factory=dict)  # argument -> a FILLS key
    may: str = "anyone"  # a MAY key
    receiver: str = "store"  # "store": fn(store, ...); "machine": fn(Machine(store, system), ...)
    becomes: bool = False  # a login: the connection acts as the Identity it returns
    summary: str = ""


OPERATIONS: dict[str, Operation] = {}


F = typing.TypeVar("F", bound=Callable[..., Any])


def operation(
    name: str,
    *,
    args: Mapping[str, Any],
    fill: Mapping[str, str] | None = None,
    may: str = "anyone",
    receiver: str = "store",
    becomes: bool = False,
) -> Callable[[F], F]:
    """Declare `fn` an operation of the store (see the module's docstring)."""
    fill = dict(fill or {})
    assert may in MAY and all(v in FILLS for v in fill.values()), (name, may, fill)

    def declare(fn: F) -> F:
        op = Operation(
            name, fn, dict(args), fill, may, receiver, becomes, _first_sentence(fn.__doc__ or "")
        )
        assert name not in OPERATIONS, f"operation {name} declared twice"
        OPERATIONS[name] = op

        @functools.wraps(fn)
        def call(first: Any, *a: Any, **kw: Any) -> Any:
            store = first if receiver == "store" else first.store
            remote = store.remote
            if remote is None:
                return fn(first, *a, **kw)
            bound = _signature(fn).bind(first, *a, **kw)
            sent = {k: v for k, v in bound.arguments.items() if k in op.args}
            if receiver == "machine":
                sent["system"] = first.name
            return remote.call(name, sent)

        return typing.cast(F, call)

    return declare


def run(
    op: Operation,
    store: Any,
    caller: Caller,
    args: dict[str, Any],
    fills: Mapping[str, Callable[[], Any]],
) -> Any:
    """Run `op` in the service for `caller` with the decoded `args` (checked here)."""
    unknown = set(args) - set(op.args)
    if unknown:
        raise RequestError(f"request {op.name} takes no argument {sorted(unknown)[0]!r}")
    for key, value in args.items():
        if not conforms(value, op.args[key]):
            raise RequestError(
                f"request {op.name}: argument {key!r} is not {_type_name(op.args[key])}"
            )
    call_args = dict(args)
    for key, source in op.fill.items():
        call_args[key] = fills[source]()
    first: Any = store
    if op.receiver != "store":
        system = call_args.pop("system", None)
        if not isinstance(system, str):
            raise RequestError(f"request {op.name} needs the system's name")
        first = _RECEIVERS[op.receiver](store, system)
    try:
        _signature(op.fn).bind(first, **call_args)
    except TypeError as e:
        raise RequestError(f"request {op.name}: {e}") from None
    with acting_for(caller):
        return op.fn(first, **call_args)


@functools.cache
def _signature(fn: Callable[..., Any]) -> Any:
    """The signature of `fn` (inspect is imported only once a request is made or served)."""
    import inspect

    return inspect.signature(fn)


# -- types ------------------------------------------------------------------------------------
def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` (decoded) is of type `hint` (the subset of typing the table uses)."""
    return _checker(hint)(value)


_PLAIN = (str, int, float, bool, type(None))


@functools.cache
def _checker(hint: Any) -> Callable[[Any], bool]:
    """`conforms` for one type, built once (a request's values are checked on every call)."""
    if hint is Any:
        return lambda v: True
    if hint is None or hint is type(None):
        return lambda v: v is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        alts = tuple(_checker(h) for h in typing.get_args(hint))
        return lambda v: any(c(v) for c in alts)
    if origin is tuple:
        params = typing.get_args(hint)
        if len(params) == 2 and params[1] is Ellipsis:
            item = _checker(params[0])
            return lambda v: type(v) is tuple and all(item(x) for x in v)
        each = tuple(_checker(h) for h in params)
        return lambda v: (
            type(v) is tuple
            and len(v) == len(each)
            and all(c(x) for c, x in zip(each, v, strict=True))
        )
    if origin is list:
        item = _checker(typing.get_args(hint)[0])
        return lambda v: type(v) is list and all(item(x) for x in v)
    if origin is dict:
        kc, vc = (_checker(h) for h in typing.get_args(hint))
        return lambda v: type(v) is dict and all(kc(a) and vc(b) for a, b in v.items())
    if hint is float:
        return lambda v: type(v) is float or type(v) is int
    if hint in (int, str, bool):
        return lambda v: type(v) is hint
    if isinstance(hint, type):
        return lambda v: isinstance(v, hint)
    return lambda v: False


_WIRE_TYPES: dict[str, type] = {}
_RECEIVERS: dict[str, Callable[[Any, str], Any]] = {}


def wire(cls: type) -> type:
    """Declare a dataclass or enum of system/ a value that may cross the store's socket."""
    assert cls.__name__ not in _WIRE_TYPES or _WIRE_TYPES[cls.__name__] is cls, cls
    _WIRE_TYPES[cls.__name__] = cls
    return cls


def wire_types() -> dict[str, type]:
    """The classes a value crossing the socket may be (declared with `wire`)."""
    return _WIRE_TYPES


def receiver(name: str, make: Callable[[Any, str], Any]) -> None:
    """Declare how the service builds the object an operation of `receiver=name` is a method
    of, from its store and the request's "system" argument (the Machine does)."""
    _RECEIVERS[name] = make


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, ...], dict[str, Callable[[Any], bool]]]:
    """A wire dataclass's field names and each field's check (its annotation, resolved once;
    the classes' modules may import each other's only for type checking: name them all)."""
    hints = typing.get_type_hints(cls, localns=dict(_WIRE_TYPES))
    names = tuple(f.name for f in dataclasses.fields(cls))
    return names, {n: _checker(hints[n]) for n in names}


def encode(value: Any) -> Any:
    """`value` as JSON-able data, types kept by tags."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if isinstance(value, enum.Enum):
        return {"$e": kind.__name__, "v": value.value}
    if kind is list:
        return [encode(v) for v in value]
    if kind is tuple or kind is frozenset:
        return {"$t": [encode(v) for v in value]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names, _ = _plan(kind)  # type: ignore[arg-type]  # a dataclass type is hashable
        return {"$d": kind.__name__, "v": {n: encode(getattr(value, n)) for n in names}}
    if isinstance(value, dict):
        return {"$m": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return {"$b": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"a {kind.__name__} cannot cross the store's socket")


def decode(data: Any, depth: int = 0) -> Any:
    """The value `encode` made; ValueError for anything else (unknown tags or classes, a field
    of the wrong type)."""
    kind = type(data)
    if kind in _PLAIN:
        return data
    if depth > 32:
        raise ValueError("a value nested too deeply")
    if kind is list:
        return [v if type(v) in _PLAIN else decode(v, depth + 1) for v in data]
    if kind is not dict or len(data) not in (1, 2):
        raise ValueError("a value of an unknown shape")
    if "$t" in data and type(data["$t"]) is list:
        return tuple(v if type(v) in _PLAIN else decode(v, depth + 1) for v in data["$t"])
    name = data.get("$d")
    if name is not None:
        cls = _WIRE_TYPES.get(name) if type(name) is str else None
        fields = data.get("v")
        if cls is None or not dataclasses.is_dataclass(cls):
            raise ValueError(f"a value of an unknown type {str(name)[:40]!r}")
        if type(fields) is not dict:
            raise ValueError(f"a malformed {name}")
        names, checks = _plan(cls)
        kwargs = {}
        for key, raw in fields.items():
            check = checks.get(key)
            if check is None:
                raise ValueError(f"{name} has no field {str(key)[:40]!r}")
            value = raw if type(raw) in _PLAIN else decode(raw, depth + 1)
            if not check(value):
                raise ValueError(f"{name}.{key} is not {_type_name(_plan_hint(cls, key))}")
            kwargs[key] = value
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise ValueError(f"a malformed {name} ({e})") from None
    name = data.get("$e")
    if name is not None:
        cls = _WIRE_TYPES.get(name) if type(name) is str else None
        if cls is None or not issubclass(cls, enum.Enum):
            raise ValueError(f"a value of an unknown type {str(name)[:40]!r}")
        try:
            return cls(data.get("v"))
        except ValueError:
            raise ValueError(f"{str(data.get('v'))[:40]!r} is not a {name}") from None
    if "$m" in data and type(data["$m"]) is list:
        pairs = [decode(p, depth + 1) for p in data["$m"]]
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise ValueError("a malformed mapping")
        try:
            return {k: v for k, v in pairs}
        except TypeError:
            raise ValueError("a mapping with an unhashable key") from None
    if "$b" in data and type(data["$b"]) is str:
        import base64
        import binascii

        try:
            return base64.b64decode(data["$b"], validate=True)
        except binascii.Error:
            raise ValueError("malformed bytes") from None
    raise ValueError("a value of an unknown shape")


def _plan_hint(cls: type, key: str) -> Any:
    return typing.get_type_hints(cls, localns=dict(_WIRE_TYPES))[key]


# -- errors ------------------------------------------------------------------------------------
def error_reply(e: CsError) -> dict[str, Any]:
    """A CsError as a reply: its class (by name), its one sentence, its string attributes."""
    extra = {k: v for k, v in vars(e).items() if isinstance(v, str)}
    return {"ok": False, "error": {"class": type(e).__name__, "message": str(e), "attrs": extra}}


def _error_classes() -> dict[str, type[CsError]]:
    """Every CsError class by name (the project's and its subclasses anywhere in system/)."""
    out: dict[str, type[CsError]] = {}
    todo: list[type[CsError]] = [CsError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return out


def raise_error(reply: Mapping[str, Any], fallback: str) -> typing.NoReturn:
    """Raise the CsError a reply carries (its own class when it is one of ours)."""
    from cs2sim.system.errors import StoreError

    err = reply.get("error")
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        raise StoreError(fallback)
    cls = _error_classes().get(str(err.get("class")), StoreError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, err["message"][:4000])
    attrs = err.get("attrs")
    if isinstance(attrs, dict):
        for k, v in attrs.items():
            if isinstance(k, str) and isinstance(v, str) and not k.startswith("_"):
                setattr(exc, k, v)
    raise exc


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.split("\n\n", 1)[0].split())
    return text.split(". ", 1)[0].rstrip(".") + "."


def _type_text(hint: Any) -> str:
    """A type as the docs' table says it (no `|`, which would split a Markdown cell)."""
    if hint is None or hint is type(None):
        return "none"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(h) for h in typing.get_args(hint))
    if origin in (tuple, list):
        return f"{origin.__name__} of {_type_text(typing.get_args(hint)[0])}"
    return _type_name(hint)


def table_markdown(ops: Mapping[str, Operation] | None = None) -> str:
    """The table as docs/security.md prints it: request, arguments, what the service fills in,
    who may call it, what it does (one row per operation, by name)."""
    ops = OPERATIONS if ops is None else ops
    rows = [
        "| request | arguments | filled in by the service | who may call it | what it does |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(ops):
        op = ops[name]
        args = ", ".join(f"`{k}`: {_type_text(v)}" for k, v in op.args.items()) or "-"
        fill = ", ".join(f"`{k}` = {v}" for k, v in op.fill.items()) or "-"
        rows.append(f"| `{name}` | {args} | {fill} | {op.may} | {op.summary} |")
    rows += ["", "| filled in from | what the service uses |", "|---|---|"]
    rows += [f"| {k} | {v} |" for k, v in FILLS.items()]
    rows += ["", "| who may call it | meaning |", "|---|---|"]
    rows += [f"| {k} | {v} |" for k, v in MAY.items()]
    return "\n".join(rows)
