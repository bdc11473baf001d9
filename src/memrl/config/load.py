"""Load a config from YAML plus hydra-style dotted overrides.

``load_config("exp.yaml", ["trainer.lr=1e-6", "data.docs=[50,100]"])``. Keys are
checked against the schema before validation so that an unknown key is
reported with its full dotted path and the nearest valid key.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from memrl.config.aliases import alias_for, note_for
from memrl.config.renames import ALSO, both_given, migrate, moved_key, notice
from memrl.config.section import external_fields
from memrl.io.urls import masked
from memrl.config.schema import FIXED_ON_RESUME, MemRLConfig, check_resume_keys  # noqa: F401 (their old home)


class ConfigError(ValueError):
    """A bad config file, key or value; the message names the offending key."""


def parse_value(text: str) -> Any:
    """Parse the right-hand side of ``key=value``.

    JSON first (numbers incl. ``1e-6``, ``true``, ``null``, ``[50,100]``,
    quoted strings); YAML for flow collections with bare words
    (``[a, b]``); anything else stays a plain string. Bare scalars are never
    YAML-parsed because YAML 1.1 turns ``no``/``on`` into booleans.
    """
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    if stripped[:1] in ("[", "{"):
        try:
            return yaml.safe_load(stripped)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "not valid"
            mark = getattr(exc, "problem_mark", None)
            where = f" at column {mark.column + 1}" if mark is not None else ""
            kind = "list" if stripped[:1] == "[" else "mapping"
            raise ConfigError(f"cannot parse value {text!r} as a {kind}: {problem}{where}") from None
    return text


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside an annotation (``X``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            sub = _submodel(arg)
            if sub is not None:
                return sub
    return None


def all_keys(model: type[BaseModel] = MemRLConfig, prefix: str = "") -> list[str]:
    """Every dotted key the schema accepts (sections and leaves)."""
    keys: list[str] = []
    for name, info in external_fields(model).items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        sub = _submodel(info.annotation)
        if sub is not None:
            keys.extend(all_keys(sub, dotted + "."))
    return keys


def key_for(name: str) -> str | None:
    """memrl's dotted key for a bare or foreign name (``lr``, ``learning_rate``, ``model.name``): another
    library's name for it (:mod:`memrl.config.aliases`), else the one key whose last part it is."""
    alias = alias_for(name)
    if alias is not None:
        return alias
    leaf = name.rsplit(".", 1)[-1]
    matches = [k for k in all_keys() if k.rsplit(".", 1)[-1] == leaf]
    return matches[0] if len(matches) == 1 else None


def _unknown_key_error(dotted: str, model: type[BaseModel], prefix: str) -> ConfigError:
    name = dotted.rsplit(".", 1)[-1]
    alias = alias_for(dotted)
    if alias is not None and alias != dotted:  # another library's name: the nearest spelling would mislead
        return ConfigError(f"unknown config key '{dotted}': did you mean '{alias}'?")
    note = note_for(dotted)
    if note is not None:
        return ConfigError(f"unknown config key '{dotted}': {note}")
    siblings = list(external_fields(model))
    if prefix == "workflow.":  # a misspelt option written flat (workflow.chunk_tokns): the option is meant
        from memrl.plugins import workflow_support

        siblings += [f"options.{k}" for k in sorted(workflow_support("LEGACY_KEYS"))]
        by_leaf = {s.rsplit(".", 1)[-1]: s for s in siblings}
        close = [by_leaf[c] for c in difflib.get_close_matches(name, list(by_leaf), n=1, cutoff=0.5)]
    else:
        close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.5)
    if close:
        hint = f"did you mean '{prefix}{close[0]}'?"
    else:
        # The same leaf may exist in another section (``data.lr`` -> ``trainer.lr``).
        everywhere = [k for k in all_keys() if k.rsplit(".", 1)[-1] == name]
        near = everywhere or difflib.get_close_matches(dotted, all_keys(), n=1, cutoff=0.6)
        if near:  # a leaf of several sections (seed, max_tokens): every one, not the first found
            hint = f"did you mean {' or '.join(repr(k) for k in near)}?"
        else:
            valid = ", ".join(f"{prefix}{s}" for s in external_fields(model))
            hint = f"valid keys here: {valid}"
    return ConfigError(f"unknown config key '{dotted}': {hint}")


