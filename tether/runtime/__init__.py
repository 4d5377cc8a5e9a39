"""The process-level system: Runtime, delivery, journal, group commit (its store: ``tether.store``)."""
