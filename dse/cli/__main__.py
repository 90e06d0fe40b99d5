"""``python -m dse.cli``: the `dse` command, as the installed script runs it."""

from dse.cli import main

if __name__ == "__main__":
    main()
