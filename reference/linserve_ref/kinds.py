"""The reference's layer kinds, by role, in the order of the one list of kinds
(model/layers/kind_list.inc, whose `file` column names each kind's module here): adding a kind is
its module, declaring KIND (kind.Kind), and its line in that list."""

import importlib
import os
import re

_LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "model",
                     "layers", "kind_list.inc")
_LINE = re.compile(r"^LINSERVE_(MIXER|NORM|MLP)\(([A-Za-z0-9]+), ([a-z0-9_]+)\)$")
_KINDS = None


def _load():
    global _KINDS
    if _KINDS is None:
        kinds = {"mixer": {}, "norm": {}, "mlp": {}}
        with open(_LIST, encoding="utf-8") as f:
            for line in f:
                m = _LINE.match(line.strip())
                if m is None:
                    continue
                kind = importlib.import_module(f"linserve_ref.{m.group(3)}").KIND
                if kind.role != m.group(1).lower() or kind.name != m.group(3):
                    raise ValueError(f"{_LIST}: {line.strip()} declares {kind.role} {kind.name!r}")
                kinds[kind.role][kind.name] = kind
        _KINDS = kinds
    return _KINDS


def by_role(role):
    """{name: Kind} of `role` ("mixer", "norm", "mlp"), in the list's order."""
    return _load()[role]


def find(role, name):
    """The Kind `name` of `role`; KeyError when there is none."""
    return _load()[role][name]
