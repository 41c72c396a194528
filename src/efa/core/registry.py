"""One registry mechanism for every plug-in kind: attention kernels (``efa.KERNELS``), field
kinds (``efa.core.fields.FIELD_KINDS``), families (``efa.core.families.FAMILIES``) and, in a
checkout, experiments (``experiments.EXPERIMENTS``).

A :class:`Registry` is a read-mostly mapping from a name to what it names. ``register`` adds
an entry (as a class decorator or a call); ``lookup`` returns one or raises
:class:`UnknownName` that lists the names there are. A name already taken by another object
is refused, since replacing it would switch every user of the name in the process; the same
definition run again (a notebook cell, a reloaded module: same module and qualified name)
replaces its old self.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name no entry of a registry has. A ``KeyError`` (it is a failed lookup) and a
    ``ValueError`` (it is usually a bad value in a config), so either ``except`` catches it."""

    def __str__(self) -> str:  # KeyError's str() would quote the whole message
        return str(self.args[0]) if self.args else ""


def _origin(obj: Any) -> tuple[str, str]:
    return (getattr(obj, "__module__", ""), getattr(obj, "__qualname__", repr(obj)))


class Registry(Mapping[str, T], Generic[T]):
    """Names → entries of one kind: a read-only ``Mapping`` that only :meth:`register` and
    :meth:`unregister` change.

    Parameters
    ----------
    what : str
        The kind of entry, as messages name it (e.g. ``"attention kernel"``).
    key : callable, optional
        Gives an entry's name when :meth:`register` is given none, e.g. as a plain class
        decorator (``lambda cls: cls.name``). Without it, every entry needs an explicit
        ``name``.
    """

    def __init__(self, what: str, key: Callable[[Any], str] | None = None) -> None:
        self.what = what
        self._key = key
        self._entries: dict[str, T] = {}

    def register(self, entry: Any = None, *, name: str | None = None) -> Any:
        """Add ``entry`` under ``name`` and return it; with no entry, return a decorator that
        does so.

        A name already taken by another object is refused; the same definition run again
        (same module and qualified name, e.g. a re-run notebook cell) replaces its old self.

        Parameters
        ----------
        entry : object, optional
            What to register. Left out, ``register(name=...)`` is a decorator.
        name : str, optional
            The name to register it under (default: the registry's ``key`` of ``entry``).

        Returns
        -------
        object
            ``entry`` itself, or, without an entry, a decorator that registers and returns
            its argument.

        Raises
        ------
        TypeError
            If there is no name (no ``name`` and no ``key``) or the name is not a non-empty
            string.
        ValueError
            If the name is already registered by another definition.
        """
        if entry is None:
            return lambda e: self.register(e, name=name)
        if name is None:
            if self._key is None:
                raise TypeError(f"registering a {self.what} needs a name")
            name = self._key(entry)
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.what} needs a non-empty string name, got {name!r} for "
                            f"{_origin(entry)[1]}")
        old = self._entries.get(name)
        if old is not None and old is not entry and _origin(old) != _origin(entry):
            module, qualname = _origin(old)
            raise ValueError(f"{self.what} name {name!r} is already registered by "
                             f"{module}.{qualname}; give {_origin(entry)[1]} another name")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> T:
        """Remove and return the entry called ``name`` (a test's or a notebook's clean-up).

        Parameters
        ----------
        name : str
            A registered name.

        Returns
        -------
        object
            The entry that was registered under ``name``.

        Raises
        ------
        UnknownName
            If no entry has that name.
        """
        entry = self.lookup(name)
        del self._entries[name]
        return entry

    def lookup(self, name: Any) -> T:
        """The entry called ``name``; ``registry[name]`` is the same.

        Parameters
        ----------
        name : str
            The name to look up (anything else is an unknown name).

        Returns
        -------
        object
            The entry registered under ``name``.

        Raises
        ------
        UnknownName
            If no entry has that name; the message lists the names there are.
        """
        if not isinstance(name, str) or name not in self._entries:
            raise self.lookup_error(name)
        return self._entries[name]

    def lookup_error(self, name: Any) -> UnknownName:
        """The error :meth:`lookup` raises for a ``name`` that is not there.

        Parameters
        ----------
        name : object
            The name that was asked for.

        Returns
        -------
        UnknownName
            The error (not raised), its message listing the names there are.
        """
        return UnknownName(f"unknown {self.what} {name!r}; expected one of {sorted(self)}")

    def __getitem__(self, name: str) -> T:
        return self.lookup(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {sorted(self)})"
