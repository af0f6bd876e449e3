"""What a command checks before anything heavy starts (a model load, a store, tritonserver), shared by the
writer's commands (`streaming/cli/`) and serving's (`reranker/serving/cli.py`), so each mistake is one
line: a model reference (`check_model`), listening ports (`port_option`: one range for every port
option; `ensure_free`), the Kafka brokers (`require_broker`; `kafka_logs`: kafka-python's lines only when
asked)."""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from reranker.catalog.kafka_settings import BrokerUnreachableError, KafkaSettings, check_reachable

PORT_MAX = 65535


def port_option(help: str, *, free: bool = False) -> Any:
    """A port option: 1–65535, and with `free` also 0, which picks a free port (the help says so)."""
    return typer.Option(
        min=0 if free else 1, max=PORT_MAX, help=f"{help}; 0 = pick a free port" if free else help
    )


def ensure_free(host: str, ports: Mapping[str, int]) -> None:
    """Bind each port of `ports` (option name → port; 0 is picked free later) on `host` for a moment: a
    port that is taken, or given to two options, is a usage error naming it and, when /proc tells, the
    process that listens on it."""
    seen: dict[int, str] = {}
    for option, port in ports.items():
        if port == 0:
            continue
        if port in seen:
            raise typer.BadParameter(f"{port} is {seen[port]} too", param_hint=option)
        seen[port] = option
        try:
            family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                # as servers do: a port whose last connections linger in TIME_WAIT is free
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as exc:
            holder = _listener(port) if exc.errno == errno.EADDRINUSE else None
            held = f" (held by {holder})" if holder else ""
            raise typer.BadParameter(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}{held}", param_hint=option
            ) from None


def _listener(port: int) -> str | None:
    """ "pid N: command" of a process listening on TCP `port`, from /proc (Linux, this user's processes;
    best effort: None when it cannot tell)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:  # sl local_address rem_address st ... inode: "0100007F:1F40 ... 0A ..."
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                sockets.add(f"socket:[{fields[9]}]")
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) in sockets:
                command = (
                    (fd.parents[1] / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
                return f"pid {fd.parts[2]}: {command.strip()[:100]}"
        except OSError:  # gone, or another user's
            continue
    return None


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def require_broker(settings: KafkaSettings, verbose: bool, how: str | None = None) -> None:
    """A command's first use of Kafka, before it loads a model or touches a store: a broker that does not
    answer within $GISTRANK_KAFKA_CONNECT_TIMEOUT_S is one line naming the servers, exit 1. `how`: what
    sets the servers for this command."""
    kafka_logs(verbose)
    try:
        check_reachable(settings)
    except BrokerUnreachableError as exc:
        how = how or "--bootstrap-servers or $GISTRANK_KAFKA_BOOTSTRAP_SERVERS"
        typer.echo(
            f"error: {exc}; set the servers with {how}, the wait with $GISTRANK_KAFKA_CONNECT_TIMEOUT_S",
            err=True,
        )
        raise typer.Exit(1) from None


def kafka_logs(verbose: bool) -> None:
    """kafka-python logs several lines a second while a broker is down; they reach the terminal only when
    asked (-v or $GISTRANK_LOG_LEVEL): the command's own error line says what failed."""
    asked = verbose or "GISTRANK_LOG_LEVEL" in os.environ
    if asked:
        logging.basicConfig(format=LOG_FORMAT)  # a no-op where the command configured logging already
    kafka_log = logging.getLogger("kafka")
    kafka_log.setLevel(logging.WARNING)  # its INFO is per-connection chatter, its DEBUG shows SASL passwords
    kafka_log.propagate = asked


def check_model(ref: str | Path, option: str = "--model", **settings: int | str | None) -> None:
    """The model reference of `option` (with the command's reading `settings` over its own) checked before
    anything heavy, as one usage line (`reranker.core.model_refs`): the one check of every command that
    takes a model."""
    from reranker.core.checkpoints import model_spec
    from reranker.core.errors import one_line
    from reranker.core.model_refs import check_model_ref

    try:
        check_model_ref(model_spec(ref, **settings))
    except ValueError as exc:
        raise typer.BadParameter(one_line(exc), param_hint=option) from None
