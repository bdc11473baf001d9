"""The base of every config section."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, AllowInfNan, BaseModel, ConfigDict, Field, model_validator

from memrl.io.urls import no_credentials

# A number that must be finite: ``ge=0`` lets ``inf`` through, and ``trainer.lr=inf`` turned every weight into
# NaN at step 1 (``algorithm.kl_coef=inf`` skipped every step yet reported "done"). Limits where infinity
# means "none" (timeouts, clip ratios, caps) stay plain floats.
Finite = Annotated[float, AllowInfNan(False)]
# A server root: credentials in it would be written to config.yaml and trackers (the key goes in api_key_env).
ServerURL = Annotated[str, AfterValidator(no_credentials)]
# A seed numpy and torch both take.
Seed = Annotated[int, Field(ge=0, lt=2**32)]


class Section(BaseModel):
    """Base for config sections: strict about keys, lenient about scalar spelling.

    A key that moved into a nested section (``trainer.eval_every`` -> ``trainer.eval.every``,
    see :mod:`memrl.config.renames`) is still readable under its old name.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True,
                              validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
    section_key: ClassVar[str | None] = None  # this section's key in the whole config, for moved keys

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        """``algorithm.n=true`` is a mistake, not 1: pydantic's lax mode reads a boolean as a number."""
        if isinstance(data, dict):
            for key, value in data.items():
                info = cls.model_fields.get(key) or next(
                    (f for f in cls.model_fields.values() if f.alias == key), None)
                if isinstance(value, bool) and info is not None and _numbers_only(info.annotation):
                    raise ValueError(f"{key}: expected a number, got {str(value).lower()}")
        return data

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """Old flat keys of this section (``eval_every``) read at their nested place, with a notice."""
        if cls.section_key is None or not isinstance(data, dict):
            return data
        from memrl.config.renames import migrate_section

        return migrate_section(cls.section_key, data)

    def __getattr__(self, key: str) -> Any:
        try:
            return super().__getattr__(key)  # type: ignore[misc]
        except AttributeError:
            if type(self).section_key is None or key.startswith("_"):
                raise
            from memrl.config.renames import moved_attribute

            return moved_attribute(type(self).section_key, self, key)


def _numbers_only(annotation: Any) -> bool:
    """Whether a field takes numbers and nothing else (None aside): int, float, Finite, Seed, ``int | None``."""
    import types
    import typing

    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    kinds = [typing.get_args(a)[0] if typing.get_origin(a) is Annotated else a for a in args]
    kinds = [k for k in kinds if k is not type(None)]
    return bool(kinds) and all(k in (int, float) for k in kinds)


def external_fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by the key a config file uses (the alias where there is one: ``trainer.async``)."""
    return {(info.alias or name): info for name, info in model.model_fields.items()}
