"""The settings of trainer hooks recorded in checkpoints: read from their constructors
(:func:`constructor_settings`), gathered per hook (:func:`hook_settings`) and compared on
resume (:func:`compare_hook_settings`), so that a resume with other values is refused."""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from epochtrain.checkpoint_save import jsonable

if TYPE_CHECKING:
    from epochtrain.trainer.hooks import TrainerHook

__all__ = [
    "compare_hook_settings",
    "constructor_defaults",
    "constructor_settings",
    "hook_setting_defaults",
    "hook_settings",
]


def constructor_settings(obj: object, *, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The arguments of ``obj``'s constructor that it keeps as attributes of the same name
    (``self.max_norm = max_norm``), read from the signature of ``type(obj).__init__``.

    Names in ``exclude`` and values JSON cannot hold exactly (callables, tensors, NaN) are
    left out, so the result can be written to a manifest and compared after reading it back.
    """
    attrs: dict[str, Any] = vars(obj) if hasattr(obj, "__dict__") else {}
    kept = {name: attrs[name] for name, _ in _init_parameters(obj) if name in attrs}
    return jsonable({name: value for name, value in kept.items() if name not in exclude})


def constructor_defaults(obj: object) -> dict[str, Any]:
    """The declared defaults of ``obj``'s constructor arguments (JSON values only)."""
    return jsonable(
        {
            name: param.default
            for name, param in _init_parameters(obj)
            if param.default is not param.empty
        }
    )


def _init_parameters(obj: object) -> list[tuple[str, inspect.Parameter]]:
    try:
        params = inspect.signature(type(obj).__init__).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return []
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [(name, p) for name, p in params.items() if name != "self" and p.kind in plain]


def _labels(hooks: Sequence[TrainerHook]) -> list[str]:
    """Each hook's class name; ``Name[i]`` (``i`` from 0) for a class registered twice."""
    names = [type(hook).__qualname__ for hook in hooks]
    total, seen = Counter(names), Counter[str]()
    labels = []
    for name in names:
        labels.append(name if total[name] == 1 else f"{name}[{seen[name]}]")
        seen[name] += 1
    return labels


def hook_settings(hooks: Sequence[TrainerHook]) -> dict[str, dict[str, Any]]:
    """``{label: hook.resume_settings()}`` for every hook in registration order; the label
    is the hook's class name (``Name[i]`` for the ``i``-th of a class registered twice)."""
    return {
        label: jsonable(hook.resume_settings())
        for label, hook in zip(_labels(hooks), hooks, strict=True)
    }


def hook_setting_defaults(hooks: Sequence[TrainerHook]) -> dict[str, dict[str, Any]]:
    """The :func:`constructor_defaults` of every hook, labelled as by :func:`hook_settings`:
    a setting a checkpoint lacks (written before the hook had it) counts as unchanged
    while it is at its default."""
    return {
        label: constructor_defaults(hook) for label, hook in zip(_labels(hooks), hooks, strict=True)
    }


def compare_hook_settings(
    hooks: Sequence[TrainerHook], saved: Mapping[str, Mapping[str, Any]]
) -> None:
    """Raise ``SettingsMismatchError`` listing every setting of ``hooks`` that differs from
    ``saved`` (a checkpoint's :func:`hook_settings`), naming the hook, the setting, both
    values and the constructor call that matches the checkpoint.

    A setting ``saved`` lacks (the hook gained it later) counts as unchanged while it is at
    its constructor default; ``saved`` of other hooks (another list) is left to the state
    check, which names both lists.
    """
    from epochtrain.trainer.params import SettingsMismatchError, differing_settings

    own, defaults = hook_settings(hooks), hook_setting_defaults(hooks)
    if list(own) != list(saved):
        return
    names, differing, fixes = [], [], []
    for label, settings in own.items():
        changed = differing_settings(settings, saved[label], defaults[label])
        names += [f"hooks.{label}.{key}" for key, _, _ in changed]
        differing += [f"{label}.{key}: saved {then!r}, now {now!r}" for key, then, now in changed]
        arguments = dict.fromkeys(key.partition(".")[0] for key, _, _ in changed)  # nested
        if arguments:
            args = ", ".join(f"{name}={saved[label].get(name)!r}" for name in arguments)
            fixes.append(f"{label.partition('[')[0]}({args})")
    if differing:
        detail = "; ".join(differing)
        raise SettingsMismatchError(
            f"the checkpoint was written by a run with other hook settings ({detail}): build "
            f"the hooks as the checkpointed run did ({', '.join(fixes)}), or start a new run; "
            "nothing was restored",
            names,
            detail,
        )
