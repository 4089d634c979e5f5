"""Keywords renamed so that each name has one meaning, each kept for one
version as a deprecated alias of its new name (CHANGELOG.md, "Deprecated")."""

import warnings


def renamed_keyword(function, new, old, value, old_value, default=None):
    """The value of keyword `new` of `function`: `value`, or `old_value`
    given under the old name `old` (with a `DeprecationWarning` that points
    at the caller of `function`), or `default` where neither is given.

    Raises:
        TypeError: both names given.
    """
    if old_value is None:
        return default if value is None else value
    warnings.warn(f"{function}({old}=...) is deprecated; use {function}({new}=...).", DeprecationWarning,
                  stacklevel=3)
    if value is not None:
        raise TypeError(f"{function}() takes {new}= once: give {new}= alone ({old}= is its old name).")
    return old_value
