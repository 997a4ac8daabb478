"""Plugin registries: generators, run methods, endpoint back ends, DUT kinds, the parts of a step
and the run extensions (hooks) are found here by name.

A plugin is registered either by an entry point of the installed distribution (the one line a new
plugin adds to pyproject.toml, group `ntg_testbed.<kind>`), or by calling `register()` (tests, a
user's own script). The registries import a plugin module only when asked for the names, so the
bottom layer never imports the layers above it statically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from .errors import PluginError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> plugin object of one kind; entry points of group `group` are loaded once, lazily."""

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        self.group = group
        self._items: dict[str, T] = {}
        self._loaded = False
        self._listeners: list[Callable[[], None]] = []
        self.version = 0  # bumped by every change, so derived things (the scenario model) rebuild

    def register(self, name: str, item: T, replace: bool = False) -> T:
        self.load()  # the declared plugins first: `declared()` lists them before this one
        if name in self._items and self._items[name] is not item and not replace:
            raise PluginError(f"a {self.kind} named {name!r} is registered already")
        self._items[name] = item
        self.version += 1
        for listener in self._listeners:
            listener()
        return item

    def unregister(self, name: str) -> None:
        if self._items.pop(name, None) is not None:
            self.version += 1
            for listener in self._listeners:
                listener()

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def load(self) -> None:
        """Import every plugin the installed distribution declares (once)."""
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(group=self.group):  # in the order pyproject.toml declares them
            if ep.name not in self._items:
                self.register(ep.name, ep.load())

    def get(self, name: object) -> T:
        """The plugin called `name`; PluginError naming the ones there are when none is (also
        when `name` is not a string: a scenario's value as it was written)."""
        self.load()
        if not isinstance(name, str) or name not in self._items:
            raise PluginError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        self.load()
        return sorted(self._items)

    def declared(self) -> list[str]:
        """The names in the order they were registered: the entry points in the order the
        distribution declares them, then those registered by `register()` (as a choice lists
        them in an error or the JSON Schema)."""
        self.load()
        return list(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter([self._items[n] for n in self.names()])

    def __contains__(self, name: str) -> bool:
        self.load()
        return name in self._items


GENERATORS: Registry[Any] = Registry("generator", "ntg_testbed.generators")
METHODS: Registry[Any] = Registry("method", "ntg_testbed.methods")
ENDPOINTS: Registry[Any] = Registry("endpoint back end", "ntg_testbed.endpoints")
DUT_KINDS: Registry[Any] = Registry("DUT kind", "ntg_testbed.dut_kinds")
PARTS: Registry[Any] = Registry("part", "ntg_testbed.parts")
RUN_HOOKS: Registry[Any] = Registry("run extension", "ntg_testbed.run_hooks")
