"""User-facing errors: raised early, printed as one paragraph by the CLI, never as a traceback."""


class FedbenchError(Exception):
    """A problem the user can fix (bad config value, missing data file). The message names the fix."""


class ConfigError(FedbenchError):
    """A configuration value is invalid."""

    def __init__(self, key: str, problem: str, fix: str):
        super().__init__(f"Invalid config '{key}': {problem} Fix: {fix}")
        self.key = key


class DataUnavailableError(FedbenchError):
    """A dataset's files are missing and could not be downloaded."""


def require(condition: bool, key: str, problem: str, fix: str) -> None:
    """Raise ``ConfigError(key, problem, fix)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(key, problem, fix)
