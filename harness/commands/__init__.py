"""Subcommands of ``dflash-matrix``, one module each (see ``harness.cli.COMMANDS``)."""
