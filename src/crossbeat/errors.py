"""The root of every error crossbeat raises on purpose."""


class CrossbeatError(Exception):
    """Base class: anything crossbeat raises deliberately derives from this."""


class ConfigError(CrossbeatError):
    """The configuration is invalid; the message says which setting and why."""
