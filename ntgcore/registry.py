"""Plugin registries: generators, run methods and endpoint back ends are found here by name.

A plugin is registered either by an entry point of the installed distribution (the one line a new
plugin adds to pyproject.toml, group `ntg_testbed.<kind>`), or by calling `register()` (tests, a
user's own script). The registries import a plugin module only when asked for the names, so the
bottom layer never imports the layers above it statically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

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
        for ep in sorted(entry_points(group=self.group), key=lambda e: e.name):
            if ep.name not in self._items:
                self.register(ep.name, ep.load())

    def get(self, name: str) -> T:
        self.load()
        try:
            return self._items[name]
        except KeyError:
            raise PluginError(
                f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        self.load()
        return sorted(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter([self._items[n] for n in self.names()])

    def __contains__(self, name: str) -> bool:
        self.load()
        return name in self._items


GENERATORS: Registry = Registry("generator", "ntg_testbed.generators")
METHODS: Registry = Registry("method", "ntg_testbed.methods")
ENDPOINTS: Registry = Registry("endpoint back end", "ntg_testbed.endpoints")
