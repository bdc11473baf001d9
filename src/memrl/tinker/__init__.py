"""A Tinker-compatible training server over memrl (``memrl tinker``)."""
