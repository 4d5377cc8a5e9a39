"""``python -m tether.testing.payments serve --db PATH [...]`` (``cli.main``)."""

from tether.testing.payments.cli import main

if __name__ == "__main__":
    main()
