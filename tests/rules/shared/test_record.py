"""`record` makes the same frozen dataclass as @dataclass(frozen=True), only cheaper to build."""
import dataclasses

import pytest

from webhook.rules.shared.record import record


@record
class Cheap:
    a: str
    b: int | None = None
    c: tuple = ()


@dataclasses.dataclass(frozen=True)
class Plain:
    a: str
    b: int | None = None
    c: tuple = ()


@pytest.mark.parametrize("args, kwargs", [(("x",), {}), (("x", 1), {}), (("x",), {"c": (1,)}), ((), {"a": "x", "b": 2})])
def test_a_record_is_what_the_frozen_dataclass_is(args, kwargs):
    cheap, plain = Cheap(*args, **kwargs), Plain(*args, **kwargs)
    assert dataclasses.astuple(cheap) == dataclasses.astuple(plain)
    assert repr(cheap) == repr(plain).replace("Plain", "Cheap")
    assert cheap == Cheap(*args, **kwargs) and hash(cheap) == hash(Cheap(*args, **kwargs))
    assert dataclasses.replace(cheap, b=7) == Cheap(cheap.a, 7, cheap.c)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cheap.a = "y"


@pytest.mark.parametrize("args, kwargs", [((), {}), (("x", 1, (), 4), {}), (("x",), {"d": 1}), (("x",), {"a": "y"})])
def test_a_record_refuses_what_the_frozen_dataclass_refuses(args, kwargs):
    with pytest.raises(TypeError):
        Plain(*args, **kwargs)
    with pytest.raises(TypeError):
        Cheap(*args, **kwargs)


def test_fields_a_plain_init_cannot_fill_are_refused():
    with pytest.raises(TypeError):
        @record
        class Factory:
            a: list = dataclasses.field(default_factory=list)
