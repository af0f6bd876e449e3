"""The writer's commands, one module per group: `publish`, `consume`, `materialize` (events.py), the
`catalog` group (catalog.py: `load`, `update`, `reconcile`), the `rollout` group (rollout.py: `status`,
`gc`), `dlq replay` and `kafka-acls` (topics.py); the options they share in options.py.

Kafka client settings come from `GISTRANK_KAFKA_*` variables (see `reranker.catalog.kafka_settings`);
`--bootstrap-servers` overrides the servers. `python -m streaming.cli …` runs these without the rest of
the `gistrank` CLI. Heavy imports (torch, feast) happen inside the commands that need them.
"""

import os

import typer

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # model names resolve offline (reranker.core.base_models)

from streaming.cli.catalog import catalog_app
from streaming.cli.events import consume, materialize, publish
from streaming.cli.options import BlobDType, KVStorageOpt
from streaming.cli.rollout import rollout_app
from streaming.cli.topics import dlq_app, kafka_acls

__all__ = [
    "BlobDType",
    "KVStorageOpt",
    "catalog_app",
    "consume",
    "dlq_app",
    "kafka_acls",
    "main",
    "materialize",
    "publish",
    "rollout_app",
]

main = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help=__doc__.split("\n\n")[0],
    context_settings={"help_option_names": ["-h", "--help"]},  # as `gistrank`'s: -h beside --help
)
main.command()(publish)
main.command()(consume)
main.command()(materialize)
main.add_typer(catalog_app, name="catalog")
main.add_typer(rollout_app, name="rollout")
main.add_typer(dlq_app, name="dlq")
main.command("kafka-acls")(kafka_acls)
