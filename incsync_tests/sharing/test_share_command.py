"""`incsync share create|rotate|revoke|list`: a profile file the official client reads, a rotation whose old
token keeps working for the overlap, revocation at once, and no token on the terminal but in the profile."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import delta_sharing
import pytest
from delta_sharing.protocol import Table

from incsync.cli.main import main
from incsync_tests.sharing.conftest import World


def _share(world: World, *args: str) -> int:
    return main(["share", *args, "-c", str(world.config)])


def test_share_commands_mint_rotate_list_and_revoke(world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "umbrella.share"
    assert _share(world, "create", "umbrella", "-o", str(first)) == 0
    said = capsys.readouterr()
    profile = json.loads(first.read_text())
    assert sorted(profile) == ["bearerToken", "endpoint", "expirationTime", "shareCredentialsVersion"]
    assert (profile["shareCredentialsVersion"], profile["endpoint"]) == (1, world.endpoint)
    assert profile["expirationTime"].endswith("Z") and stat.S_IMODE(first.stat().st_mode) == 0o600
    assert profile["bearerToken"] not in said.out + said.err and f"is in {first}" in said.out
    client = delta_sharing.SharingClient(str(first))
    assert client.list_all_tables() == [Table(name="orders", share="umbrella", schema="sales")]
    assert list(delta_sharing.load_as_pandas(f"{first}#umbrella.sales.orders")["id"]) == [8]

    assert _share(world, "create", "umbrella", "-o", str(tmp_path / "again.share")) == 1
    assert "recipient umbrella already holds a live token; `incsync share rotate umbrella`" in capsys.readouterr().err
    assert not (tmp_path / "again.share").exists()

    second = tmp_path / "rotated.share"
    assert _share(world, "rotate", "umbrella", "-o", str(second), "--overlap-hours", "1") == 0
    assert "stays valid until" in capsys.readouterr().out
    assert _share(world, "list", "umbrella", "--json") == 0
    listed = capsys.readouterr().out
    tokens = json.loads(listed)
    assert [(t["recipient"], t["state"]) for t in tokens] == [("umbrella", "live"), ("umbrella", "live")]
    assert "incsync_st_" not in listed
    for path in (first, second):
        assert delta_sharing.SharingClient(str(path)).list_shares()[0].name == "umbrella"

    assert _share(world, "revoke", "umbrella", "--token", tokens[0]["token"]) == 0
    assert f"token {tokens[0]['token']} revoked" in capsys.readouterr().out
    assert world.get("/shares", profile["bearerToken"]).status_code == 401
    assert world.get("/shares", json.loads(second.read_text())["bearerToken"]).status_code == 200
    assert _share(world, "revoke", "umbrella") == 0
    assert f"token {tokens[1]['token']} revoked" in capsys.readouterr().out
    assert world.get("/shares", json.loads(second.read_text())["bearerToken"]).status_code == 401
    assert _share(world, "list") == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["recipient", "token", "state"] and "revoked" in table


def test_share_create_refuses_a_recipient_no_share_can_serve(world: World, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _share(world, "create", "initech", "-o", str(tmp_path / "x.share")) == 1
    assert ("recipient initech: its destination initech_files keeps none of its models as a Delta or Iceberg table in a "
            "local folder") in capsys.readouterr().err
    assert _share(world, "create", "nobody", "-o", str(tmp_path / "x.share")) == 2  # a configuration error
    assert 'unknown recipient "nobody"' in capsys.readouterr().err
    assert not (tmp_path / "x.share").exists()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_incsync_serve_runs_the_server_for_a_profile_from_share_create(tmp_path: Path) -> None:
    """The whole command line: `incsync share create`, then `incsync serve` in its own process (its companion in
    `make test`: every other test of this package, on a server thread)."""
    import os
    import subprocess
    import sys
    import time

    import yaml

    from incsync_tests.support import arrow_transfer
    from incsync_tests.support.host import free_port
    from incsync_tests.support.lake import lake_config, order, ts, write_table

    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_2", ts(1, 2))])
    config = lake_config(tmp_path)
    port = free_port()
    config.write_text(config.read_text() + yaml.safe_dump({"sharing": {"listen": f"127.0.0.1:{port}"}}))
    arrow_transfer.run(config, "2024-01-01", scheduled=False, staging_root=tmp_path / "staging")
    assert main(["share", "create", "acme", "-o", str(tmp_path / "acme.share"), "-c", str(config)]) == 0
    token = json.loads((tmp_path / "acme.share").read_text())["bearerToken"]
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "incsync.cli.main", "serve", "-c", str(config)], stdout=out,
                                  stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        rows = delta_sharing.load_as_pandas(f"{tmp_path / 'acme.share'}#acme.default.orders")
        assert list(rows["id"]) == [1]
    finally:
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    assert f"Delta Sharing at http://127.0.0.1:{port}/delta-sharing" in text
    assert "POST /delta-sharing/shares/acme/schemas/default/tables/orders/query 200 recipient=acme" in text
    assert token not in text and "/files/ey" not in text
