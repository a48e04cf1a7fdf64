"""The onboarding page's HTML: plain forms, no script, every value escaped; a secret is never written back."""

from __future__ import annotations

from html import escape

from incsync.onboarding.connect import ModelStatus
from incsync.onboarding.forms import Entered, Input

STYLE = """body{font:15px/1.45 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#1d2330}
h1{font-size:1.4rem}label{display:block;font-weight:600;margin-top:.9rem}small{display:block;color:#5a6170}
input,select{font:inherit;padding:.35rem .5rem;width:100%;box-sizing:border-box;border:1px solid #b9c0cc;border-radius:4px}
input[type=checkbox]{width:auto}.kinds a{margin-right:.8rem}.kinds b{margin-right:.8rem}
.bad{background:#fdecea;border-left:4px solid #c62828;padding:.6rem .8rem;margin:1rem 0}
.good{background:#e8f5e9;border-left:4px solid #2e7d32;padding:.6rem .8rem;margin:1rem 0}
.err{color:#c62828;font-weight:600}button{font:inherit;margin:1.2rem .6rem 0 0;padding:.45rem 1rem}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #dde1e8;padding:.35rem;text-align:left}"""


def page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>'
            f"<body><h1>{escape(title)}</h1>{body}</body></html>")


def refused(message: str) -> str:
    return page("This link cannot be used", f"<p>{escape(message)}</p>")


def _input(field: Input, entered: Entered | None) -> str:
    value = entered.shown(field.name) if entered is not None else field.default
    problem = entered.problems.get(field.name) if entered is not None else None
    ident = f"f_{field.name}"
    required = " required" if field.required else ""
    if field.type == "select":
        options = "".join(f'<option{" selected" if c == value else ""}>{escape(c)}</option>' for c in field.choices)
        control = f'<select id="{ident}" name="{escape(field.name)}">{options}</select>'
    elif field.type == "password":
        control = f'<input id="{ident}" name="{escape(field.name)}" type="password" autocomplete="new-password" value="">'
    elif field.type == "checkbox":
        checked = " checked" if value in ("true", "True") else ""
        control = f'<input id="{ident}" name="{escape(field.name)}" type="checkbox"{checked}>'
    else:
        kind = "number" if field.type == "number" else "text"
        control = f'<input id="{ident}" name="{escape(field.name)}" type="{kind}" value="{escape(value)}"{required}>'
    error = f'<span class="err">{escape(problem)}</span>' if problem else ""
    return f'<label for="{ident}">{escape(field.name)}</label><small>{escape(field.help)}</small>{control}{error}'


def form(*, recipient: str, kinds: list[str], kind: str, inputs: list[Input], csrf: str, entered: Entered | None = None,
         outcome: str | None = None, ok: bool = False) -> str:
    """The form of ``kind`` with the other kinds as links; ``outcome``: a test's or save's result."""
    chooser = " ".join(f"<b>{escape(k)}</b>" if k == kind else f'<a href="?kind={escape(k)}">{escape(k)}</a>' for k in kinds)
    said = ""
    if outcome is not None:
        said = f'<div class="{"good" if ok else "bad"}" role="status">{escape(outcome)}</div>'
    elif entered is not None and entered.problems.get(""):
        said = f'<div class="bad" role="status">{escape(entered.problems[""])}</div>'
    fields = "".join(_input(f, entered) for f in inputs)
    body = (f"<p>Connect the destination where <b>{escape(recipient)}</b> receives its data. Test the connection, then "
            "save it. Secrets are kept encrypted and never shown again.</p>"
            f'<p class="kinds">Kind: {chooser}</p>{said}'
            f'<form method="post" action="">'
            f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
            f'<input type="hidden" name="recipient" value="{escape(recipient)}">'
            f'<input type="hidden" name="kind" value="{escape(kind)}">{fields}'
            '<button name="action" value="test" type="submit">Test connection</button>'
            '<button name="action" value="save" type="submit">Save</button></form>')
    return page("Connect your destination", body)


def status(*, recipient: str, kind: str | None, models: list[ModelStatus], failures: list[str]) -> str:
    rows = "".join(f"<tr><td>{escape(m.model)}</td><td>{escape(m.last_transfer)}</td><td>{escape(m.data_up_to)}</td>"
                   f"<td>{'-' if m.rows is None else m.rows}</td><td>{escape(m.problem or '')}</td></tr>" for m in models)
    table = ("<table><tr><th>model</th><th>last transfer (UTC)</th><th>data up to</th><th>rows</th><th></th></tr>"
             f"{rows}</table>") if models else "<p>No model has been transferred yet; the first transfer starts shortly.</p>"
    problems = "".join(f'<div class="bad">{escape(f)}</div>' for f in failures)
    body = (f'<p class="good">Your {escape(kind or "")} destination is connected. What <b>{escape(recipient)}</b> '
            f"has received:</p>{table}{problems}")
    return page("Your data", body)
