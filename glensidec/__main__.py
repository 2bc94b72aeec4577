"""`python -m glensidec` is the `glensidec` command."""

from glensidec.cli import main

main()
