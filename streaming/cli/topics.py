"""`dlq replay`, `kafka-acls`: the Kafka side: dead letters sent back once fixed, each role's ACLs."""

from __future__ import annotations

from typing import Annotated

import typer

from reranker.catalog.preflight import require_broker
from streaming.cli.options import BootstrapServers, Verbose, kafka_settings

dlq_app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="The dead-letter topic: events the consumer refused."
)


@dlq_app.command("replay")
def dlq_replay(
    reason: Annotated[
        list[str] | None,
        typer.Option(help="replay letters with this reason code (repeatable; default: every reason)"),
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="send them to the change topic (default: a dry run that counts)")
    ] = False,
    since_offset: Annotated[
        int, typer.Option(min=0, help="first dead-letter offset to read (each run prints where to resume)")
    ] = 0,
    bootstrap_servers: BootstrapServers = None,
    verbose: Verbose = False,
) -> None:
    """Send dead-lettered events back to the change topic, by reason code, once their cause is fixed."""
    from kafka.errors import KafkaError

    from monitoring.metrics import DEAD_LETTER_REASONS

    unknown = sorted(set(reason or ()) - set(DEAD_LETTER_REASONS))
    if unknown:
        raise typer.BadParameter(f"unknown reason {unknown}; known: {', '.join(DEAD_LETTER_REASONS)}")
    settings = kafka_settings(bootstrap_servers)
    require_broker(settings, verbose)
    from streaming.replay import replay  # imports the consumer's (torch, feast): after the broker answered

    try:
        report = replay(settings, set(reason) if reason else None, apply, since_offset)
    except (ValueError, TimeoutError, KafkaError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    by_reason = ", ".join(f"{code} {n}" for code, n in sorted(report.matched.items())) or "none"
    typer.echo(f"read {report.read} letters of {settings.dlq_topic}; matching: {by_reason}")
    if report.truncated:
        typer.echo(f"{report.truncated} matching letters kept only a prefix of their record: not replayable")
    action = f"replayed {report.replayed} to {settings.topic}" if apply else "dry run: pass --apply to replay"
    resume = ", ".join(f"partition {p}: {o}" for p, o in sorted(report.next_offset.items()))
    typer.echo(f"{action}; next run resumes at --since-offset ({resume})")


def kafka_acls(
    publisher: Annotated[str, typer.Option(help="principal (SASL user) of the publishers and tools")],
    consumer: Annotated[str, typer.Option(help="principal of the gist consumers")],
    serving: Annotated[str, typer.Option(help="principal of the Triton servers (refresh requests)")],
    bootstrap_servers: BootstrapServers = None,
    verbose: Verbose = False,
) -> None:
    """Grant each role its ACLs on the topics and groups of $GISTRANK_KAFKA_* (reranker/catalog/
    kafka_acls.py); run with an administrator's credentials in GISTRANK_KAFKA_SASL_*."""
    from kafka.errors import KafkaError

    from reranker.catalog.kafka_acls import apply_acls

    settings = kafka_settings(bootstrap_servers)
    require_broker(settings, verbose)
    try:
        count = apply_acls(settings, {"publisher": publisher, "consumer": consumer, "serving": serving})
    except (KafkaError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{count} ACLs in place for publisher={publisher}, consumer={consumer}, serving={serving}")