def _old_workflow_keys(raw: dict[str, Any]) -> None:
    """A file from before ``workflow.options``: its flat workflow keys moved there (with a notice)."""
    from memrl.plugins import workflow_support

    if isinstance(raw.get("workflow"), dict):
        raw["workflow"] = workflow_support("migrate_workflow_keys")(raw["workflow"])


def check_keys(raw: Any, model: type[BaseModel] = MemRLConfig, prefix: str = "") -> None:
    """Raise :class:`ConfigError` for the first key in ``raw`` the schema lacks."""
    if not isinstance(raw, dict):
        return
    if model is MemRLConfig:
        try:
            _old_workflow_keys(raw)
            migrate(raw)  # keys that moved into nested sections (env.user_model -> env.user.model)
        except ValueError as err:  # an old and a new name of one setting, both given
            raise ConfigError(str(err)) from None
    fields = external_fields(model)
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            raise _unknown_key_error(dotted, model, prefix)
        sub = _submodel(fields[key].annotation)
        if sub is not None and isinstance(value, dict):
            check_keys(value, sub, dotted + ".")


def current_key(key: str) -> str:
    """``key`` under its current name: an old flat key (``trainer.eval_every``, ``workflow.chunk_tokens``)
    as the one it moved to; any other key unchanged."""
    parts = key.split(".")
    if len(parts) != 2:
        return key
    if parts[0] == "workflow" and parts[1] not in ("name", "options"):
        from memrl.plugins import workflow_support

        if parts[1] in workflow_support("LEGACY_KEYS"):  # an old flat key: the option of that name
            return f"workflow.options.{parts[1]}"
    moved = moved_key(parts[0], parts[1])
    return f"{parts[0]}.{moved[0]}.{moved[1]}" if moved is not None else key


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Apply one ``a.b.c=value`` override to the nested dict ``raw`` in place."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} must look like key=value (e.g. trainer.lr=1e-6)")
    key, _, value = override.partition("=")
    key = key.strip()
    parts = key.split(".")
    new = current_key(key)
    if new != key:  # an old flat key: where it lives now (user_api_key_env also keys the judge)
        notice(f"{key}=... is now {new}=...")
        also = ALSO.get((parts[0], parts[1]))
        if also is not None:
            apply_override(raw, f"{parts[0]}.{also[0]}.{also[1]}={value}")
        parts = new.split(".")
    if not key or any(not p for p in parts):
        raise ConfigError(f"override {override!r} has an empty key part")
    node = raw
    model: type[BaseModel] | None = MemRLConfig
    for depth, part in enumerate(parts):
        prefix = ".".join(parts[:depth])
        prefix = prefix + "." if prefix else ""
        if model is not None and part not in external_fields(model):
            raise _unknown_key_error(prefix + part, model, prefix)
        if depth == len(parts) - 1:
            try:
                node[part] = parse_value(value)
            except ConfigError as err:
                raise ConfigError(f"override {masked(override)!r}: {err}") from None
            return
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
        model = _submodel(external_fields(model)[part].annotation) if model is not None else None


