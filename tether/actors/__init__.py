"""The actor model: messages, the Actor base class and the refs that address actors."""
