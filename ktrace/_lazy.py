"""Module attributes imported on first use, so that importing a package has no side effects
and pulls in neither torch nor triton until a name that needs them is used."""

import importlib


def lazy_attributes(package: str, table: dict, namespace: dict):
    """A module-level ``__getattr__`` for ``package`` that loads ``table[name] = (module, attr)``
    on first use and caches it in ``namespace`` (the package's ``globals()``)."""

    def __getattr__(name):
        if name in table:
            mod, attr = table[name]
            value = getattr(importlib.import_module(mod), attr)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
