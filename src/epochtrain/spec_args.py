"""Command-line options generated from the run spec's dataclasses, shared by the commands
that build runs (``train``, ``config``, ``sweep``): ``--algo``, ``--env``, ``--config``,
``--set`` and one flag per top-level, trainer and buffer setting, and the settings table of
``--help``."""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from epochtrain.registry import ALGORITHMS

__all__ = [
    "add_spec_options",
    "arg_type",
    "check_given_once",
    "check_text",
    "default_text",
    "flag_help",
    "flag_words",
    "parse_set_options",
    "parse_value_of",
    "resolve_spec",
    "setting_flags",
    "setting_key",
    "setting_type",
    "settings_help",
    "spec_flags",
]


_NOT_FLAGS = frozenset({"algo", "env_id", "config", "trainer", "buffer", "logging"})
"""RunSpec fields without a flag or a line of their own: ``--algo`` and ``--env`` choose the
first two, the others are sections of settings."""


def spec_flags() -> dict[str, tuple[str, Any]]:
    """Flags derived from the spec's fields: option name -> (setting name, field info).

    Every top-level field of RunSpec, every trainer parameter and every buffer setting gets
    ``--name``; the algorithm's own config fields (which depend on ``--algo``) go through
    ``--set``. ``resume_from`` is ``train --resume`` and ``logdir`` is the CLI's own.
    """
    from epochtrain.config import fields_info
    from epochtrain.spec import BufferSpec, RunSpec
    from epochtrain.trainer.params import OfflineParams, OffpolicyParams, OnpolicyParams

    skip = {*_NOT_FLAGS, "resume_from"}
    flags: dict[str, tuple[str, Any]] = {}
    sources: list[tuple[str, type[Any]]] = [
        ("", RunSpec),
        ("trainer.", OnpolicyParams),
        ("trainer.", OffpolicyParams),
        ("trainer.", OfflineParams),
        ("buffer.", BufferSpec),
    ]
    for prefix, cls in sources:
        for info in fields_info(cls):
            if info.name in skip or info.name in {f.replace("-", "_") for f in flags}:
                continue
            flags[info.name.replace("_", "-")] = (prefix + info.name, info)
    return flags


_SETTING_NAME = re.compile(r"\b(?:trainer\.|buffer\.)?([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(?![(.='])")


def setting_flags() -> dict[str, str]:
    """``{setting name: option}`` of every setting that has a flag, e.g.
    ``{"trainer.step_per_epoch": "--step-per-epoch", "seed": "--seed", ...}``."""
    return {name: f"--{flag}" for flag, (name, _) in spec_flags().items()}


def flag_words(message: str) -> str:
    """``message`` (a spec or trainer error, in the Python API's words) for a command-line
    user: the first mention of each setting that has a flag is followed by the flag,
    ``"buffer_size must be given"`` -> ``"buffer_size (--buffer-size) must be given"``."""
    flag_of = {name.rpartition(".")[2]: flag for name, flag in setting_flags().items()}
    seen: set[str] = set()

    def with_flag(match: re.Match[str]) -> str:
        name = match.group(1)
        flag = flag_of.get(name)
        if flag is None or name in seen or flag in message:
            return match.group(0)
        seen.add(name)
        return f"{match.group(0)} ({flag})"

    return _SETTING_NAME.sub(with_flag, message)


DEFAULT_ENV = "CartPole-v1"
"""The env of ``train``/``config`` without ``--env``, ``--config`` or ``--resume``."""


def add_spec_options(parser: argparse.ArgumentParser) -> None:
    """``--algo``, ``--env``, ``--config``, ``--set`` and one flag per spec field."""
    parser.add_argument(
        "--algo",
        choices=sorted(ALGORITHMS),
        default=None,
        help="algorithm to train (required unless --config names it)",
    )
    parser.add_argument(
        "--env",
        default=None,
        help=f"gymnasium env id (default: {DEFAULT_ENV}, or the env of --config or --resume)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a run spec file (.toml or .json) to start from",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set any setting (see the list below), e.g. --set lr=3e-4 "
        "--set trainer.batch_size=128 --set hidden=[64,64]",
    )
    for flag, (name, info) in spec_flags().items():
        if info.type is bool:
            parser.add_argument(
                f"--{flag}",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=flag_help(name, info),
            )
            continue
        parser.add_argument(
            f"--{flag}",
            type=arg_type(info.type),
            default=argparse.SUPPRESS,  # absent unless given: `--stop-at none` is a value
            metavar=flag.replace("-", "_").upper(),
            help=flag_help(name, info),
        )


