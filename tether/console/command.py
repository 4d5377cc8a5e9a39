"""``tether console``: serve the web console; ``tether console token …``: manage its tokens.

::

    tether console --db agents.db --auth token --tokens console-tokens.json [--bind 127.0.0.1:8470]
    tether console --db agents.db --auth proxy --trusted-header X-Forwarded-User \\
        --trusted-proxies 10.0.0.5/32 --bind 0.0.0.0:8470
    tether console token add alice --role approve --tokens console-tokens.json
    tether console token list --tokens console-tokens.json
    tether console token revoke alice --tokens console-tokens.json

Without ``--auth``, a console with ``--tokens`` uses tokens, and one without serves loopback
only, unauthenticated. A non-loopback ``--bind`` without authentication is refused.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tether.app_dir import use_app_dir
from tether.console.auth import MODES
from tether.console.config import DEFAULT_BIND, ConsoleConfig
from tether.console.tokens import ROLES, TokenFile
from tether.errors import ConfigError, TetherError


def parser(prog: str = "tether console", default_db: str = "tether.db") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="The web approval console: decide held calls in a browser, as yourself.",
    )
    p.add_argument(
        "--db", default=default_db, help="the store: a file or URL (default: %(default)s)"
    )
    p.add_argument("--bind", default=DEFAULT_BIND, metavar="HOST:PORT", help="default: %(default)s")
    p.add_argument("--auth", choices=MODES, help="token, proxy or none (loopback only)")
    p.add_argument("--tokens", metavar="FILE", help="the token file (--auth token)")
    p.add_argument(
        "--trusted-header",
        default="X-Forwarded-User",
        metavar="HEADER",
        help="the header the proxy names the user in (default: %(default)s)",
    )
    p.add_argument(
        "--trusted-proxies",
        nargs="+",
        default=[],
        metavar="CIDR",
        help="the proxies' addresses: the header is believed from these only",
    )
    p.add_argument(
        "--proxy-viewers",
        nargs="+",
        default=[],
        metavar="USER",
        help="proxied users who may only look (role view); the others may approve",
    )
    p.add_argument("--read-only", action="store_true", help="refuse every change")
    p.add_argument(
        "--refresh", type=float, default=2.0, metavar="SECONDS", help="live refresh period"
    )
    p.add_argument("--app-dir", default=".", metavar="DIR", help="import the application from DIR")
    sub = p.add_subparsers(dest="action", metavar="token")
    token = sub.add_parser("token", help="manage the console's tokens")
    acts = token.add_subparsers(dest="token_action", required=True, metavar="ACTION")
    add = acts.add_parser("add", help="make a token for USER and print it (once)")
    add.add_argument("user", metavar="USER")
    add.add_argument("--role", choices=ROLES, required=True)
    add.add_argument("--tokens", dest="token_file", required=True, metavar="FILE")
    listing = acts.add_parser("list", help="the users and roles that have tokens")
    listing.add_argument("--tokens", dest="token_file", required=True, metavar="FILE")
    revoke = acts.add_parser("revoke", help="remove every token of USER")
    revoke.add_argument("user", metavar="USER")
    revoke.add_argument("--tokens", dest="token_file", required=True, metavar="FILE")
    return p


def config_from(args: argparse.Namespace) -> ConsoleConfig:
    auth = args.auth or ("token" if args.tokens else "none")
    return ConsoleConfig(
        db=args.db,
        auth=auth,
        tokens=args.tokens,
        trusted_header=args.trusted_header,
        trusted_proxies=tuple(args.trusted_proxies),
        proxy_viewers=frozenset(args.proxy_viewers),
        read_only=args.read_only,
        refresh=args.refresh,
        bind=args.bind,
    )


def main(argv: Sequence[str], *, default_db: str = "tether.db") -> int:
    """Run ``tether console`` with ``argv``; the exit code (0, 1 failed, 2 usage)."""
    p = parser(default_db=default_db)
    try:
        args = p.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.action == "token":
            return _tokens(args)
        config = config_from(args)
        from tether.console.server import prepare, serve
        from tether.store.open import shown

        try:
            use_app_dir(args.app_dir)
        except ConfigError as exc:  # a usage error, as the tether command says it
            print(f"tether: error: {exc}", file=sys.stderr)
            return 2
        app = prepare(config)  # the token file and the store are there, or we say why now
        print(
            f"tether console: serving {shown(config.db)} on http://{config.bind} "
            f"(auth {config.auth}{', read-only' if config.read_only else ''})",
            file=sys.stderr,
        )
        serve(config, app)
    except TetherError as exc:
        print(f"tether: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _tokens(args: argparse.Namespace) -> int:
    tokens = TokenFile(args.token_file)
    if args.token_action == "add":
        token = tokens.add(args.user, args.role)
        print(token)
        print(
            f"token for {args.user} ({args.role}) stored as a hash in {args.token_file}; "
            "it is shown this once",
            file=sys.stderr,
        )
    elif args.token_action == "list":
        for e in tokens.entries():
            print(f"{e.user}\t{e.role}\t{e.id}")
    else:
        gone = tokens.revoke(args.user)
        print(f"{gone} token(s) of {args.user} revoked", file=sys.stderr)
        if not gone:
            return 1
    return 0
