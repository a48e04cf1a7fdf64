"""`incsync validate`: the configuration file checked, its Dagster definitions loaded as a code location loads
them, and what the files on this machine tell or, with --connect, every source and destination reached (and
schema drift reported)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from incsync.errors import ConfigError
from incsync.paths import config_path


def cmd_validate(args: argparse.Namespace) -> int:
    from incsync.cli.output import fix_separator
    from incsync.cli.validate_checks import ignored_cluster_by, lake_schema_problems, unset_variables
    from incsync.config.lines import problem_lines
    from incsync.config.load import load_config
    from incsync.config.locations import location_notes
    from incsync.orchestration.definitions import check_loadable

    file = config_path(args.config)
    config = load_config(file)
    check_loadable(file, config=config)  # a file validate accepts is one `dagster dev` loads
    summary = (f"{len(config.sources)} sources, {len(config.destinations)} destinations, "
               f"{len(config.models)} models, {len(config.recipients)} recipients")
    text = file.read_text()
    from incsync.config.rows import refused_lines

    refused = refused_lines(config)  # table rows left out: each disables only its own recipients
    notes = [f"note: {note}" for note in location_notes(config, Path.cwd())]
    problems: list[str] = []
    drift: list[str] = []
    warnings: list[str] = []
    if args.connect:
        from incsync.cli.connectivity import check_connectivity

        problems = check_connectivity(config)
        if not problems:
            from incsync.cli.connectivity import check_drift  # schema drift: informational lines, never a failure

            drift = check_drift(config)
    else:
        # Without --connect: what the files on this machine already tell (no Spark, no database).
        schema_problems, warnings = lake_schema_problems(config)
        if schema_problems:
            raise ConfigError(str(file), schema_problems, problem_lines(text, schema_problems))
        warnings += unset_variables(config)
    warnings += ignored_cluster_by(config)
    at_tables = problem_lines(text, ["recipients_from: the tables"]) * len(refused)  # a row's line is the tables'
    lines = at_tables + problem_lines(text, problems)
    problems = refused + problems
    located = ConfigError(str(file), [fix_separator(p) for p in problems], lines).located()
    warned = ConfigError(str(file), [fix_separator(w) for w in warnings], problem_lines(text, warnings)).located()
    if getattr(args, "json", False):
        from incsync.cli.output import print_json

        print_json({"file": str(file), "ok": not problems, "summary": summary, "notes": notes,
                    "problems": located, "warnings": warned, "drift": drift})
        return 1 if problems else 0
    for line in warned:
        print(f"warning: {line}", file=sys.stderr)
    if problems:
        for line in located:
            print(f"error: {line}", file=sys.stderr)
        if refused:
            print(f"{file}: {len(config.refused_rows)} table row(s) refused, the rest loads ({summary})", file=sys.stderr)
        return 1
    print(f"{file}: OK ({summary})")
    for note in notes:
        print(note)
    if args.connect:
        print("every source and destination answered")
        for line in drift:
            print(f"  {line}")
    return 0
