"""podracer application layer: CLI, dashboard, nightly retraining, export and paper trading."""

__version__ = "0.1.0"
