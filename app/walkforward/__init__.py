"""Walk-forward: nightly retraining replayed over history (``app.workflows.walkforward``)."""
