"""Recipients and destinations as data at scale: the file-based setup beside the table-based one (issue 48).

```
.venv/bin/python benchmarks/recipients_as_data.py --recipients 10000 --repeat 3
```
Two configs over one PostgreSQL source holding a small ``orders`` table:

- **file**: every recipient and its own PostgreSQL destination written in the YAML, its DSN in an
  environment variable (``dsn_env``), as a provider without tables writes them;
- **table**: the same recipients in a ``recipients_from`` table and their destinations in a
  ``destinations_table`` (one row each, its DSN by reference, ``vault:<entry>``), the DSNs sealed in a vault
  (a SQLite file, the key from ``INCSYNC_VAULT_KEY``), ``refresh_seconds: 0`` so every read sees the tables.

For each it reports, medians of ``--repeat``:

- ``validate``: ``incsync validate -c incsync.yaml`` in a fresh process, as a user runs it;
- ``definitions``: a fresh Python process importing ``incsync.definitions`` (what a code server does on load);
- ``first tick``: the recipient sensor's first tick on an empty SQLite instance (every recipient
  registered, its initial backfill requested), evaluated as the daemon evaluates it (``evaluate_tick``, its
  partition requests applied), the definitions built once before it;
- ``steady tick``: a later tick with nothing changed (for the tables, the tables read again);
- ``changed tick``: a tick after one recipient was added (a row in each table; a YAML entry for the file).

The ratio table / file is the issue's target (≤ 2× for validate and the sensor tick).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jdbc_postgres import HOST, PORT, pg_user  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
INCSYNC = str(Path(PYTHON).with_name("incsync"))
DSN_ENV = "BENCH_RAD_DEST_DSN"


def tenant(k: int) -> str:
    return f"r{k:05d}"


def create_source(dsn: str, recipients: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.orders (id bigint PRIMARY KEY, organization_id text NOT NULL, "
                     "amount numeric(12,2), updated_at timestamptz NOT NULL)")
        conn.execute("INSERT INTO public.orders SELECT g, 'org_' || (g %% %s), g, now() - (g || ' minutes')::interval "
                     "FROM generate_series(1, %s) g", [recipients, recipients * 2])
        conn.execute("CREATE TABLE public.incsync_recipients (id text PRIMARY KEY, id_in_provider_system text NOT NULL, "
                     "destination text NOT NULL, enabled boolean DEFAULT true)")
        conn.execute("CREATE TABLE public.incsync_destinations (name text PRIMARY KEY, kind text NOT NULL, "
                     "fields jsonb, secret text)")
        with conn.cursor().copy("COPY public.incsync_recipients (id, id_in_provider_system, destination) FROM STDIN") as cp:
            for k in range(recipients):
                cp.write_row((tenant(k), f"org_{k}", f"d_{tenant(k)}"))
        with conn.cursor().copy("COPY public.incsync_destinations FROM STDIN") as cp:
            for k in range(recipients):
                cp.write_row((f"d_{tenant(k)}", "postgres", json.dumps({"schema": f"s_{tenant(k)}"}),
                              f"vault:d_{tenant(k)}"))


def base_config(source_db: str, user: str) -> dict:
    return {
        "sources": [{"name": "app_db", "vendor": "postgres", "jdbc_url": f"jdbc:postgresql://{HOST}:{PORT}/{source_db}",
                     "user": user}],
        "destinations": [],
        "models": [{"model_name": "orders", "source": "app_db", "source_table": "public.orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "min_start_time_epoch": 1735689600, "frequency": "0 2 * * *"}],
        "recipients": [],
    }


def file_config(folder: Path, source_db: str, user: str, recipients: int) -> Path:
    doc = base_config(source_db, user)
    doc["destinations"] = [{"name": f"d_{tenant(k)}", "kind": "postgres", "dsn_env": DSN_ENV, "schema": f"s_{tenant(k)}"}
                           for k in range(recipients)]
    doc["recipients"] = [{"id": tenant(k), "id_in_provider_system": f"org_{k}", "destination": f"d_{tenant(k)}"}
                         for k in range(recipients)]
    path = folder / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def table_config(folder: Path, source_db: str, user: str, recipients: int, dest_dsn: str) -> Path:
    doc = base_config(source_db, user)
    # The file keeps one recipient of its own: a config needs a destination and a recipient to load.
    doc["destinations"] = [{"name": "provider_copy", "kind": "postgres", "dsn_env": DSN_ENV, "schema": "provider_copy"}]
    doc["recipients"] = [{"id": "provider", "id_in_provider_system": "org_provider", "destination": "provider_copy"}]
    doc["recipients_from"] = {"source": "app_db", "table": "public.incsync_recipients",
                              "destinations_table": "public.incsync_destinations", "refresh_seconds": 0}
    doc["vault"] = {"path": "./vault.sqlite"}
    path = folder / "incsync.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    seal_all(path, recipients, dest_dsn)
    return path


def seal_all(path: Path, recipients: int, dest_dsn: str) -> None:
    """Every destination's DSN sealed in the vault, through the vault's own table and key ring."""
    from incsync.config.secrets import vault_place
    from incsync.secrets.keys import KeyRing
    from incsync.secrets.vault import VaultTable

    place = vault_place(_file_only(path), path.parent)
    keys, table = KeyRing.load(place), VaultTable(place)
    for k in range(recipients):
        name = f"d_{tenant(k)}"
        table.put(name, keys.seal(name, dest_dsn), key_id=keys.primary_id)


def _file_only(path: Path):  # noqa: ANN202 - the file's model, its tables not read
    from incsync.config.model import IncsyncConfig
    return IncsyncConfig.model_validate(yaml.safe_load(path.read_text()))


def timed_process(args: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed


def ticks(config: Path, env: dict[str, str], add_one: callable) -> dict[str, float]:  # type: ignore[valid-type]
    """The sensor's first, steady and changed ticks, in this process, on a fresh SQLite instance."""
    import dagster as dg

    from incsync.orchestration.definitions import build_definitions
    from incsync.orchestration.sensors import RECIPIENT_SENSOR

    os.environ.update(env)
    defs = build_definitions(config)
    sensor = defs.resolve_sensor_def(RECIPIENT_SENSOR)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as home, dg.DagsterInstance.local_temp(tempdir=home) as instance:
        cursor = None
        for name in ("first tick", "steady tick", "changed tick"):
            if name == "changed tick":
                add_one()
            context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
            start = time.perf_counter()
            data = sensor.evaluate_tick(context)
            for request in data.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            figures[name] = time.perf_counter() - start
            cursor = data.cursor
            figures[f"{name} runs"] = len(data.run_requests or [])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--setups", default="file,table")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    user = pg_user()
    admin = f"host={HOST} port={PORT} user={user} dbname=postgres"
    db = f"bench_rad_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    dsn = f"host={HOST} port={PORT} user={user} dbname={db}"
    results: dict[str, dict[str, list[float]]] = {}
    try:
        create_source(dsn, args.recipients)
        from incsync.secrets.keys import new_key

        env = {**os.environ, DSN_ENV: f"postgresql://{user}@{HOST}:{PORT}/{db}", "INCSYNC_VAULT_KEY": new_key()}
        for setup in args.setups.split(","):
            for rep in range(args.repeat):
                folder = Path(tempfile.mkdtemp(prefix=f"bench-rad-{setup}-"))
                with psycopg.connect(dsn, autocommit=True) as conn:  # the changed tick's row, undone each repeat
                    conn.execute("DELETE FROM public.incsync_recipients WHERE id = 'zz_new'")
                    conn.execute("DELETE FROM public.incsync_destinations WHERE name = 'd_zz_new'")
                if setup == "file":
                    config = file_config(folder, db, user, args.recipients)
                else:
                    os.environ.update(env)
                    config = table_config(folder, db, user, args.recipients, env[DSN_ENV])
                run_env = {**env, "INCSYNC_CONFIG": str(config)}
                figures = {
                    "validate": timed_process([INCSYNC, "validate", "-c", str(config)], run_env, folder),
                    "definitions": timed_process([PYTHON, "-c", "import incsync.definitions"], run_env, folder),
                }
                tick_env = {k: v for k, v in run_env.items() if k in (DSN_ENV, "INCSYNC_VAULT_KEY", "INCSYNC_CONFIG")}
                code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                        f"import recipients_as_data as b; print(json.dumps(b.child_ticks({str(config)!r}, "
                        f"{setup!r}, {dsn!r})))")
                done = subprocess.run([PYTHON, "-c", code], env={**env, **tick_env}, cwd=folder, capture_output=True,
                                      text=True)
                if done.returncode != 0:
                    raise SystemExit(f"ticks failed:\n{done.stderr[-3000:]}")
                figures.update(json.loads(done.stdout.strip().splitlines()[-1]))
                for name, value in figures.items():
                    results.setdefault(setup, {}).setdefault(name, []).append(value)
                print(setup, rep + 1, {k: round(v, 2) for k, v in figures.items()}, flush=True)
    finally:
        if not args.keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    print(f"\n{args.recipients} recipients, medians of {args.repeat}; load average {os.getloadavg()}")
    names = [n for n in next(iter(results.values())) if not n.endswith("runs")]
    print("| measure | " + " | ".join(results) + (" | table / file |" if {"file", "table"} <= set(results) else " |"))
    print("|---" * (len(results) + 1 + ({"file", "table"} <= set(results))) + "|")
    for name in names:
        row = {s: statistics.median(results[s][name]) for s in results}
        ratio = f" | {row['table'] / row['file']:.2f}× |" if {"file", "table"} <= set(row) else " |"
        print(f"| {name} | " + " | ".join(f"{v:.2f} s" for v in row.values()) + ratio)


