"""sdaccel.core.names: a room's public names, imported on first use from the module its table
names, and kept; its modules reached as modules; nothing else."""

from __future__ import annotations

import sys
import types

import pytest

from sdaccel.core.names import lazy_names


@pytest.fixture
def package(monkeypatch):
    """A package ``fakeroom`` with one module, ``fakeroom.things``, defining ``answer``."""
    room = types.ModuleType("fakeroom")
    room.__path__ = []
    things = types.ModuleType("fakeroom.things")
    things.answer = 42
    monkeypatch.setitem(sys.modules, "fakeroom", room)
    monkeypatch.setitem(sys.modules, "fakeroom.things", things)
    room.__getattr__, room.__dir__ = lazy_names("fakeroom", {"answer": "things"}, modules=["things"])
    return room


def test_a_public_name_is_looked_up_in_its_module_and_kept(package):
    assert "answer" not in vars(package)
    assert package.answer == 42
    assert vars(package)["answer"] == 42


def test_a_module_of_the_room_is_that_module(package):
    assert package.things is sys.modules["fakeroom.things"]


def test_any_other_name_is_missing(package):
    with pytest.raises(AttributeError, match="nothing"):
        assert package.nothing is None


def test_dir_lists_the_public_names_and_modules(package):
    assert {"answer", "things"} <= set(dir(package))


def test_a_name_may_not_be_a_module_too():
    with pytest.raises(ValueError, match="things"):
        lazy_names("fakeroom", {"things": "things"}, modules=["things"])