def _latest_first(given: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(current key, override text) of the command line, the last word first (it won when applied); an old flat
    key under the name it now lives at."""
    for spelt, text in reversed(given.items()):
        yield current_key(spelt), text


def _override_for(loc: str, given: dict[str, str]) -> str | None:
    """The command-line override that set ``loc`` (or the section or value around it), if one did."""
    for key, text in _latest_first(given):
        if loc == key or loc.startswith(key + ".") or key.startswith(loc + "."):
            return text
    return None


def _named_override(err: Any, given: dict[str, str]) -> str | None:
    """For a check across a section's settings placed at one of them: an override inside the section whose setting
    the message also names (``... leave out program and command`` blames ``workflow.options.command=...``);
    one it does not name is not the cause."""
    loc, msg = _loc(err), str(err["msg"])
    words = set(msg.replace(",", " ").replace(";", " ").replace(":", " ").split())
    for key, text in _latest_first(given):
        if loc and key.startswith(loc + ".") and (key in words or key.rsplit(".", 1)[-1] in words):
            return text
    return None


def _loc(err: Any) -> str:
    return ".".join(str(p) for p in err["loc"])


def _problem(err: Any) -> tuple[str, str]:
    """(where, message) of one pydantic error: a message that begins with a key inside its location (a section's
    check naming ``workflow.options.program``) is placed at that key, not said twice."""
    loc = _loc(err)
    msg = str(err["msg"]).removeprefix("Value error, ")
    first = msg.split(" ", 1)[0].rstrip(":")
    if loc and first.startswith(loc + ".") and all(part.isidentifier() for part in first.split(".")):
        return first, msg
    return loc, msg


def _format_validation_error(exc: ValidationError, source: str, given: dict[str, str]) -> ConfigError:
    """One line per problem; a value that came from a ``key=value`` override is blamed on it, not on the file."""
    placed = [(err, *_problem(err)) for err in exc.errors()]
    blamed = [(err, loc, msg, _override_for(loc, given) or _named_override(err, given)) for err, loc, msg in placed]
    mixed = any(b[-1] is None for b in blamed) and any(b[-1] is not None for b in blamed)
    lines = []
    for err, loc, msg, override in blamed:
        where = "" if not loc or msg.startswith(loc) else f"{loc}: "  # a check across sections has no one place
        if override is not None:
            lines.append(f"{where}{msg} (from the command-line setting {masked(override)})")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {masked(repr(got))}{source if mixed else ''})"
            lines.append(f"{where}{msg}{shown}")
    file_only = all(b[-1] is None for b in blamed)
    return ConfigError(f"invalid config{source if file_only else ''}: " + "; ".join(lines))


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: YAML keeps the last silently, so a second
    ``trainer:`` section replaced the first one's settings without a word."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one section (YAML would keep only the last)",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's report in one line: what, while doing what, at which line and column."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    return f"{problem}{f' ({context})' if context else ''} at line {mark.line + 1}, column {mark.column + 1}"


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML file's mapping of sections, unchecked; a one-line :class:`ConfigError` for a missing or bad file."""
    p = Path(path)
    if p.is_dir():
        some = sorted(p.glob("*.yaml"))[:3]
        hint = f" (it has {', '.join(str(x) for x in some)}{', ...' if len(some) == 3 else ''})" if some else ""
        raise ConfigError(f"config file {p} is a folder: give one YAML file{hint}")
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        loaded = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeys)  # noqa: S506 - a SafeLoader
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {_yaml_problem(exc)}") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{p}: top level must be a mapping of sections, got {type(loaded).__name__}")
    return loaded


def config_from_dict(raw: Mapping[str, Any], source: str = "") -> MemRLConfig:
    """A config from a dict of sections (``memrl.Trainer({...})``), checked as a file is: an unknown key gets
    the nearest name and every problem is one line, not pydantic's multi-line report."""
    tree = copy.deepcopy(dict(raw))
    check_keys(tree)
    try:
        return MemRLConfig.model_validate(tree)
    except ValidationError as exc:
        raise _format_validation_error(exc, source, {}) from None


def _placed(message: str, source: str) -> str:
    """``message`` about a key, with where it was read (``unknown config key 'a.b' in x.yaml: ...``)."""
    head, sep, rest = message.partition("': ")
    return f"{head}'{source}: {rest}" if sep and head.startswith("unknown config key '") else f"{message}{source}"


def load_config(path: str | Path | Mapping[str, Any] | None = None,
                overrides: Sequence[str] | Iterable[str] = ()) -> MemRLConfig:
    """Read YAML (optional; or take a dict of sections, as the file would hold), apply overrides, validate;
    raise :class:`ConfigError` on any problem."""
    raw: dict[str, Any] = {}
    source = ""
    if isinstance(path, Mapping):
        raw = copy.deepcopy(dict(path))
        check_keys(raw)
    elif path is not None:
        raw = read_config_file(path)
        source = f" in {path}"
        try:
            check_keys(raw)
        except ConfigError as err:  # a stack of a file and overrides: say which one holds the key
            raise ConfigError(_placed(str(err), source)) from None
    given: dict[str, str] = {}
    named: dict[str, str] = {}  # current key -> the spelling first given for it
    for override in overrides:
        key = override.partition("=")[0].strip()
        first = named.setdefault(current_key(key), key)
        if first != key:  # one setting under its old and its new name: which value was meant is unknowable
            raise ConfigError(both_given(key if key != current_key(key) else first, current_key(key)))
        apply_override(raw, override)
        given[override.partition("=")[0].strip()] = override
    try:
        return MemRLConfig.model_validate(raw)
    except ValidationError as exc:
        raise _format_validation_error(exc, source, given) from None


def dump_config(cfg: BaseModel) -> str:
    """The resolved config as YAML, in schema order."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
