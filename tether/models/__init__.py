"""Adapters from ``tether.Model`` to model providers. Each is optional (an extra) and thin."""
