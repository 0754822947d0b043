"""The root of every error headrace raises on purpose."""


class HeadraceError(Exception):
    """Base class of all headrace errors; each component derives its own from it."""
