"""What the CLI and the console show of a store, defined once below both of them.

``text`` formats values and times; ``records`` reads a store's rows into plain views (an
actor's summary, its journal decoded, a message, an effect, a session's ``SessionInfo``).
Nothing here writes to the store or prints: the CLI (``tether.cli``) prints these views, the
console (``tether.console``) puts them on pages.
"""
