"""`gistrank` command line. Heavy imports (torch, feast, kafka) happen inside each command.

One module per command group; this one assembles them, in the order `gistrank -h` lists them:
the writer's commands (streaming/cli/), serving's (reranker/serving/cli.py), then demo, benches, data,
training, evaluation and capacity (the modules beside this one; shared options in options.py)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

# Model names resolve offline (presets, shipped checkpoints, local folders): a misspelled name is one line
# naming the known ones, not a minute of retries against the Hub. HF_HUB_OFFLINE=0 lets Hub ids through.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reranker.cli import bench, data, demo, evaluate, plan, train
from reranker.serving.cli import rerank, serve
from streaming.cli import catalog_app, consume, dlq_app, kafka_acls, materialize, publish, rollout_app

# plain help (no boxes that a pipe wraps into noise), -h beside --help, in every subcommand
app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help=__doc__.split("\n\n")[0],
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"gistrank {version('gistrank')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """`gistrank` command line. Heavy imports (torch, feast, kafka) happen inside each command."""


app.add_typer(catalog_app, name="catalog")
app.add_typer(rollout_app, name="rollout")
app.add_typer(dlq_app, name="dlq")
app.add_typer(data.data_app, name="data")
for command in (publish, consume, materialize, serve, rerank):
    app.command()(command)
app.command("kafka-acls")(kafka_acls)
app.command()(demo.demo)
app.command()(bench.bench)
app.command("bench-packing")(bench.bench_packing)
app.command("bench-store")(bench.bench_store)
app.command("bench-training")(bench.bench_training)
app.command("bench-serving")(bench.bench_serving)
app.command()(train.train)
app.command("train-gists")(train.train_gists)
app.command("train-reader")(train.train_reader)
app.command()(train.curves)
app.command()(evaluate.probe)
app.command()(plan.plan)
app.command("eval")(evaluate.evaluate)
app.command("eval-merge")(evaluate.eval_merge)
app.command()(bench.soak)

# What a user can get wrong surfaces as these (a value out of range, a file that is not there, a model
# setting that does not validate); anything else is a bug and keeps its traceback.
_MISTAKES = (
    ValueError,
    OverflowError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    FileExistsError,
)


def main() -> None:
    """The `gistrank` console script: the commands, with every user mistake as one line and exit 2
    (GISTRANK_TRACEBACK=1 shows the traceback instead)."""
    import sys

    from reranker.core.errors import one_line

    try:
        code = typer.main.get_command(app).main(prog_name="gistrank", standalone_mode=False)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click): message, exit 2
        exc.show()  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except _MISTAKES as exc:
        if os.environ.get("GISTRANK_TRACEBACK"):
            raise
        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
