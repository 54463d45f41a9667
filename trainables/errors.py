"""The one error type for bad input: it names the offending config key and says why."""


class ConfigError(ValueError):
    def __init__(self, key: str, reason: str):
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason

    def __reduce__(self):  # a trial's error crosses processes (Ray pickles it): rebuilt from both parts
        return ConfigError, (self.key, self.reason)


def require(*checks: tuple[str, bool, str]) -> None:
    """Raise ConfigError(key, reason) for the first (key, ok, reason) whose ok is false."""
    for key, ok, reason in checks:
        if not ok:
            raise ConfigError(key, reason)
