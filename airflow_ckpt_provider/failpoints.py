"""Named failpoints for fault-injection tests.

Off unless turned on, and then only the named ones fire. When off, ``failpoint()``
is one dict lookup on an empty dict. Turn them on with the environment variable
``CKPT_FAILPOINTS`` (read at import and by :func:`reload_from_env`, so Spark
executors inherit it) or with :func:`enable` in-process::

    CKPT_FAILPOINTS="store.checkpoint.before_manifest=exit@2,commit.between_phases=raise"

Each entry is ``name=kind[@hit]``: ``kind`` is ``raise`` (an :class:`InjectedFault`),
``exit`` (``os._exit(17)``, a killed process: no cleanup, no ``finally``) or
``sleep:SECONDS``; ``hit`` is which hit fires (default 1; ``*`` for every hit).

In-process tests of races also have ``enable(name, kind="block", seconds=S)``: the hit waits
until the test calls :func:`release` (or ``S`` seconds pass), so "A passed this point, then B
happened, then A went on" holds however slow the machine is, which a sleep cannot promise.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

ENV_VAR = "CKPT_FAILPOINTS"
EXIT_CODE = 17


class InjectedFault(RuntimeError):
    """Raised by a failpoint of kind ``raise``."""


@dataclass
class _Rule:
    kind: str
    hit: int | None  # None: every hit
    seconds: float = 0.0
    hits: int = 0


_rules: dict[str, _Rule] = {}
_lock = threading.Lock()
_released: dict[str, threading.Event] = {}
#: ``block`` is in-process only (:func:`enable`): the environment cannot release it.
_ENV_KINDS = ("raise", "exit", "sleep")


def _parse(spec: str) -> dict[str, _Rule]:
    rules: dict[str, _Rule] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = entry.partition("=")
        action = action or "raise"
        kind, _, hit = action.partition("@")
        seconds = 0.0
        if kind.startswith("sleep:"):
            kind, seconds = "sleep", float(kind.split(":", 1)[1])
        if kind not in _ENV_KINDS:
            raise ValueError(f"failpoint {name!r}: unknown kind {kind!r} (raise, exit, sleep:SECONDS)")
        rules[name.strip()] = _Rule(kind=kind, hit=None if hit == "*" else int(hit or 1), seconds=seconds)
    return rules


def reload_from_env() -> None:
    with _lock:
        _rules.clear()
        _rules.update(_parse(os.environ.get(ENV_VAR, "")))


def enable(name: str, kind: str = "raise", hit: int | None = 1, seconds: float = 0.0) -> None:
    if kind not in (*_ENV_KINDS, "block"):
        raise ValueError(f"failpoint {name!r}: unknown kind {kind!r} (raise, exit, sleep, block)")
    with _lock:
        _rules[name] = _Rule(kind=kind, hit=hit, seconds=seconds)
        _released[name] = threading.Event()


def _release_event(name: str) -> threading.Event:
    with _lock:
        return _released.setdefault(name, threading.Event())


def release(name: str) -> None:
    """Let a hit of the ``block`` failpoint ``name`` go on (now, or as soon as it arrives)."""
    _release_event(name).set()


def disable_all() -> None:
    with _lock:
        _rules.clear()
        for event in _released.values():
            event.set()  # nothing stays blocked after a test
        _released.clear()


def hits(name: str) -> int:
    rule = _rules.get(name)
    return 0 if rule is None else rule.hits


def failpoint(name: str) -> None:
    """Fire the failpoint ``name`` if a rule names it and this is the hit it waits for."""
    if not _rules:
        return
    rule = _rules.get(name)
    if rule is None:
        return
    with _lock:
        rule.hits += 1
        fire = rule.hit is None or rule.hits == rule.hit
    if not fire:
        return
    if rule.kind == "sleep":
        time.sleep(rule.seconds)
    elif rule.kind == "block":
        _release_event(name).wait(rule.seconds)
    elif rule.kind == "exit":
        os._exit(EXIT_CODE)
    else:
        raise InjectedFault(f"failpoint {name} (hit {rule.hits})")


reload_from_env()
