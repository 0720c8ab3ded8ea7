"""The package version, in a module of its own so that any layer (the disk cache among them) can read it without
importing the package root. `tawa.__version__` re-exports it."""

__version__ = "0.1.0"
