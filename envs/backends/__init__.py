"""The env step's fast backends: :mod:`~envs.backends.native` (the C kernel on CPU) and
:mod:`~envs.backends.compiled` (``torch.compile``). The rules they run live in :mod:`envs.trading`,
which imports them (never the other way round)."""
