"""The one validator: rule tables, and the check that reads them.

A :class:`Rule` says what one input accepts: its type (``int``, ``float``, ``bool``,
``str``), a range or a set of choices, its unit, its default (or, in words, how the
default follows other inputs) and the fix to suggest when a value is refused.  A rule
table maps names to rules: dotted scenario keys (``"topology.link_gbps"``), or the
``--flags`` of a command's own run options.  :func:`check` reads one value against its
rule and :func:`check_section` a TOML table against its rules; a flag map
(``{"simulation.dt_us": "--dt-us"}``) says which command-line flag a key's value came
from, so that the error names what the user typed.  Every refusal is one
:class:`ScenarioError` that names the key (or the flag), the value, the rule and the
fix::

    scenario key 'topology.link_gbps': must be a number > 0 (Gb/s); got -100.0
    --dt-us must be a number > 0 (us); got 0.0

Checks between keys (a job larger than the cluster, a flag that needs another) raise
the same error through :func:`refuse`, naming the key or flag to change.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["Rule", "ScenarioError", "REQUIRED", "integer", "number", "one_of", "boolean",
           "text", "describe", "check", "check_section", "check_args", "refuse", "flag_map",
           "arg_name"]


class _Required:
    def __repr__(self):
        return "REQUIRED"


#: The default of a rule whose key must be given.
REQUIRED = _Required()


class ScenarioError(ValueError):
    """An input the study refuses: a scenario key (dotted, ``"workload.background_load"``)
    or a command-line flag.

    Attributes:
      key: the dotted scenario key, or the flag of a run option.
      msg: what is wrong (the rule, the value), without the fix.
      value: the refused value (``None`` where there is none, a missing key).
      rule: the :class:`Rule` it broke, ``None`` for a check between keys.
      fix: what to change, in words ("" where the rule says it all).
      flag: the command-line flag the value came from (``None``: a scenario file or a
        Python call); the message then names the flag.
    """

    def __init__(self, key: str, msg: str, *, value: Any = None, rule: Rule | None = None,
                 fix: str = "", flag: str | None = None):
        self.key, self.msg, self.value, self.rule = key, msg, value, rule
        self.fix, self.flag = fix, flag
        if flag:
            where = flag + (" " if msg.startswith("must ") else ": ")
        else:
            where = f"scenario key '{key}': "
        super().__init__(where + msg + (f"; {fix}" if fix else ""))


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one input accepts (see the module docstring).

    Attributes:
      type: ``"int"``, ``"float"``, ``"bool"`` or ``"str"``.
      lo, hi: the range of a number (``None``: unbounded); ``lo_open`` / ``hi_open``
        exclude the bound itself.
      choices: the accepted values (``None``: any value of the type and range).
      also: values accepted besides the type and range (``"all"`` next to a count).
      many: a list of such values, at least ``min_items`` (on a command line, separated
        by commas).
      unit: the unit of a number, as the key's name spells it (``"Gb/s"``, ``"us"``).
      default: the value when the key is not given (:data:`REQUIRED`: it must be).
      derived: how the default follows other keys, in words ("" : a fixed default).
      fix: what to change when a value is refused, in words.
    """

    type: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple | None = None
    also: tuple = ()
    many: bool = False
    min_items: int = 1
    unit: str = ""
    default: Any = REQUIRED
    derived: str = ""
    fix: str = ""


def integer(lo=None, hi=None, **kw) -> Rule:
    """An integer in ``[lo, hi]`` (either bound may be ``None``)."""
    return Rule("int", lo, hi, **kw)


def number(lo=None, hi=None, **kw) -> Rule:
    """A finite number in ``[lo, hi]`` (``lo_open`` / ``hi_open`` exclude a bound)."""
    return Rule("float", lo, hi, **kw)


def one_of(choices, **kw) -> Rule:
    """One of ``choices`` (strings)."""
    return Rule("str", choices=tuple(choices), **kw)


def boolean(**kw) -> Rule:
    """``true`` or ``false``."""
    return Rule("bool", **kw)


def text(**kw) -> Rule:
    """Any string."""
    return Rule("str", **kw)


def _range(rule: Rule) -> str:
    lo, hi = rule.lo, rule.hi
    if lo is not None and hi is not None:
        return f" in {'(' if rule.lo_open else '['}{lo:g}, {hi:g}{')' if rule.hi_open else ']'}"
    if lo is not None:
        return f" {'>' if rule.lo_open else '>='} {lo:g}"
    if hi is not None:
        return f" {'<' if rule.hi_open else '<='} {hi:g}"
    return ""


def describe(rule: Rule, *, command_line: bool = False) -> str:
    """What ``rule`` accepts, in words: ``"a number > 0 (Gb/s)"``, ``"one of ['a',
    'b']"``, ``"comma-separated integers in [16, 32768]"`` (``command_line``: a list as
    a flag spells it)."""
    if rule.choices is not None:
        what = (f"{'comma-separated names' if command_line else 'a list of names'} among "
                f"{list(rule.choices)}" if rule.many else f"one of {list(rule.choices)}")
    elif rule.type == "bool":
        what = "true or false"
    elif rule.type == "str":
        what = "a string"
    else:
        noun = {"int": ("an integer", "integers"), "float": ("a number", "numbers")}[rule.type]
        if rule.many:
            what = (f"{'comma-separated ' if command_line else 'a list of '}{noun[1]}"
                    f"{_range(rule)}")
        else:
            what = noun[0] + _range(rule)
        if rule.unit:
            what += f" ({rule.unit})"
    if rule.many and rule.min_items > 1:
        what += f", at least {rule.min_items} of them"
    if rule.also:
        what += " or " + " or ".join(repr(a) for a in rule.also)
    return what


def _one(rule: Rule, val, from_text: bool):
    """``val`` as the rule's type, or ``None`` when it is not one."""
    if rule.type == "bool":
        return val if isinstance(val, bool) else None
    if rule.type == "str":
        if not isinstance(val, str) or (rule.choices is not None and val not in rule.choices):
            return None
        return val
    if from_text and isinstance(val, str):
        try:
            val = int(val) if rule.type == "int" else float(val)
        except ValueError:
            return None
    if isinstance(val, bool) or not isinstance(val, int if rule.type == "int" else (int, float)):
        return None
    if rule.type == "float" and not math.isfinite(val):
        return None
    if rule.lo is not None and (val <= rule.lo if rule.lo_open else val < rule.lo):
        return None
    if rule.hi is not None and (val >= rule.hi if rule.hi_open else val > rule.hi):
        return None
    return val if rule.type == "int" else float(val)


def check(key: str, rule: Rule, value, *, flag: str | None = None):
    """``value`` checked against ``rule``: ints stay ints, numbers become floats, a list
    (``rule.many``) comes back as a list; on a command line (``flag`` given) numbers and
    lists may be text (``"16,32"``).

    Raises:
      ScenarioError: naming ``flag`` (or ``key``), the value and what the rule accepts.
    """
    from_text = flag is not None
    if isinstance(value, str) and value in rule.also:
        return value
    if rule.many:
        items = value
        if from_text and isinstance(value, str):
            items = [x.strip() for x in value.split(",") if x.strip()]
        out = [_one(rule, x, from_text) for x in items] \
            if isinstance(items, (list, tuple)) else [None]
        if len(out) >= rule.min_items and all(x is not None for x in out):
            return out
    else:
        out = _one(rule, value, from_text)
        if out is not None:
            return out
    raise ScenarioError(key, f"must be {describe(rule, command_line=from_text)}; got "
                        f"{value!r}", value=value, rule=rule, fix=rule.fix, flag=flag)


def check_section(section: str, table: dict, body: dict, *, flags: dict | None = None) -> dict:
    """The keys of TOML table ``[section]`` checked against ``table`` (``{key: Rule}``),
    as a new dict; a key missing from ``body`` is left out.

    Raises:
      ScenarioError: ``section.key`` unknown (with the accepted keys), or a bad value.
    """
    flags = flags or {}
    if not isinstance(body, dict):
        raise ScenarioError(section, f"must be a table ([{section}])")
    out = {}
    for key, val in body.items():
        full = f"{section}.{key}"
        if key not in table:
            raise ScenarioError(full, f"unknown key; accepted keys: {sorted(table)}")
        out[key] = check(full, table[key], val, flag=flags.get(full))
    return out


def refuse(key: str, msg: str, *, flags: dict | None = None, value=None,
           fix: str = "") -> ScenarioError:
    """The error of a check between keys, naming ``key`` (or its flag in ``flags``; a
    ``key`` that is a ``--flag`` names itself): ``raise refuse("workload.train_servers",
    "must be <= ...")``."""
    flag = key if key.startswith("--") else (flags or {}).get(key)
    return ScenarioError(key, msg, value=value, fix=fix, flag=flag)


def flag_map(keys, exceptions: dict | None = None) -> dict:
    """``{key: "--flag"}`` for dotted ``keys``: the flag spells the key's last part with
    dashes (``"simulation.dt_us"`` -> ``"--dt-us"``) unless ``exceptions`` names it."""
    exceptions = exceptions or {}
    return {k: exceptions.get(k, "--" + k.rsplit(".", 1)[-1].replace("_", "-")) for k in keys}


def arg_name(flag: str) -> str:
    """argparse's attribute for ``flag`` (``"--dt-us"`` -> ``"dt_us"``)."""
    return flag[2:].replace("-", "_")


def check_args(args, table: dict) -> dict:
    """``{flag: checked value}`` of each ``--flag`` of ``table`` (``{flag: Rule}``) that
    the argparse namespace ``args`` holds (``None``: not given, skipped).

    Raises:
      ScenarioError: naming the flag.
    """
    out = {}
    for flag, rule in table.items():
        value = getattr(args, arg_name(flag), None)
        if value is not None:
            out[flag] = check(flag, rule, value, flag=flag)
    return out