def default_text(name: str, info: Any) -> str:
    """The default of setting ``name`` as ``--help`` shows it: the field's (a None as
    ``none``, as ``--set`` writes it), or the words of :data:`~epochtrain.spec.ENV_DEFAULTS`
    for a top-level setting whose default is the env's (``stop_at``)."""
    from epochtrain.spec import ENV_DEFAULTS

    if name in ENV_DEFAULTS:
        return ENV_DEFAULTS[name]
    value = list(info.default) if isinstance(info.default, tuple) else info.default
    return "none" if value is None else repr(value)


def flag_help(name: str, info: Any) -> str:
    """The help of the flag of setting ``name``: the field's help, then the values it
    allows; a top-level setting's adds its default (a trainer or buffer setting's default
    depends on the algorithm: the settings list and ``epochtrain config`` show it)."""
    if info.type is bool:
        return str(info.help)
    if "." in name:
        return f"{info.help} ({info.allowed})"
    return f"{info.help} ({info.allowed}; default: {default_text(name, info)})"


def arg_type(tp: Any) -> Callable[[str], Any]:
    """The argparse ``type`` of a field: int and float fields parse (so ``--seed x`` is a
    usage error naming the option); ``none`` stands for None where the field allows it
    (``--checkpoint-dir none`` is no checkpoints, not a directory named ``none``); anything
    else stays text for the spec's validator."""
    import types
    import typing

    args = (
        typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    )
    number: Callable[[str], Any] = next((a for a in args if a in (int, float)), str)

    def parse(text: str) -> Any:
        if text.lower() == "none" and type(None) in args:
            return None
        return number(text)

    parse.__name__ = getattr(number, "__name__", "value")  # argparse names it in its error
    return parse


def settings_help() -> str:
    """Every setting of a run spec, with its default and help: the ``--help`` epilog."""
    from epochtrain.config import fields_info
    from epochtrain.registry import ALGORITHMS
    from epochtrain.spec import BufferSpec, LogSpec, RunSpec
    from epochtrain.trainer.params import OfflineParams, OffpolicyParams, OnpolicyParams

    def block(title: str, cls: Any, prefix: str) -> list[str]:
        lines = [title]
        for info in fields_info(cls):
            if cls is RunSpec and info.name in _NOT_FLAGS:
                continue
            default = default_text(prefix + info.name, info)
            lines.append(f"  {prefix}{info.name} = {default}  [{info.allowed}] {info.help}")
        return lines

    out = [
        "settings (--set NAME=VALUE; NAME is dotted, e.g. trainer.batch_size, or a bare name "
        "found in one place; VALUE is a TOML literal or none). Each shows its class default: "
        "a setting that no flag, --set or --config file gives takes the tuned spec's value "
        "(the algorithm's general setting and its preset for the env), which `epochtrain "
        "config --algo A --env E` prints:"
    ]
    out += block("run:", RunSpec, "")
    out += block("trainer (on-policy algorithms):", OnpolicyParams, "trainer.")
    out += block("trainer (off-policy algorithms):", OffpolicyParams, "trainer.")
    out += block("trainer (offline algorithms):", OfflineParams, "trainer.")
    out += block("buffer:", BufferSpec, "buffer.")
    out += block("logging:", LogSpec, "logging.")
    for name, entry in sorted(ALGORITHMS.items()):
        out += block(
            f"config of {name} ({entry.config_cls.__name__}):", entry.config_cls, "config."
        )
    out.append(
        "`epochtrain config --algo A --env E` prints the resolved spec with the tuned preset."
    )
    return "\n".join(out)


