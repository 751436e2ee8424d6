"""A tiny name -> component registry. Every component -- an algorithm or participation layer (a class), a model,
partition or dataset (a factory function) -- is registered with ``@REGISTRY.register(name)`` and carries its typed
``Config`` beside it: a class declares ``class Config`` inside itself; a function names it, ``register(name,
config=Cls, **defaults)``, where ``defaults`` are the few values in which this component's option differs from the
shared Config's (``cifar10``'s train-time augmentation). The config layer stores each as an option of its group."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, TypeVar

T = TypeVar("T")


class Registry(Dict[str, Any]):
    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, name: str, config: Optional[type] = None, **defaults: Any) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self:
                raise ValueError(f"{self.what} '{name}' registered twice")
            obj.name = name  # type: ignore[attr-defined]
            if config is not None:
                obj.Config = config  # type: ignore[attr-defined]
            elif isinstance(obj, type) and "Config" in vars(obj):  # its kind and name default to this name
                obj.Config.registered_as = name  # type: ignore[attr-defined]
            obj.defaults = dict(defaults)  # type: ignore[attr-defined]
            self[name] = obj  # type: ignore[assignment]
            return obj

        return deco

    def config(self, name: str) -> Any:
        """The option ``name`` of this group as a Config instance (its name and registered defaults filled in)."""
        obj = self[name]
        if getattr(obj.Config, "registered_as", None) == name:
            return obj.Config()
        return obj.Config(name=name, **obj.defaults)

    def get_class(self, name: str) -> Any:
        from fedbench.errors import FedbenchError

        if name not in self:
            raise FedbenchError(
                f"Unknown {self.what} '{name}'. Allowed: {', '.join(sorted(self))}. "
                f"Fix: choose one of these."
            )
        return self[name]
