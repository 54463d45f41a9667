"""Task registry: `task.name` picks the config schema and the generator."""
from trainables.tasks.trigger_copy import TriggerCopyConfig

CONFIGS = {"trigger_copy": TriggerCopyConfig}