def resolve_spec(args: argparse.Namespace, resumed: Any = None) -> Any:
    """The run spec of ``train``/``config``: the base, then flags, then ``--set``.

    The base is the ``--config`` file, else ``resumed`` (the spec a ``--resume`` checkpoint
    holds), else the tuned preset of ``--algo`` on ``--env`` (default CartPole-v1). An
    ``--algo`` or ``--env`` that differs from a file's or checkpoint's is refused. A flag
    the algorithm has no setting for, a ``--set`` value its setting cannot hold, and a
    setting given twice (``--seed 1 --set seed=2``, ``--set lr=1 --set config.lr=2``:
    :func:`check_given_once`) are refused naming the options as typed
    (``--update-per-step``, ``--set seed=-1``).
    """
    from epochtrain.spec import RunSpec

    items = [_split_set(item) for item in args.set]  # a malformed --set before anything
    if args.config is not None or resumed is not None:
        spec = RunSpec.from_file(args.config) if args.config is not None else resumed
        source = f"--config {args.config}" if args.config is not None else "the checkpoint"
        for option, given, own in (
            ("--algo", args.algo, spec.algo),
            ("--env", args.env, spec.env_id),
        ):
            if given is not None and given != own:
                raise ValueError(
                    f"{option} {given} differs from the {option[2:]} {own!r} of {source}: "
                    f"drop {option} (or give {option} {own})"
                )
    else:
        if args.algo is None:
            raise ValueError("--algo is required (or give --config FILE naming one)")
        spec = RunSpec.tuned(args.algo, args.env or DEFAULT_ENV)
    overrides: dict[str, Any] = {}
    typed: list[tuple[str, str]] = []  # (setting, option as typed), for check_given_once
    for flag, (name, info) in spec_flags().items():
        attr = flag.replace("-", "_")
        if info.type is bool:  # a BooleanOptionalAction: None unless given
            if getattr(args, attr) is not None:
                overrides[name] = getattr(args, attr)
        elif hasattr(args, attr):  # given, None included (`--stop-at none`)
            overrides[name] = getattr(args, attr)
        if name in overrides:
            _check_flag_setting(spec, flag, name)
            if isinstance(overrides[name], str):  # a path, a device: into the spec file
                check_text(f"--{flag} ", overrides[name])
            no = "no-" if overrides[name] is False and info.type is bool else ""
            typed.append((name, f"--{no}{flag}"))
    check_given_once([*typed, *((name, f"--set {name}={text}") for name, text in items)], spec)
    settings: dict[str, Any] = {}
    for name, text in items:
        settings[name] = parse_value_of(name, text, spec)
        _check_set_value(spec, name, text, settings[name])
    return spec.with_overrides({**overrides, **settings})


def _check_flag_setting(spec: Any, flag: str, name: str) -> None:
    """``ValueError`` naming ``--flag`` when ``spec``'s algorithm has no setting ``name``
    (a trainer setting of the other kind of algorithm: ``--update-per-step`` for ppo)."""
    from epochtrain.spec_data import algorithms_with

    try:
        spec.resolve_name(name)
    except ValueError:
        section, _, field = name.rpartition(".")
        others = algorithms_with(section, field)
        whose = f"of {', '.join(map(repr, others))}" if others else "of other algorithms"
        raise ValueError(
            f"--{flag}: {field!r} is a {section or 'run'} setting {whose}, not of "
            f"{spec.algo!r}: drop --{flag}"
        ) from None


def _check_set_value(spec: Any, name: str, text: str, value: Any) -> None:
    """The ``TypeError``/``ValueError`` of a ``--set NAME=TEXT`` whose ``value`` its setting
    cannot hold (type, range, NaN), in the words typed and with the literal to write; the
    rules between settings are the spec's, judged once every option is applied."""
    from epochtrain.config import check_value

    try:
        section, field = spec.resolve_name(name)
    except ValueError:
        return  # with_overrides names it, with the close matches
    owner = spec if section is None else getattr(spec, section)
    try:
        check_value(type(owner), field, value)
    except (TypeError, ValueError) as exc:
        message = str(exc).removeprefix(f"{type(owner).__name__}.{field} ")
        message = message.rpartition(f": set {field} ")[0] or message
        message = message.replace(repr(value), _shown(repr(value)))
        tp = setting_type(name, spec)
        parts = [p.strip() for p in text.split(",")] if _names_type(tp) is not None else []
        if len(parts) > 1:  # `loggers=jsonl,csv`: a list, written as TOML writes one
            hint = f"write a list: --set {name}={json.dumps(parts, ensure_ascii=False)}"
        else:
            message += _name_hint(value, tp)
            hint = _literal_hint(name, text, tp, owner, field)
        raise type(exc)(f"--set {name}={_shown(text)}: {message}: {_shown(hint)}") from None


_SHOWN_CHARS = 60
"""How much of a long value an error message repeats: the rest is counted, not printed."""


def _shown(text: str) -> str:
    """``text`` as an error message repeats it: a long one (a path pasted twice, a file's
    contents) cut to its start and its length, so that the message stays one short line."""
    if len(text) <= _SHOWN_CHARS + 20:
        return text
    return f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"


