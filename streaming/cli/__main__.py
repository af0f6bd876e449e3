"""`python -m streaming.cli …`: the writer's commands without the rest of `gistrank`."""

from streaming.cli import main

main()
