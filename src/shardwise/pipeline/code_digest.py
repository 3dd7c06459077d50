"""A digest of what decides a user operator's output, the same in every process running the
same code (part of a run's fingerprint, :func:`shardwise.pipeline.commit.fingerprint`).

- a function: its code (bytecode, constants and names, recursively into nested code
  objects; not its file or line numbers), its defaults, the values in its closure cells,
  and the values of the globals it names that are simple constants (numbers, strings,
  bytes, ``None``, tuples and frozensets of those) or functions of its own module;
- the operator itself as an instance of a Python class (a callable or a dedup operator):
  the code of its class's methods and its state (``__dict__``);
- a ``functools.partial``: the function, its arguments and keywords; a bound method: the
  function and its instance;
- any other value: its pickle (cloudpickle when plain pickle cannot), else its ``repr``
  without memory addresses; lists, tuples, dicts and sets are taken apart (a set in sorted
  order, as its iteration order changes from one process to the next with string hashing).

``marshal.dumps`` is not used: its bytes depend on reference counts.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import re
import types
from typing import Any

__all__ = ["digest"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SIMPLE = (int, float, complex, str, bytes, bool, type(None))


def digest(obj: Any) -> str:
    """The hex digest of ``obj`` (see the module docstring)."""
    h = hashlib.sha1()
    if _is_instance(obj):
        _feed_instance(h, obj)
    else:
        _feed(h, obj, set())
    return h.hexdigest()


def _feed(h: Any, obj: Any, seen: set[int]) -> None:
    """Add ``obj`` to ``h``; ``seen`` holds the functions being taken apart (a recursive
    function names itself)."""
    if isinstance(obj, _SIMPLE):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}[{len(obj)}".encode())
        for x in obj:
            _feed(h, x, seen)
        h.update(b"]")
    elif isinstance(obj, dict):
        h.update(f"dict[{len(obj)}".encode())
        for k, v in obj.items():
            _feed(h, k, seen)
            _feed(h, v, seen)
        h.update(b"]")
    elif isinstance(obj, (set, frozenset)):
        h.update(f"{type(obj).__name__}[".encode())
        for part in sorted(digest(x) for x in obj):
            h.update(part.encode())
        h.update(b"]")
    elif id(obj) in seen:
        h.update(b"<seen>")
    elif isinstance(obj, (types.FunctionType, functools.partial, types.MethodType)):
        seen.add(id(obj))
        _feed_callable(h, obj, seen)
    else:
        h.update(_pickled(obj))


def _is_instance(obj: Any) -> bool:
    """An instance of a class written in Python with a state (a callable or dedup operator)."""
    return (
        hasattr(obj, "__dict__")
        and type(obj).__module__ != "builtins"
        and not isinstance(obj, (type, types.ModuleType, functools.partial))
    )


def _feed_instance(h: Any, obj: Any) -> None:
    """The code of the methods of ``obj``'s class (and its bases) and its ``__dict__``."""
    cls = type(obj)
    h.update(f"instance:{cls.__module__}.{cls.__qualname__}(".encode())
    seen: set[int] = set()
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            continue
        for name, attr in sorted(vars(klass).items()):
            if isinstance(attr, (types.FunctionType, staticmethod, classmethod)):
                h.update(f"{name}=".encode())
                _feed(h, getattr(attr, "__func__", attr), seen)
    _feed(h, dict(vars(obj)), seen)
    h.update(b")")


def _feed_callable(h: Any, obj: Any, seen: set[int]) -> None:
    if isinstance(obj, functools.partial):
        h.update(b"partial(")
        _feed(h, obj.func, seen)
        _feed(h, obj.args, seen)
        _feed(h, obj.keywords, seen)
        h.update(b")")
    elif isinstance(obj, types.MethodType):
        h.update(b"method(")
        _feed(h, obj.__func__, seen)
        h.update(_pickled(obj.__self__))
        h.update(b")")
    else:
        _feed_function(h, obj, seen)


def _feed_function(h: Any, fn: types.FunctionType, seen: set[int]) -> None:
    """A function's code, defaults, closure values, and the simple constants and functions of
    its own module among the globals its code names."""
    h.update(b"function(")
    _feed_code(h, fn.__code__)
    _feed(h, fn.__defaults__, seen)
    _feed(h, fn.__kwdefaults__, seen)
    for cell in fn.__closure__ or ():
        try:
            _feed(h, cell.cell_contents, seen)
        except ValueError:  # an empty cell (a name assigned later)
            h.update(b"<empty>")
    for name in sorted(_global_names(fn.__code__)):
        value = fn.__globals__.get(name)
        if _constant(value) or (
            isinstance(value, types.FunctionType) and value.__module__ == fn.__module__
        ):
            h.update(f"global {name}=".encode())
            _feed(h, value, seen)
    h.update(b")")


def _feed_code(h: Any, code: types.CodeType) -> None:
    h.update(b"code(")
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const)
        else:
            _feed(h, const, set())
    h.update(b")")


def _global_names(code: types.CodeType) -> set[str]:
    """Every name the code (and the code nested in it) may look up as a global."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _constant(value: Any) -> bool:
    if isinstance(value, _SIMPLE):
        return True
    return isinstance(value, (tuple, frozenset)) and all(_constant(v) for v in value)


def _pickled(obj: Any) -> bytes:
    """``obj`` by pickle, else cloudpickle, else its ``repr``."""
    try:
        return pickle.dumps(obj, protocol=4)
    except Exception:  # noqa: BLE001 - many objects do not pickle; try the next way
        pass
    try:
        import cloudpickle

        data: bytes = cloudpickle.dumps(obj, protocol=4)
        return data
    except Exception:  # noqa: BLE001 - nor with cloudpickle: its repr is what is left
        return _ADDRESS.sub("", repr(obj)).encode()
