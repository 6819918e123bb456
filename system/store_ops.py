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
import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from cs2sim.system.errors import CsError

__all__ = ["Caller", "Operation", "OPERATIONS", "RequestError", "operation", "current_caller",
           "acting_for", "encode", "decode", "conforms", "wire", "wire_types", "receiver",
           "FILLS", "MAY",
           "error_reply", "raise_error"]


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


# What the service fills in for a member, from its own observation: argument -> source.
FILLS: dict[str, str] = {
    "identity": "the caller's account (its OS login's, or the one its password login proved)",
    "user": "the caller's account name",
    "admin": "whether the caller's account has the admin role",
    "pid": "the caller's process id (SO_PEERCRED; its start time from /proc)",
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


def operation(name: str, *, args: Mapping[str, Any], fill: Mapping[str, str] | None = None,
              may: str = "anyone", receiver: str = "store", becomes: bool = False
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare `fn` an operation of the store (see the module's docstring)."""
    fill = dict(fill or {})
    assert may in MAY and all(v in FILLS for v in fill.values()), (name, may, fill)

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        op = Operation(name, fn, dict(args), fill, may, receiver, becomes,
                       _first_sentence(inspect.getdoc(fn) or ""))
        assert name not in OPERATIONS, f"operation {name} declared twice"
        OPERATIONS[name] = op

        @functools.wraps(fn)
        def call(first: Any, *a: Any, **kw: Any) -> Any:
            store = first if receiver == "store" else first.store
            remote = store.remote
            if remote is None:
                return fn(first, *a, **kw)
            bound = sig.bind(first, *a, **kw)
            sent = {k: v for k, v in bound.arguments.items() if k in op.args}
            if receiver == "machine":
                sent["system"] = first.name
            return remote.call(name, sent)

        call.operation = op  # type: ignore[attr-defined]
        return call

    return declare


def run(op: Operation, store: Any, caller: Caller, args: dict[str, Any],
        fills: Mapping[str, Callable[[], Any]]) -> Any:
    """Run `op` in the service for `caller` with the decoded `args` (checked here)."""
    unknown = set(args) - set(op.args)
    if unknown:
        raise RequestError(f"request {op.name} takes no argument {sorted(unknown)[0]!r}")
    for key, value in args.items():
        if not conforms(value, op.args[key]):
            raise RequestError(f"request {op.name}: argument {key!r} is not "
                               f"{_type_name(op.args[key])}")
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
        inspect.signature(op.fn).bind(first, **call_args)
    except TypeError as e:
        raise RequestError(f"request {op.name}: {e}") from None
    with acting_for(caller):
        return op.fn(first, **call_args)


# -- types ------------------------------------------------------------------------------------
def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` (decoded) is of type `hint` (the subset of typing the table uses)."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, h) for h in typing.get_args(hint))
    if origin is tuple:
        params = typing.get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(params) == 2 and params[1] is Ellipsis:
            return all(conforms(v, params[0]) for v in value)
        return len(params) == len(value) and all(map(conforms, value, params))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if origin is dict:
        k, v = typing.get_args(hint)
        return isinstance(value, dict) and all(conforms(a, k) and conforms(b, v)
                                               for a, b in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


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
def _hints(cls: type) -> dict[str, Any]:
    # the classes' modules may import each other's only for type checking: name them all
    return typing.get_type_hints(cls, localns=dict(wire_types()))


def encode(value: Any) -> Any:
    """`value` as JSON-able data, types kept by tags."""
    if value is None or isinstance(value, (bool, int, float, str)) and not isinstance(
            value, enum.Enum):
        return value
    if isinstance(value, enum.Enum):
        return {"$e": type(value).__name__, "v": value.value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return {"$b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (tuple, frozenset)):
        return {"$t": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"$m": [[encode(k), encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"$d": type(value).__name__,
                "v": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    raise TypeError(f"a {type(value).__name__} cannot cross the store's socket")


def decode(data: Any, depth: int = 0) -> Any:
    """The value `encode` made; ValueError for anything else (unknown tags or classes, a field
    of the wrong type)."""
    if depth > 32:
        raise ValueError("a value nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, depth + 1) for v in data]
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise ValueError("a value of an unknown shape")
    if "$t" in data and isinstance(data["$t"], list):
        return tuple(decode(v, depth + 1) for v in data["$t"])
    if "$m" in data and isinstance(data["$m"], list):
        pairs = [decode(p, depth + 1) for p in data["$m"]]
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ValueError("a malformed mapping")
        try:
            return {k: v for k, v in pairs}
        except TypeError:
            raise ValueError("a mapping with an unhashable key") from None
    if "$b" in data and isinstance(data["$b"], str):
        import base64
        import binascii

        try:
            return base64.b64decode(data["$b"], validate=True)
        except binascii.Error:
            raise ValueError("malformed bytes") from None
    for tag in ("$e", "$d"):
        name = data.get(tag)
        if name is None:
            continue
        cls = wire_types().get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"a value of an unknown type {str(name)[:40]!r}")
        if tag == "$e":
            if not issubclass(cls, enum.Enum):
                raise ValueError(f"{name} is not an enumeration")
            try:
                return cls(data.get("v"))
            except ValueError:
                raise ValueError(f"{str(data.get('v'))[:40]!r} is not a {name}") from None
        fields = data.get("v")
        if not dataclasses.is_dataclass(cls) or not isinstance(fields, dict):
            raise ValueError(f"a malformed {name}")
        hints = _hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, raw in fields.items():
            if key not in known:
                raise ValueError(f"{name} has no field {str(key)[:40]!r}")
            value = decode(raw, depth + 1)
            if not conforms(value, hints[key]):
                raise ValueError(f"{name}.{key} is not {_type_name(hints[key])}")
            kwargs[key] = value
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise ValueError(f"a malformed {name} ({e})") from None
    raise ValueError("a value of an unknown shape")


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
    rows = ["| request | arguments | filled in by the service | who may call it | what it does |",
            "|---|---|---|---|---|"]
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
