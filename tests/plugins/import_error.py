"""A plugin whose own import fails, as one with a missing dependency does."""
import a_dependency_nobody_installed  # noqa: F401