def child_ticks(config: str, setup: str, dsn: str) -> dict[str, float]:
    """The ticks in a fresh process (no cached config of another setup)."""
    path = Path(config)
    if setup == "file":
        def add_one() -> None:
            doc = yaml.safe_load(path.read_text())
            doc["destinations"].append({"name": "d_zz_new", "kind": "postgres", "dsn_env": DSN_ENV, "schema": "s_zz_new"})
            doc["recipients"].append({"id": "zz_new", "id_in_provider_system": "org_new", "destination": "d_zz_new"})
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
    else:
        def add_one() -> None:
            from incsync.config.secrets import vault_place
            from incsync.secrets.keys import KeyRing
            from incsync.secrets.vault import VaultTable
            place = vault_place(_file_only(path), path.parent)
            keys = KeyRing.load(place)
            VaultTable(place).put("d_zz_new", keys.seal("d_zz_new", os.environ[DSN_ENV]), key_id=keys.primary_id)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO public.incsync_destinations VALUES "
                             "('d_zz_new', 'postgres', '{\"schema\": \"s_zz_new\"}', 'vault:d_zz_new')")
                conn.execute("INSERT INTO public.incsync_recipients VALUES ('zz_new', 'org_new', 'd_zz_new', true)")
    return ticks(path, dict(os.environ), add_one)


if __name__ == "__main__":
    main()
