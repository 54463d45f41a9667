"""Plugins the tests name by module path (`tests.plugins.repeat:TASK`), written only against the public API, the way
a researcher writes one outside headsweep: a minimal task, a model without attention, and broken ones."""
