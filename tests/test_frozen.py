"""``rules.frozen.fast_init``: the values a lock operation builds are made by
an ``__init__`` of their own, and stay the frozen dataclasses they were."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from django_dlock.backends.results import LockRow, Refusal, Released, Renewed, Taken
from django_dlock.rules import ReleaseResult
from django_dlock.rules.claim import Claim
from django_dlock.rules.frozen import fast_init

pytestmark = pytest.mark.vendor_independent


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    first: int
    second: str = "two"
    third: int | None = dataclasses.field(default=None, kw_only=True)


@dataclasses.dataclass(frozen=True, slots=True)
class Twin:  # Sample, with the dataclass's own __init__
    first: int
    second: str = "two"
    third: int | None = dataclasses.field(default=None, kw_only=True)


def parameters(cls: type) -> list[tuple[str, object, object]]:
    """``cls.__init__``'s parameters: name, kind and default (not annotations)."""
    found = inspect.signature(vars(cls)["__init__"]).parameters.values()
    return [(each.name, each.kind, each.default) for each in found]


def dataclass_parameters(cls: type) -> list[tuple[str, object, object]]:
    """The parameters the dataclass's own ``__init__`` takes, of its fields."""
    keyword, positional = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
    return [("self", positional, inspect.Parameter.empty)] + [
        (
            field.name,
            keyword if field.kw_only else positional,
            inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default,
        )
        for field in dataclasses.fields(cls)
    ]


def test_its_init_takes_what_the_dataclasses_does() -> None:
    assert parameters(Sample) == parameters(Twin)
    for cls in (Sample, LockRow, Refusal, Released, Renewed, Taken, Claim):
        assert parameters(cls) == dataclass_parameters(cls)
    assert Sample(1) == Sample(first=1, second="two", third=None)
    assert (Sample(1, "b", third=3).first, Sample(1, "b", third=3).third) == (1, 3)
    with pytest.raises(TypeError):
        Sample(1, "b", 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample()  # type: ignore[call-arg]


def test_it_stays_a_frozen_dataclass() -> None:
    released = Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
    with pytest.raises(dataclasses.FrozenInstanceError):
        released.owner = "someone"  # type: ignore[misc]
    assert dataclasses.replace(released, owner="o").owner == "o"
    assert pickle.loads(pickle.dumps(released)) == released  # noqa: S301 - its own
    assert hash(Sample(1)) == hash(Sample(1))
    assert repr(Sample(1)) == "Sample(first=1, second='two', third=None)"


def test_it_refuses_what_it_cannot_make() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithoutSlots:
        value: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithAFactory:
        values: list[int] = dataclasses.field(default_factory=list)

    for cls in (WithoutSlots, WithAFactory):
        with pytest.raises(TypeError):
            fast_init(cls)
