"""`python -m glensidec` is the `glensidec` command."""

from .cli import main

main()