def _name_hint(value: Any, tp: Any) -> str:
    """`` (did you mean 'jsonl'?)`` for a text in ``value`` (or in its list) that is none of
    the names setting type ``tp`` allows (a ``Literal``, or a list of one) but close to one
    of them; else ``""``."""
    import typing

    from epochtrain.suggestions import close_matches

    names = [a for a in typing.get_args(_names_type(tp) or tp) if isinstance(a, str)]
    texts = value if isinstance(value, list | tuple) else [value]
    for text in texts:
        if names and isinstance(text, str) and text not in names:
            hint = close_matches(text, names)
            if hint:
                return hint
    return ""


def _literal_hint(name: str, text: str, tp: Any, owner: Any, field: str) -> str:
    """How to write a value of type ``tp`` for ``--set NAME=``: ``write true or false``,
    or an example (the setting's value now, else its class default)."""
    import dataclasses

    from epochtrain.spec_data import toml_value
    from epochtrain.spec_files import value_kinds

    kinds = value_kinds(tp)
    if kinds == {bool}:
        return f"write --set {name}=true or --set {name}=false"
    default = next(f.default for f in dataclasses.fields(owner) if f.name == field)
    plain = (bool, int, float, str, tuple)
    example = next((v for v in (getattr(owner, field), default) if isinstance(v, plain)), None)
    quoted = text.startswith(("'", '"')) and kinds & {int, float, tuple}
    words = "write it without quotes, " if quoted else ""
    if example is None:
        return f"{words}see the settings list of --help"
    literal = example if isinstance(example, str) else toml_value(example)
    return f"{words}e.g. --set {name}={literal}"


_CHOSEN_BY_FLAG = {"algo": "--algo", "env_id": "--env"}
"""Spec fields a ``--set`` cannot change: the run is built for them, by these options."""


def _split_set(item: str) -> tuple[str, str]:
    """``(NAME, TEXT)`` of ``--set NAME=TEXT``; ``ValueError`` for an item without ``=`` or
    a name, a name nested deeper than ``section.name``, text that is not UTF-8 (it could
    not be written to the run's spec file), and for ``algo`` or ``env_id``, naming the
    option that chooses them."""
    name, eq, text = (part.strip() for part in item.partition("="))
    if not eq or not name:
        raise ValueError(f"--set {_shown(item)!r}: write --set NAME=VALUE, e.g. --set lr=3e-4")
    check_text("--set ", name)
    check_text(f"--set {name}=", text)
    if name.count(".") > 1:
        section, _, field = name.partition(".")
        raise ValueError(
            f"--set {_shown(name)}={_shown(text)}: a setting is named NAME or SECTION.NAME "
            f"(one dot: {section}.{field.partition('.')[0]}); no setting holds a table"
        )
    if name in _CHOSEN_BY_FLAG:
        flag = _CHOSEN_BY_FLAG[name]
        raise ValueError(f"--set {name}={text}: {name} cannot be set; choose it with {flag} {text}")
    return name, text


def parse_set_options(items: Sequence[str], spec: Any = None) -> dict[str, Any]:
    """``{name: value}`` of ``--set NAME=VALUE`` options, each value read for its setting's
    type (:func:`parse_value_of`: in ``spec``, a :class:`~epochtrain.spec.RunSpec`, when
    given); ``ValueError`` for an item without ``=``, for a setting given twice
    (:func:`check_given_once`), and for ``algo`` or ``env_id``, naming the option that
    chooses them."""
    pairs = [_split_set(item) for item in items]
    check_given_once([(name, f"--set {name}={text}") for name, text in pairs], spec)
    return {name: parse_value_of(name, text, spec) for name, text in pairs}


