"""The one registry mechanism behind kernels, field kinds, families and experiments."""

import pytest

import efa
from efa.core.families import FAMILIES
from efa.core.fields import FIELD_KINDS
from efa.core.registry import Registry, UnknownName


def test_every_plug_in_set_is_one_kind_of_registry():
    from experiments import EXPERIMENTS

    for registry in (efa.KERNELS, FIELD_KINDS, FAMILIES, EXPERIMENTS):
        assert isinstance(registry, Registry)
    assert {"softmax", "linear", "cme"} <= set(efa.KERNELS)
    assert set(FIELD_KINDS) == {"category", "value", "attribute"}
    assert "synthetic" in EXPERIMENTS


def test_register_lookup_and_refusals():
    reg = Registry("widget", key=lambda cls: cls.label)

    @reg.register
    class A:
        label = "a"

    assert reg["a"] is A and reg.lookup("a") is A and list(reg) == ["a"] and len(reg) == 1
    assert "b" not in reg and reg.get("b") is None and {"x": 1} not in reg
    with pytest.raises(UnknownName, match=r"unknown widget 'b'; expected one of \['a'\]") as err:
        reg.lookup("b")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    assert str(err.value).startswith("unknown widget")  # not quoted as KeyError's str is

    class Other:
        label = "a"

    with pytest.raises(ValueError, match="widget name 'a' is already registered by"):
        reg.register(Other)
    assert reg["a"] is A

    def rerun():  # the same definition run again (a notebook cell) replaces its old self
        class A:
            label = "a"
        return A

    first = reg.register(rerun(), name="c")
    second = reg.register(rerun(), name="c")
    assert reg["c"] is second is not first
    assert reg.unregister("c") is second and "c" not in reg
    with pytest.raises(TypeError, match="needs a non-empty string name"):
        reg.register(object(), name="")
    with pytest.raises(TypeError, match="needs a name"):
        Registry("thing").register(A)


def test_unknown_names_in_configs_name_the_choices():
    from efa.core.families import family_from_config
    from efa.core.fields import field_from_config

    with pytest.raises(ValueError, match=r"unknown field kind 'nope'; expected one of \["):
        field_from_config({"kind": "nope"})
    with pytest.raises(ValueError, match=r"unknown family 'nope'; expected one of \["):
        family_from_config({"family": "nope"})
    with pytest.raises(ValueError, match=r"unknown attention kernel 'nope'; expected one of"):
        efa.EFAConfig([efa.Category("x", 3)], attention="nope")
