"""User-facing errors: raised for bad input, printed by the CLI as one line."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the value and what is allowed."""
