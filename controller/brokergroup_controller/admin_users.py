"""`brokergroup admin user create|update|delete|get|list` (docs/security.md "Users with
rights"): a cluster's users on the controller API, like mqadmin's createUser/createAcl.

One `--allow`/`--deny` per resource, `RESOURCE=ACTION[,ACTION...]` (mqadmin createAcl's
`-r`/`-a`/`-d` in one word), `--source-ip` (repeatable) applying to every entry given, as
createAcl's `-i`. A SecretKey is generated when none is given (`--secret-key-file`) and
printed once, as the key-file line `{"accessKey": …, "secretKey": …}` a client reads
(brokergroup_remoting.keys). `update` replaces the policy list when any `--allow`/`--deny`
is given, else keeps it; `--generate-secret` rotates the SecretKey.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from brokergroup_controller.client import ControllerClient
from brokergroup_remoting.authorization import (
    Decision,
    PolicyError,
    check_access_key,
    check_secret_key,
    parse_entry_arg,
)

#: A generated SecretKey: 32 random bytes, URL-safe Base64 (43 characters).
GENERATED_SECRET_BYTES = 32


def add_user_commands(commands: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """`admin user …` under the admin subcommands (`commands`); `common` adds the
    controller address, token, TLS and output options."""
    user = commands.add_parser(
        "user",
        help="users with rights across every group of a cluster (RocketMQ ACL 2.0)",
        description="Users (AccessKey/SecretKey) with ACL 2.0 policies, valid on every group "
        "of the cluster (docs/security.md 'Users with rights').",
    )
    actions = user.add_subparsers(dest="user_command", required=True, metavar="USER_COMMAND")

    def target(p: argparse.ArgumentParser) -> None:
        p.add_argument("access_key", metavar="ACCESS_KEY", help="the user's AccessKey")
        p.add_argument("--cluster-name", default="DefaultCluster")

    def policies(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--allow",
            action="append",
            default=[],
            metavar="RESOURCE=ACTIONS",
            help="an Allow entry, e.g. 'Topic:T=Pub,Sub', 'Group:G=Sub', 'Topic:app-*=Pub' "
            "(actions: Pub, Sub, Create, Update, Delete, Get, List, All); repeatable",
        )
        p.add_argument(
            "--deny", action="append", default=[], metavar="RESOURCE=ACTIONS",
            help="a Deny entry (a Deny wins over an equally specific Allow); repeatable",
        )  # fmt: skip
        p.add_argument(
            "--source-ip", action="append", default=[], metavar="CIDR",
            help="the entries apply only from these IPs or CIDRs; repeatable",
        )  # fmt: skip
        p.add_argument("--disable", action="store_true", help="store the user disabled")
        p.add_argument(
            "--secret-key-file", help="read the SecretKey from this file (else one is generated)"
        )

    p = actions.add_parser("create", help="create a user (a SecretKey generated if none given)")
    target(p)
    policies(p)
    common(p)
    p = actions.add_parser("update", help="change a user's policies, status or SecretKey")
    target(p)
    policies(p)
    p.add_argument("--generate-secret", action="store_true", help="rotate: a new SecretKey")
    common(p)
    for name, text in (("get", "one user (no SecretKey)"), ("delete", "delete a user")):
        p = actions.add_parser(name, help=text)
        target(p)
        common(p)
    p = actions.add_parser("list", help="the cluster's users (no SecretKeys)")
    p.add_argument("--cluster-name", default="DefaultCluster")
    common(p)


class UsageError(ValueError):
    """Bad command-line input; the text says which."""


def _policies(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    if not args.allow and not args.deny:
        return None
    try:
        entries = [parse_entry_arg(a, Decision.ALLOW, args.source_ip) for a in args.allow]
        entries += [parse_entry_arg(d, Decision.DENY, args.source_ip) for d in args.deny]
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    return [e.to_json() for e in entries]


def _secret(args: argparse.Namespace, *, generate: bool) -> tuple[str | None, bool]:
    """(SecretKey or None to keep, whether it was generated)."""
    if args.secret_key_file:
        text = Path(args.secret_key_file).read_text().strip()
        try:
            return check_secret_key(text), False
        except PolicyError as exc:
            raise UsageError(f"{args.secret_key_file}: {exc}") from None
    if generate:
        return secrets.token_urlsafe(GENERATED_SECRET_BYTES), True
    return None, False


def _print_users(users: list[dict[str, Any]], out: TextIO) -> None:
    for user in users:
        status = "" if user.get("userStatus") == "enable" else " (disabled)"
        out.write(f"{user['accessKey']}{status}  version {user['version']}\n")
        for p in user["policies"]:
            ips = f" from {','.join(p['sourceIps'])}" if p.get("sourceIps") else ""
            out.write(f"  {p['decision']:5} {p['resource']} {','.join(p['actions'])}{ips}\n")


async def run_user_command(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> Any:
    """Run `admin user …`; the JSON result (printed by the caller with --json)."""
    command, cluster = args.user_command, args.cluster_name
    if command == "list":
        listed = await client.list_users(cluster)
        if not args.json:
            _print_users(listed["users"], out)
        return {"usersVersion": listed["usersVersion"], "users": listed["users"]}
    try:
        access_key = check_access_key(args.access_key)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    if command == "get":
        user = await client.get_user(cluster, access_key)
        if not args.json:
            _print_users([user], out)
        return user
    if command == "delete":
        deleted = await client.delete_user(cluster, access_key)
        if not args.json:
            out.write(f"user {access_key} {'deleted' if deleted else 'did not exist'}\n")
        return {"deleted": deleted}
    policies = _policies(args)
    if command == "create":
        if access_key in {u["accessKey"] for u in (await client.list_users(cluster))["users"]}:
            raise UsageError(f"user {access_key} exists in {cluster}: use 'admin user update'")
        secret, generated = _secret(args, generate=True)
        answer = await client.put_user(
            cluster, access_key, secret_key=secret, policies=policies or [],
            enabled=not args.disable,
        )  # fmt: skip
    else:  # update
        secret, generated = _secret(args, generate=args.generate_secret)
        if policies is None:
            policies = (await client.get_user(cluster, access_key))["policies"]
        answer = await client.put_user(
            cluster, access_key, secret_key=secret, policies=policies, enabled=not args.disable
        )
    result = {**answer["user"]}
    if generated:
        # Printed once: the controller never answers a SecretKey again.
        result["secretKey"] = secret
        if not args.json:
            key_line = json.dumps({"accessKey": access_key, "secretKey": secret})
            out.write(f"{key_line}\n")
    if not args.json:
        verb = "created" if answer.get("created") else "updated"
        out.write(f"user {access_key} {verb} (usersVersion {answer['usersVersion']})\n")
    return result