def check_text(option: str, text: str) -> None:
    """``ValueError`` naming ``option`` when ``text`` (a command-line word) is not UTF-8:
    bytes the shell passed undecoded (``$'a\\xff'``) would stop the run when its spec
    file or logs are written, after its directory was made."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ValueError(
            f"{option}{_shown(shown)} is not UTF-8 text: write it in UTF-8 "
            "(names, paths and values are stored in the run's spec file)"
        ) from None


def check_given_once(options: Sequence[tuple[str, str]], spec: Any = None) -> None:
    """``ValueError`` when two of ``options``, ``(setting name, the option as typed)``
    pairs (``("seed", "--seed")``, ``("lr", "--set lr=3e-4")``), set one setting
    (:func:`setting_key`: ``lr`` and ``config.lr`` are one), naming both: which one a
    command keeps would otherwise be a rule to remember (a spec file that names a key
    twice is refused too)."""
    seen: dict[str, str] = {}
    for name, typed in options:
        key = setting_key(name, spec)
        if key in seen:
            raise ValueError(
                f"{_shown(typed)}: {key} is given twice (also by {_shown(seen[key])}): "
                "give each setting once"
            )
        seen[key] = typed


def setting_key(name: str, spec: Any = None) -> str:
    """The dotted name of setting ``name`` (``config.lr`` for ``lr``, ``seed`` for a
    top-level one): in ``spec`` (a :class:`~epochtrain.spec.RunSpec`) when given, else
    the one section of any algorithm's that has a field ``name``; ``name`` itself when it
    is no setting, or names one in several sections."""
    from epochtrain.config import fields_info
    from epochtrain.spec import RunSpec

    if spec is not None:
        try:
            section, field = spec.resolve_name(name)
        except ValueError:
            return name  # unknown or ambiguous: with_overrides names it
        return field if section is None else f"{section}.{field}"
    if "." in name or name in {info.name for info in fields_info(RunSpec)}:
        return name
    found = {
        section
        for section, classes in _tables().items()
        for cls in classes
        if any(info.name == name for info in fields_info(cls))
    }
    return f"{found.pop()}.{name}" if len(found) == 1 else name


def parse_value_of(name: str, text: str, spec: Any = None) -> Any:
    """The value ``text`` of setting ``name``, read by
    :func:`~epochtrain.spec_files.parse_value` for the setting's type
    (:func:`setting_type`): ``--set lr=.001`` is 0.001, ``--set logging.logdir=2024-01-01``
    the text ``'2024-01-01'``, ``--set normalize_advantage=False`` False. A list of names
    also takes a bare name as a list of one: ``--set logging.loggers=jsonl`` is
    ``["jsonl"]`` (a list of numbers does not: ``--set hidden=64`` stays refused, as one
    layer is rarely what is meant)."""
    from epochtrain.spec_files import parse_value

    tp = setting_type(name, spec)
    value = parse_value(text, tp)
    if isinstance(value, str) and value and _names_type(tp) is not None:
        return [value]
    return value


def _names_type(tp: Any) -> Any:
    """The element type of a list-of-names setting type ``tp`` (``tuple[LoggerName, ...]``,
    ``tuple[str, ...]``, optionally ``| None``): a ``Literal`` of texts or ``str``; else
    None."""
    import types
    import typing

    from epochtrain.spec_files import value_kinds

    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        found = [e for arg in typing.get_args(tp) if (e := _names_type(arg)) is not None]
        return found[0] if len(found) == 1 else None
    if typing.get_origin(tp) is not tuple:
        return None
    elem = typing.get_args(tp)[0]
    return elem if value_kinds(elem) == {str} else None


def setting_type(name: str, spec: Any = None) -> Any:
    """The type of setting ``name`` (``float`` for ``lr``, ``str | None`` for
    ``logging.logdir``): its field's in ``spec`` (a :class:`~epochtrain.spec.RunSpec`) when
    given, else wherever a field of that name is (any algorithm's), if they all have one
    type; None for a name that is no setting, or whose type differs between algorithms."""
    import typing

    from epochtrain.config import fields_info
    from epochtrain.spec import RunSpec

    if spec is not None:
        try:
            section, field = spec.resolve_name(name)
        except ValueError:
            return None
        owner = type(spec if section is None else getattr(spec, section))
        return typing.get_type_hints(owner)[field]
    tables = _tables()
    section, _, field = name.rpartition(".")
    if not section and field in tables:
        return None  # a table, not a setting
    every: list[type[Any]] = [RunSpec, *itertools.chain(*tables.values())]
    classes = tables.get(section, []) if section else every
    found = {info.type for cls in classes for info in fields_info(cls) if info.name == field}
    return found.pop() if len(found) == 1 else None


def _tables() -> dict[str, list[type[Any]]]:
    """The classes whose fields each section of a spec holds, over every algorithm's."""
    from epochtrain.spec import BufferSpec, LogSpec

    return {
        "config": [entry.config_cls for entry in ALGORITHMS.values()],
        "trainer": [entry.params_cls for entry in ALGORITHMS.values()],
        "buffer": [BufferSpec],
        "logging": [LogSpec],
    }
