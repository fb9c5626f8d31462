"""The roof: the `pcnlab` command (cli.py, cluster_cli.py), `pcnlab doctor` and `pcnlab controller`. They may
import every package of the project; nothing imports them (tests/test_house.py)."""
