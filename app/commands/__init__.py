"""One module per CLI command; each owns its options and imports heavy libraries lazily.

``app.cli`` imports every command module at start to register it, so these modules import at module
top only what their signatures need and what loads neither torch nor pandas (typer, ``app.context``,
``data.errors``). The workflows, the renderers and the config, which load torch, are imported inside
the command's body: ``podracer --help`` and ``podracer <command> --help`` stay fast, and a command
loads them only when it runs (``tests/test_one_home.py`` checks that help loads no torch).
"""
