"""The process-level system: Runtime, delivery, journal, group commit and the stores."""
