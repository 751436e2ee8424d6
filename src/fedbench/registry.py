"""A tiny name -> component registry: classes (algorithms, participation layers, each with its ``Config``
beside it) or factory functions (models, partitions, datasets), registered with ``@REGISTRY.register(name)``."""

from __future__ import annotations

from typing import Any, Callable, Dict, TypeVar

T = TypeVar("T")


class Registry(Dict[str, Any]):
    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, name: str) -> Callable[[T], T]:
        def deco(cls: T) -> T:
            if name in self:
                raise ValueError(f"{self.what} '{name}' registered twice")
            cls.name = name  # type: ignore[attr-defined]
            if "Config" in vars(cls):  # the Config beside it: its kind and name default to this name
                cls.Config.registered_as = name  # type: ignore[attr-defined]
            self[name] = cls  # type: ignore[assignment]
            return cls

        return deco

    def get_class(self, name: str) -> Any:
        from fedbench.errors import FedbenchError

        if name not in self:
            raise FedbenchError(
                f"Unknown {self.what} '{name}'. Allowed: {', '.join(sorted(self))}. "
                f"Fix: choose one of these."
            )
        return self[name]
