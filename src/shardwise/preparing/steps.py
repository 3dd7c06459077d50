"""The steps of :func:`shardwise.prepare`, the backends each can run on, and which backend
runs a step.

A step runs on the first of: the ``backend=`` given to ``prepare``; the backend a
``parallel_backend(..., steps=[...])`` block chose for it; the active
``parallel_backend`` block's backend when the step can run there; the step's default.
A backend given for a step it cannot run raises
:class:`~shardwise.errors.UnsupportedError` (a ``NotImplementedError``) naming the step,
the backend and the backends that can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardwise.errors import ConfigError, UnsupportedError
from shardwise.parallel import Backend, BackendSpec, active_backend, step_backends

__all__ = ["ALIASES", "STEPS", "backend_for", "expand_steps"]

IN_PROCESS = ("thread", "sequential")
ON_THIS_MACHINE = ("thread", "sequential", "local", "joblib")
CLUSTER = ("ray", "spark", "dask")


@dataclass(frozen=True)
class Step:
    """A step's backends: ``anywhere`` always, ``shared`` only when the output is shared
    storage (an object store every node reaches), ``default`` when none is chosen."""

    name: str
    anywhere: tuple[str, ...]
    shared: tuple[str, ...] = ()
    default: str | None = None

    def can_run(self, backend: str, shared_output: bool) -> bool:
        return backend in self.anywhere or (shared_output and backend in self.shared)

    def refuse(self, backend: str, out: str) -> UnsupportedError:
        can = ", ".join(self.anywhere)
        if self.shared:
            can += f" (and {', '.join(self.shared)} when the output is shared storage such as s3://...)"
        why = (
            f" with the local output {out!r}: its workers may run on other machines"
            if backend in self.shared
            else ""
        )
        return UnsupportedError(
            f"step {self.name!r} cannot run on backend {backend!r}{why}; it runs on: {can}"
        )


STEPS: dict[str, Step] = {
    # a worker on another node cannot write to this machine's disk, but it can write to a bucket
    "download": Step("download", ON_THIS_MACHINE, CLUSTER, default="thread"),
    "convert": Step("convert", ON_THIS_MACHINE + CLUSTER),
    "index": Step("index", ON_THIS_MACHINE + CLUSTER),
}
# names that stand for several steps
ALIASES: dict[str, tuple[str, ...]] = {"prepare": ("convert", "index")}


def expand_steps(steps: Sequence[str]) -> list[str]:
    """The steps named, aliases expanded, in the order they run."""
    if isinstance(steps, str):
        steps = [steps]
    unknown = [s for s in steps if s not in STEPS and s not in ALIASES]
    if unknown:
        raise ConfigError(f"unknown steps {unknown}; known steps: {', '.join([*STEPS, *ALIASES])}")
    named = {t for s in steps for t in ALIASES.get(s, (s,))}
    return [s for s in STEPS if s in named]


def _name(backend: BackendSpec) -> str:
    return backend if isinstance(backend, str) else getattr(backend, "name", str(backend))


def backend_for(step: str, given: BackendSpec, out: str, shared_output: bool) -> BackendSpec:
    """The backend ``step`` runs on (see the module docs); raises if it cannot run there."""
    scoped = step_backends()
    unknown = sorted(set(scoped) - set(STEPS) - set(ALIASES))
    if unknown:
        raise ConfigError(
            f"parallel_backend(steps=...) names unknown steps {unknown}; known steps: "
            f"{', '.join([*STEPS, *ALIASES])}"
        )
    spec = STEPS[step]
    chosen: BackendSpec = given
    if chosen is None:
        chosen = scoped.get(step) or next(
            (b for s, b in scoped.items() if step in ALIASES.get(s, ())), None
        )
    if chosen is not None:
        if not spec.can_run(_name(chosen), shared_output):
            raise spec.refuse(_name(chosen), out)
        return chosen
    active: Backend | None = active_backend()
    if active is not None and spec.can_run(active.name, shared_output):
        return active
    return spec.default
