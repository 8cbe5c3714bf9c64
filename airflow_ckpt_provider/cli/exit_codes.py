"""Exit codes of ``airflow-ckpt`` (documented in its ``--help`` and in README "Command line")."""

EXIT_OK = 0
#: ``check`` found problems, or a confirmation was declined (nothing deleted).
EXIT_FINDINGS = 1
#: Bad input: usage, a bad URI or id, corrupt data. One line on stderr, nothing deleted.
EXIT_ERROR = 2
#: The store cannot be reached (network, bucket, credentials).
EXIT_UNAVAILABLE = 3
#: Interrupted (Ctrl-C), as shells report SIGINT.
EXIT_INTERRUPTED = 130
