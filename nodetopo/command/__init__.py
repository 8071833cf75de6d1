"""What every nodetopo command shares: its command line (``args``), its logs, how it stops on
SIGTERM/SIGINT (``signals``), text safe for a terminal (``terminal``) and the files it writes
(``output``)."""
