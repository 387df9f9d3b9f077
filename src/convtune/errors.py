"""Errors every layer may raise. A leaf module: it imports nothing of the project or of third parties."""


class ConfigError(ValueError):
    """A configuration value is not allowed. The message names the key, the value and what is allowed."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r} is not allowed: {allowed}")


class UnsupportedProblem(ValueError):
    """The kernel cannot run this convolution (layout, dtype, groups, ...); the message says what it needs."""


class InvalidConvolution(UnsupportedProblem, RuntimeError):
    """Arguments torch's own convolution refuses too (a bias of the wrong size, stride 0, negative padding, ...):
    the message is torch's wording, and like torch's error it is a RuntimeError (and a ValueError, as every refusal
    here is)."""


class StoreError(ValueError):
    """The tracking store cannot be used (unknown scheme, unreachable server, not a database, unwritable)."""

    def __init__(self, uri: str, why: str) -> None:
        import re

        self.uri = uri
        shown = re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", uri)  # a password in the URI is never printed
        super().__init__(f"tracking.uri={shown!r} cannot be used: {why}")


class ConfigFileError(ValueError):
    """A config or preset file cannot be read; the message names the file and where."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path}: {why}")
