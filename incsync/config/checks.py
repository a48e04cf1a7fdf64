"""Cross-checks of a parsed configuration: what no single field can check alone (names that must
exist, windows, schedules, column types), one message per problem."""

from __future__ import annotations

from incsync.config.base import ID_PATTERN, ID_RE, IDENTIFIER_RE, column_name_problem, listed_names, table_name_problem
from incsync.config.destinations import DESTINATION_MODELS
from incsync.config.model import IncsyncConfig, ModelConfig
from incsync.core.cron import is_valid_cron
from incsync.core.limits import MAX_NAME_LENGTH, MAX_VALUE_LENGTH, tag_length_problem, too_long


def _window_problem(seconds: int) -> str | None:
    if seconds < 86_400 and 86_400 % seconds == 0 and (seconds % 60 == 0):
        minutes = seconds // 60
        if (minutes < 60 and 60 % minutes == 0) or (minutes % 60 == 0 and 24 % (minutes // 60) == 0):
            return None
    if seconds == 86_400:
        return None
    return (
        f"{seconds} seconds cannot form a window grid; use whole minutes dividing an hour, "
        "whole hours dividing a day, or 86400 (e.g. 900, 3600, 21600, 86400)"
    )


def _cluster_problems(where: str, m: ModelConfig) -> list[str]:
    """``cluster_by`` names columns a key never changes (docs/maintenance.md), each once."""
    problems = [f'{where}.cluster_by: column {c!r} {p}' for c in m.cluster_by or [] if (p := column_name_problem(c))]
    for i, column in enumerate(m.cluster_by or []):
        if column in (m.cluster_by or [])[:i]:
            problems.append(f'{where}.cluster_by[{i}]: column "{column}" is named twice; name it once')
        elif column == m.last_modified_column:
            problems.append(f'{where}.cluster_by: "{column}" is the last_modified_column, which every change moves; '
                            "cluster by a column a key never changes, such as its creation date")
        elif column in m.primary_key:
            problems.append(f'{where}.cluster_by: "{column}" is in the primary_key, by which files are already '
                            "ordered and pruned; name another column or drop cluster_by")
    return problems


def cross_check_problems(cfg: IncsyncConfig) -> list[str]:
    """Problems pydantic cannot see alone: references, names, column lists."""
    problems: list[str] = []

    def unique(section: str, names: list[str]) -> None:
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                problems.append(f'{section}[{i}]: duplicate name "{name}"; names must be unique')
            seen.add(name)

    unique("sources", [s.name for s in cfg.sources])
    unique("destinations", [d.name for d in cfg.destinations])
    unique("models", [m.model_name for m in cfg.models])
    unique("recipients", [r.id for r in cfg.recipients])
    for i, s in enumerate(cfg.sources):
        if not ID_RE.match(s.name):
            problems.append(f'sources[{i}].name: "{s.name}" must match {ID_PATTERN}')
    for i, d in enumerate(cfg.destinations):
        if not ID_RE.match(d.name):
            problems.append(f'destinations[{i}].name: "{d.name}" must match {ID_PATTERN}')

    from incsync.storage.names import option_problems, url_problem

    located = [(f"sources[{i}]", s) for i, s in enumerate(cfg.sources)] + [
        (f"destinations[{i}]", d) for i, d in enumerate(cfg.destinations)]
    for where, item in located:
        problems.extend(option_problems(getattr(item, "storage_options", {}), f"{where}.storage_options"))
        if problem := url_problem(getattr(item, "path", None)):
            problems.append(f"{where}.path: {problem}")
    problems.extend(option_problems(cfg.staging_storage_options, "staging_storage_options"))
    if problem := url_problem(cfg.staging_dir):
        problems.append(f"staging_dir: {problem}")

    source_names = [s.name for s in cfg.sources]
    for i, m in enumerate(cfg.models):
        where = f"models[{i}]"
        if not IDENTIFIER_RE.match(m.model_name):
            problems.append(f'{where}.model_name: "{m.model_name}" must be a letter or _ followed by letters, digits or _')
        if m.source not in source_names:
            problems.append(f'{where}.source: "{m.source}" is not a configured source; known: [{", ".join(source_names)}]')
        if m.source_table is not None and (
            problem := table_name_problem(m.source_table, schema_tenanted=m.tenancy == "schema")
        ):
            problems.append(f'{where}.source_table: "{m.source_table}" {problem}')
        if problem := _window_problem(m.max_transfer_time_window_seconds):
            problems.append(f"{where}.max_transfer_time_window_seconds: {problem}")
        named = [*m.primary_key, m.last_modified_column, *([m.organization_column] if m.organization_column else [])]
        for col in dict.fromkeys([*(m.columns or []), *named]):
            if problem := column_name_problem(col):
                problems.append(f"{where}: column {col!r} {problem}")
        if m.columns:
            listed = ", ".join(m.columns)
            for field, cols in (
                ("primary_key", m.primary_key),
                ("last_modified_column", [m.last_modified_column]),
                ("organization_column", [m.organization_column] if m.organization_column else []),
                ("is_deleted_column", [m.is_deleted_column] if m.is_deleted_column else []),
                ("cluster_by", m.cluster_by or []),
            ):
                for col in cols:
                    if col not in m.columns:
                        problems.append(
                            f'{where}.{field}: column "{col}" is not in columns [{listed}]; fix its spelling or add it to columns'
                        )
            unique(f"{where}.columns", list(m.columns))
        problems.extend(_column_types_problems(where, m))
        problems.extend(_cluster_problems(where, m))
        if m.last_modified_timezone:
            try:
                from zoneinfo import ZoneInfo

                ZoneInfo(m.last_modified_timezone)
            except Exception:  # noqa: BLE001 - any failure means the name is unknown
                problems.append(f'{where}.last_modified_timezone: "{m.last_modified_timezone}" is not an IANA zone name')
        if not is_valid_cron(m.frequency):
            problems.append(f'{where}.frequency: "{m.frequency}" is not a cron expression (e.g. "*/15 * * * *")')

    if not is_valid_cron(cfg.maintenance.frequency):
        problems.append(f'maintenance.frequency: "{cfg.maintenance.frequency}" is not a cron expression (e.g. "0 3 * * *")')
    destination_names = [d.name for d in cfg.destinations]
    shared = " or ".join(kind for kind, model in DESTINATION_MODELS.items() if model.shares_location)
    users: dict[str, list[str]] = {}
    for r in cfg.recipients:
        users.setdefault(r.destination, {})[r.id] = None  # ordered, and O(1) per recipient at 10,000
    users = {name: list(ids) for name, ids in users.items()}
    for i, d in enumerate(cfg.destinations):
        # Unless its kind shares a location (keys per recipient), a destination holds one recipient's copy:
        # tables are keyed on the primary key alone, so a second tenant would merge into (and full refreshes
        # would wipe) the first.
        if not d.shares_location and len(users.get(d.name, [])) > 1:
            problems.append(
                f'destinations[{i}]: "{d.name}" is used by recipients {", ".join(users[d.name])}; {"an" if d.kind[0] in "aeiou" else "a"} '
                f"{d.kind} destination holds one recipient's copy, so give each recipient its own ({shared} may be shared)"
            )
    known_destinations = set(destination_names)
    known = listed_names(destination_names)  # once: each recipient naming a missing one repeats it
    for i, r in enumerate(cfg.recipients):
        if r.destination not in known_destinations:
            problems.append(
                f'recipients[{i}].destination: "{r.destination}" is not a configured destination; known: [{known}]'
            )
    problems += _schema_name_problems(cfg)
    from incsync.config.products import product_problems

    problems += product_problems(cfg)
    from incsync.config.jobs import audit_problems

    problems += audit_problems(cfg)
    from incsync.config.sharing import sharing_problems

    problems += sharing_problems(cfg)
    from incsync.config.secrets import vault_problems

    problems += vault_problems(cfg)
    from incsync.spark.cluster import cluster_problems

    problems += cluster_problems(cfg.spark)
    return problems


def _schema_name_problems(cfg: IncsyncConfig) -> list[str]:
    """Each recipient whose schema a schema-tenanted database model cannot read (one line per recipient)."""
    from incsync.core.schema_names import schema_name_problem, shown

    vendors = {s.name: getattr(s, "vendor", None) for s in cfg.sources}
    tenanted = [m for m in cfg.models if m.tenancy == "schema" and vendors.get(m.source) in ("postgres", "mysql", "mariadb")]
    from incsync.config.products import product_models, receives

    problems, held = [], product_models(cfg)
    for i, r in enumerate(cfg.recipients if tenanted else []):
        for m in tenanted:
            if not receives(cfg, r, m.model_name, held=held):
                continue  # a recipient never reads the schema of a model it does not receive
            vendor = vendors[m.source]
            if problem := schema_name_problem(vendor, r.id_in_provider_system, source_query=m.source_query is not None):  # type: ignore[arg-type]  # vendor is one of the JDBC vendors here; the checker cannot narrow the literal
                problems.append(f'recipients[{i}].id_in_provider_system: schema {shown(r.id_in_provider_system)} of '
                                f"schema-tenanted model {m.model_name} (source {m.source}, {vendor}) {problem}")
                break
    return problems


def _column_types_problems(where: str, m: ModelConfig) -> list[str]:
    if not m.column_types:
        return []  # no type map to check: skip importing it (pyarrow), which a plain config never needs here
    from incsync.core.typemap import OVERRIDE_HELP, override_arrow

    problems = []
    for col, kind in (m.column_types or {}).items():
        if problem := column_name_problem(col):
            problems.append(f"{where}.column_types: column {col!r} {problem}")
        elif col == m.last_modified_column:
            problems.append(f'{where}.column_types: "{col}" is the last_modified_column, which is read as a timestamp; remove it')
        elif m.columns and col not in m.columns:
            problems.append(f'{where}.column_types: column "{col}" is not in columns [{", ".join(m.columns)}]')
        if not isinstance(kind, str) or override_arrow(kind) is None:
            problems.append(f'{where}.column_types.{col}: "{kind}" is not a type incsync reads as; use {OVERRIDE_HELP}')
    return problems


def length_problems(cfg: IncsyncConfig) -> list[str]:
    """One problem per name, id, tenant value or tag past its limit."""
    problems: list[str] = []

    def check(where: str, what: str, text: str | None, limit: int = MAX_NAME_LENGTH) -> None:
        if text is not None and (problem := too_long(what, text, limit)):
            problems.append(f"{where}: {problem}")

    for i, s in enumerate(cfg.sources):
        check(f"sources[{i}].name", "name", s.name)
    for i, d in enumerate(cfg.destinations):
        check(f"destinations[{i}].name", "name", d.name)
        check(f"destinations[{i}].schema", "schema", getattr(d, "schema_name", None))
    for i, m in enumerate(cfg.models):
        check(f"models[{i}].model_name", "model name", m.model_name)
    for i, r in enumerate(cfg.recipients):
        check(f"recipients[{i}].id", "recipient id", r.id)
        check(f"recipients[{i}].id_in_provider_system", "tenant value", r.id_in_provider_system, MAX_VALUE_LENGTH)
        for key, value in r.tags.items():
            if problem := tag_length_problem(key, value):
                problems.append(f"recipients[{i}].tags: {problem}")
    return problems
