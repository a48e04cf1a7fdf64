"""The demo's last step: a recipient reads its copy where it works, through Delta Sharing (docs/sharing.md)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

SHARING_LISTEN = "127.0.0.1:8088"  # the demo's `sharing.listen`: what its profiles name
SHARED_TABLE = "sales.orders"  # the demo's `sharing.tables`: orders listed as sales.orders in every share
SHARING_FILES = (".incsync-sharing.sqlite", ".incsync-sharing.sqlite-wal", ".incsync-sharing.sqlite-shm")


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (as a user would type it)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def share_step(workdir: Path, config_file: Path, source: pa.Table) -> bool:
    """4. The first recipient with a Delta copy gets its Delta Sharing profile from `incsync share create`; the
    demo reads the copy back through the server (on a thread, a spare port) and prints how a user reads it with
    pandas. False when the read back does not hold exactly the recipient's rows."""
    import argparse
    import json

    import pyarrow.compute as pc

    from incsync.cli.share import cmd_share_create
    from incsync.config.load import load_config
    from incsync.sharing.catalog import DELTA, Catalog

    config = load_config(config_file)
    catalog = Catalog(config)
    shared = next((r for r in config.recipients if catalog.share_of(r.id, DELTA) is not None), None)
    print("\n4. a recipient reads its copy where it works: Delta Sharing (docs/sharing.md)")
    if shared is None:
        print("  no recipient's copy here is a Delta table, which Delta Sharing serves: run `incsync demo` with acme's "
              "default destination to see it (Iceberg copies: `incsync share create` and pyiceberg, docs/sharing.md)")
        return True
    profile_file = workdir / f"{shared.id}.share"
    cmd_share_create(argparse.Namespace(config=str(config_file), recipient=shared.id, output=_shown(profile_file)))
    want = source.filter(pc.equal(source["organization_id"], shared.id_in_provider_system)).num_rows
    got = _read_back(config_file, json.loads(profile_file.read_text()), f"{shared.id}.{SHARED_TABLE}")
    if got is not None:
        print(f"  read back through `incsync serve` with delta-sharing: {got} rows, {'exactly' if got == want else 'NOT'} "
              f"{shared.id}'s {want}")
    url = f"{_shown(profile_file)}#{shared.id}.{SHARED_TABLE}"
    command = f"import delta_sharing; print(delta_sharing.load_as_pandas('{url}'))"
    print(f"\n  {shared.id}'s profile is {_shown(profile_file)} (endpoint http://{SHARING_LISTEN}/delta-sharing). "
          "To read it with pandas:")
    print(f"    .venv/bin/incsync serve -c {_shown(config_file)}    # in another terminal; Ctrl-C stops it")
    print("    .venv/bin/pip install delta-sharing==1.4.1")
    print(f'    .venv/bin/python -c "{command}"')
    return got is None or got == want


def _read_back(config_file: Path, contents: dict[str, object], table: str) -> int | None:
    """The rows of ``table`` the official client reads through a server on a spare port with the profile's token;
    None when `delta-sharing` is not installed (`make demo` installs only incsync)."""
    import json
    import socket
    import tempfile

    try:
        import delta_sharing
    except ImportError:
        print("  (delta-sharing is not installed here, so the demo did not read the copy back itself)")
        return None
    from incsync.sharing.server import ServerThread, build_service

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = build_service(config_file)
    service.public_url = f"http://127.0.0.1:{port}"  # the file URLs it answers point at the spare port too
    with ServerThread(service, port=port), tempfile.TemporaryDirectory() as tmp:
        spare = Path(tmp) / "spare.share"  # the same token, the spare port's endpoint
        spare.write_text(json.dumps({**contents, "endpoint": f"http://127.0.0.1:{port}/delta-sharing"}))
        return len(delta_sharing.load_as_pandas(f"{spare}#{table}"))
