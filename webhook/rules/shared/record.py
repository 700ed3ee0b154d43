"""Frozen dataclasses that every admission makes several of, made for less (see `record`)."""
from __future__ import annotations

import dataclasses
from typing import TypeVar

T = TypeVar("T")


def record(cls: type[T]) -> type[T]:
    """`@dataclasses.dataclass(frozen=True)`, with a cheaper `__init__`.

    The frozen `__init__` of dataclasses sets each field with `object.__setattr__`, which
    costs about as much as the rest of a small rule (~2,000 machine instructions a field), and
    an admission makes a record per disk, a decision, an outcome and a request. This
    `__init__` has the same signature and writes the fields into the new instance's
    `__dict__`, which is all that call does; everything else (frozen, eq, hash, repr,
    `dataclasses.replace`) is the dataclass's own. Plain defaults only: no default_factory,
    no `__post_init__`, no keyword-only or init=False fields (refused here).
    """
    cls = dataclasses.dataclass(frozen=True, init=False)(cls)
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: __post_init__ needs the dataclasses __init__")
    defaults: dict[str, object] = {}
    params, body = [], []
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING or not field.init or field.kw_only:
            raise TypeError(f"{cls.__name__}.{field.name}: only plain fields and defaults")
        if field.default is dataclasses.MISSING:
            params.append(field.name)
        else:
            defaults[f"_default_{field.name}"] = field.default
            params.append(f"{field.name}=_default_{field.name}")
        body.append(f"    fields[{field.name!r}] = {field.name}")
    source = "\n".join([f"def __init__(self, {', '.join(params)}):", "    fields = self.__dict__", *body, ""])
    namespace: dict[str, object] = {}
    exec(source, defaults, namespace)  # as dataclasses itself builds __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    init.__module__ = cls.__module__  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return cls
