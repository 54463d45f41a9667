"""The one error type for bad input: it names the offending config key and says why."""


class ConfigError(ValueError):
    def __init__(self, key: str, reason: str):
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason
