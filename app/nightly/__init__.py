"""Nightly retraining: the pipeline, the promotion decision, the registry, the lock and the schedule."""
