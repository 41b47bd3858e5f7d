"""A registry filled on first use by the modules that declare into it (the claims' check modules, the
exercises' notebook modules). The package's face gives the import (:meth:`Loader.use`), so that only the
face loads those modules and the room that holds the registry imports none of them."""
from __future__ import annotations

import sys


class Loader:
    """Imports the declaring modules once, through the import the face gave (:meth:`use`); ``loaded``
    says whether it has."""

    def __init__(self, face: str):
        self.face = face
        self.loaded = False
        self._load = None

    def use(self, load) -> None:
        """The face's import of the declaring modules (given once, when the face is imported)."""
        self._load = load

    def __call__(self, *, retry: bool = False) -> bool:
        """Import the declaring modules unless done; True when this call did. ``retry``: an import that
        raises leaves them unloaded, for the next call to try again."""
        if self.loaded:
            return False
        if self._load is None:
            raise RuntimeError(f"the modules that declare into this registry are loaded by {self.face}: "
                               f"import it first")
        self.loaded = True
        try:
            self._load()
        except BaseException:
            if retry:
                self.loaded = False
            raise
        return True

    def face_names(self, module: str):
        """``(__getattr__, __dir__)`` for the face ``module``: its ``_LOADED``, the flag it held before its
        registry moved to a room, read here, never a copy made at import."""
        def getattr_(name):
            if name == "_LOADED":
                return self.loaded
            raise AttributeError(f"module {module!r} has no attribute {name!r}")

        def dir_():
            return sorted([*vars(sys.modules[module]), "_LOADED"])

        return getattr_, dir_
