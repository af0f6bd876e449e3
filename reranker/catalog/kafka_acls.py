"""Who may do what on GistRank's topics: the Kafka ACLs of a broker that authenticates its clients.

Three client roles, each its own principal (`GISTRANK_KAFKA_SASL_USERNAME` of its processes):

* publisher — `gistrank publish`, `dlq replay` and the tools: writes the change topic, reads the
  dead-letter topic, creates the topics;
* consumer — `gistrank consume`: reads the change topic in its model's group
  (`gistrank-gist-writer-<fingerprint>`, a prefixed grant), writes the dead-letter topic, creates the
  topics;
* serving — Triton's gist_reranker: writes refresh requests to the change topic, nothing else.

Nobody else can write the change topic, so a forged event needs a stolen credential; the consumer's
check against the catalog (`streaming.consumer`) stops what gets through anyway. `gistrank kafka-acls`
applies the grants with an administrator's credentials (compose and Kubernetes run it once at start).
"""

from __future__ import annotations

from dataclasses import dataclass

from reranker.catalog.kafka_settings import DEFAULT_GROUP_PREFIX, KafkaSettings

ROLES = ("publisher", "consumer", "serving")


@dataclass(frozen=True)
class Grant:
    resource: str  # "topic" or "group"
    name: str
    operation: str  # READ, WRITE, CREATE, DESCRIBE
    prefixed: bool = False


def grants(settings: KafkaSettings, role: str) -> list[Grant]:
    """What one role may do on `settings`' topics and groups."""
    change, dlq = settings.topic, settings.dlq_topic
    group = settings.group_id or DEFAULT_GROUP_PREFIX
    create = [Grant("topic", t, op) for t in (change, dlq) for op in ("CREATE", "DESCRIBE")]
    by_role = {
        "publisher": [*create, Grant("topic", change, "WRITE"), Grant("topic", dlq, "READ")],
        "consumer": [
            *create,
            Grant("topic", change, "READ"),
            Grant("topic", dlq, "WRITE"),
            Grant("group", group, "READ", prefixed=settings.group_id is None),
        ],
        "serving": [Grant("topic", change, "WRITE")],
    }
    if role not in by_role:
        raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    return by_role[role]


def apply_acls(settings: KafkaSettings, principals: dict[str, str]) -> int:
    """Create the ACLs of every role for its principal ({role: user name}); `settings` must authenticate
    as an administrator. Idempotent (Kafka keeps one copy of an ACL). Returns the number of ACLs."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourceType,
    )

    unknown = sorted(set(principals) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown roles {unknown}; known: {', '.join(ROLES)}")
    acls = [
        ACL(
            principal=f"User:{user}",
            host="*",
            operation=ACLOperation[grant.operation],
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(
                ResourceType[grant.resource.upper()],
                grant.name,
                ACLResourcePatternType.PREFIXED if grant.prefixed else ACLResourcePatternType.LITERAL,
            ),
        )
        for role, user in principals.items()
        for grant in grants(settings, role)
    ]
    admin = KafkaAdminClient(**settings.admin_kwargs())
    try:
        result = admin.create_acls(acls)
    finally:
        admin.close()
    if result["failed"]:
        raise RuntimeError(f"{len(result['failed'])} ACLs not created: {result['failed'][0]}")
    return len(acls)
