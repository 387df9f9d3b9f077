"""Errors every layer may raise. A leaf module: it imports nothing of the project or of third parties."""


class ConfigError(ValueError):
    """A configuration value is not allowed. The message names the key, the value and what is allowed."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r} is not allowed: {allowed}")


class UnsupportedProblem(ValueError):
    """The kernel cannot run this convolution (layout, dtype, groups, ...); the message says what it needs."""


class StoreError(ValueError):
    """The tracking store cannot be used (unknown scheme, unreachable server, not a database, unwritable)."""

    def __init__(self, uri: str, why: str) -> None:
        self.uri = uri
        super().__init__(f"tracking.uri={uri!r} cannot be used: {why}")


class ConfigFileError(ValueError):
    """A config or preset file cannot be read; the message names the file and where."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path}: {why}")
