"""The `sharing:` section: how `incsync serve` serves each recipient's copy over Delta Sharing and an Iceberg REST
catalog (docs/sharing.md), and the names a recipient's share gives its models."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from incsync.config.base import StrictModel

MAX_NAME = 255
MIN_URL_LIFETIME = 10


def share_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a schema or table in Delta Sharing; None when it can. The protocol refuses spaces,
    slashes, periods and control characters, and compares names without case. (Shares are named after recipient
    ids, which hold none of these.)"""
    if not name:
        return "is empty"
    if len(name) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if any(ch in " /." or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "holds a space, a slash, a control character or a period"
    return None


class SharedName(StrictModel):
    """Where one model appears in every recipient's share."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_name: str | None = Field(
        default=None, alias="schema",
        description="The schema it is listed under; unset: the section's `schema` (or its source, with `schema_by_source`).",
    )
    table: str | None = Field(default=None, description="The table's name in the share; unset: the model's name.")


class SharingConfig(StrictModel):
    """`incsync serve`: one HTTP server answering the Delta Sharing protocol and a read-only Iceberg REST catalog for
    every recipient whose copies are tables the provider hosts; each recipient reads only its own share, with its
    own token."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    listen: str = Field(
        default="127.0.0.1:8088", pattern=r"^\[?[A-Za-z0-9.:_-]+\]?:\d{1,5}$",
        description="`host:port` the server listens on (`0.0.0.0:8088` for every interface).",
    )
    public_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s?#]+$",
        description="The server's URL as recipients reach it (behind a TLS proxy: its `https://` URL). Profiles name "
        "`<public_url>/delta-sharing` and `<public_url>/iceberg`, and file URLs start with it. Unset: `http://<listen>`.",
    )
    token_lifetime_days: float = Field(
        default=365, gt=0, le=3650,
        description="How long a bearer token minted by `incsync share create|rotate` stays valid.",
    )
    url_lifetime_seconds: int = Field(
        default=900, ge=MIN_URL_LIFETIME, le=86_400,
        description="How long a file URL in a query's answer, and the storage credentials the Iceberg catalog vends with "
        "a table, stay valid. Keep it below the destinations' vacuum retention, so a reader never finds a file removed "
        "under it.",
    )
    token_store: str | None = Field(
        default=None,
        description="SQLite file holding the tokens' SHA-256 digests (never a token) and the file-URL signing key; "
        "relative paths are relative to the file. Unset: `.incsync-sharing.sqlite` beside the file.",
    )
    signing_key_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of an environment variable holding the key that signs file URLs and Iceberg storage "
        "credentials (at least 32 characters), for servers that share no token store. Unset: a random key kept in "
        "the token store.",
    )
    schema_name: str = Field(
        default="default", alias="schema",
        description="The schema every model's table is listed under, unless `tables` names another.",
    )
    schema_by_source: bool = Field(
        default=False,
        description="List each model under its source's name (its Dagster asset group) instead of `schema`.",
    )
    tables: dict[str, SharedName] = Field(
        default_factory=dict,
        description="model_name -> `{schema: S, table: T}` (either may be left out): the names a model is shared "
        "under, e.g. `orders: {schema: sales}`; default: `schema` and the model's name. The share itself is named "
        "after the recipient's id.",
    )


def sharing_problems(cfg: object) -> list[str]:
    """What `incsync validate` says about `sharing:` (``cfg`` is the whole file's IncsyncConfig)."""
    sharing: SharingConfig = cfg.sharing
    models = cfg.models
    names = [m.model_name for m in models]
    problems = [f'sharing.tables.{name}: "{name}" is not a model; known: [{", ".join(names[:20])}]'
                for name in sharing.tables if name not in names]
    if problem := share_name_problem(sharing.schema_name):
        problems.append(f'sharing.schema: "{sharing.schema_name}" {problem}; Delta Sharing refuses such names')
    seen: dict[tuple[str, str], str] = {}
    for model in models:
        schema, table = shared_schema(sharing, model), shared_table(sharing, model.model_name)
        named = sharing.tables.get(model.model_name)
        own_schema = sharing.schema_by_source or (named is not None and named.schema_name is not None)
        for what, name in ((("schema", schema),) if own_schema else ()) + (("table", table),):
            if problem := share_name_problem(name):
                problems.append(f'sharing: model {model.model_name} would be shared with {what} "{name}", which '
                                f"{problem}; name another under sharing.tables.{model.model_name}.{what}")
        key = (schema.casefold(), table.casefold())
        if key in seen:
            problems.append(f"sharing: models {seen[key]} and {model.model_name} would both be shared as "
                            f"{schema}.{table} (names ignore case); name one otherwise under sharing.tables")
        seen.setdefault(key, model.model_name)
    return problems + retention_problems(cfg)


def retention_problems(cfg: object) -> list[str]:
    """A destination `incsync serve` hands out file URLs of whose vacuum would delete a file before its URL expires:
    refused when the file has a `sharing:` section (``cfg`` is the whole file's IncsyncConfig)."""
    if "sharing" not in cfg.model_fields_set:
        return []
    lifetime = cfg.sharing.url_lifetime_seconds
    used = {r.destination for r in cfg.recipients}
    problems = []
    for i, dest in enumerate(cfg.destinations):
        retention = getattr(dest, "retention_hours", None)
        if not dest.served_by_sharing or dest.name not in used or retention is None or retention * 3600 >= lifetime:
            continue
        hours = -(-lifetime // 3600)  # rounded up
        problems.append(
            f'destinations[{i}]: "{dest.name}" keeps the files a newer version replaced for retention_hours: {retention} '
            f"({retention * 3600} s), less than sharing.url_lifetime_seconds: {lifetime}: `incsync maintain` could delete "
            f"a file while a reader still holds its URL from `incsync serve`; set retention_hours to {hours} or more"
            + (f", or sharing.url_lifetime_seconds to {retention * 3600} or less" if retention * 3600 >= MIN_URL_LIFETIME else "")
            + " (docs/sharing.md#vacuum-and-file-urls)")
    return problems


def shared_schema(sharing: SharingConfig, model: object) -> str:
    """The schema ``model`` (a ModelConfig) is listed under."""
    named = sharing.tables.get(model.model_name)
    if named is not None and named.schema_name:
        return named.schema_name
    return model.source if sharing.schema_by_source else sharing.schema_name


def shared_table(sharing: SharingConfig, model_name: str) -> str:
    """The name ``model_name`` has in every share."""
    named = sharing.tables.get(model_name)
    return named.table if named is not None and named.table else model_name
