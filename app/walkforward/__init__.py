"""Walk-forward: nightly retraining replayed over history (``app.walkforward.run``)."""
