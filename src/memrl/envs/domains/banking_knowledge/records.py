"""The bank's transactional database as τ³'s ``TransactionalDB`` holds it, and the lookups its tools share.

The database is a dict of tables, each ``{"data": {record_id: record}, "notes": str}``. τ³
validates it into a pydantic model with exactly the tables in :data:`TABLES` (unknown tables are
an error, missing ones are empty, a table's unknown keys are dropped), so a database dumped here
hashes as τ³'s ``model_dump()`` does. Tools then read and write the plain dicts.

Lookups answer in τ³'s text layout (``Found N record(s) in 'table':`` followed by each record's
fields), and the deterministic record ids are the same SHA-256 prefixes τ³ derives, so a replayed
call writes the same keys.
"""

from __future__ import annotations

import hashlib
import json
import operator
from typing import Any

# τ³'s TransactionalDB fields, in declaration order (the order of its model_dump)
TABLES = ("users", "accounts", "debit_cards", "referrals", "credit_card_applications", "user_discoverable_tools",
          "user_discoverable_tool_calls", "verification_history", "credit_card_transaction_history",
          "cash_back_disputes", "bank_account_transaction_history", "credit_card_accounts",
          "agent_discoverable_tools", "task_config", "human_transfer_requests", "transaction_disputes",
          "credit_card_orders", "debit_card_orders", "credit_card_closure_reasons", "credit_card_account_flags",
          "credit_limit_increase_requests", "payment_history", "debit_card_disputes")
# the tables τ³'s query helper knows, in the order its "not found" message lists them
QUERYABLE = ("users", "accounts", "referrals", "credit_card_applications", "user_discoverable_tools",
             "user_discoverable_tool_calls", "agent_discoverable_tools", "task_config", "verification_history",
             "credit_card_transaction_history", "cash_back_disputes", "bank_account_transaction_history",
             "credit_card_accounts", "human_transfer_requests", "transaction_disputes", "credit_card_orders",
             "credit_card_closure_reasons", "credit_card_account_flags", "debit_cards", "debit_card_orders",
             "debit_card_disputes", "credit_limit_increase_requests", "payment_history")
TODAY = "11/14/2025"  # τ³'s fixed date for every banking scenario (MM/DD/YYYY)
NOW_ISO = "2025-11-14T03:40:00"


def normalize_db(db: dict[str, Any]) -> dict[str, Any]:
    """The database as τ³'s model validates and dumps it: every table, in model order, ``data`` and
    ``notes`` only. A table τ³ does not know, or a record that is not an object, is refused."""
    unknown = [k for k in db if k not in TABLES]
    if unknown:
        raise ValueError(f"banking_knowledge database: unknown table(s) {unknown} (tables: {', '.join(TABLES)})")
    out: dict[str, Any] = {}
    for name in TABLES:
        table = db.get(name) or {}
        if not isinstance(table, dict):
            raise ValueError(f"banking_knowledge database: table {name} must be an object with data and notes")
        data, notes = table.get("data", {}), table.get("notes", "")
        if not isinstance(data, dict) or any(not isinstance(r, dict) for r in data.values()):
            raise ValueError(f"banking_knowledge database: {name}.data must map record ids to objects")
        if not isinstance(notes, str):
            raise ValueError(f"banking_knowledge database: {name}.notes must be a string")
        out[name] = {"data": data, "notes": notes}
    return out


# -- deterministic ids ------------------------------------------------------------------------
def short_hash(seed: str, length: int = 16) -> str:
    """The first ``length`` hex digits of SHA-256(seed): τ³'s id scheme, so replays write the same keys."""
    return hashlib.sha256(seed.encode()).digest()[: length // 2].hex()


def transaction_id(user_id: Any, card_type: Any, merchant: Any, amount: float, category: Any) -> str:
    return "txn_" + short_hash(f"transaction:{user_id}:{card_type}:{merchant}:{amount:.2f}:{category}", 12)


def dispute_id(user_id: Any, txn_id: Any) -> str:
    return "dsp_" + short_hash(f"dispute:{user_id}:{txn_id}", 12)


def verification_id(user_id: Any, time_verified: str) -> str:
    return f"{user_id}_{time_verified.replace(' ', '_').replace(':', '').replace('-', '')}"


def limit_request_id(card_account_id: Any, user_id: Any, amount: float) -> str:
    return "cli_" + short_hash(f"cli_request:{card_account_id}:{user_id}:{amount:.2f}", 12)


# -- record lookups ----------------------------------------------------------------------------
_OPS = {"eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gte": operator.ge, "lt": operator.lt,
        "lte": operator.le,
        "contains": lambda a, b: b in a if a is not None else False,
        "startswith": lambda a, b: str(a).startswith(str(b)) if a is not None else False,
        "endswith": lambda a, b: str(a).endswith(str(b)) if a is not None else False,
        "in": lambda a, b: a in b, "nin": lambda a, b: a not in b}


def _matches(record: dict[str, Any], constraints: dict[str, Any]) -> bool:
    """``field`` or ``field__op`` constraints (τ³'s query language); a comparison that raises fails."""
    for key, expected in constraints.items():
        field, _, op = key.rpartition("__") if "__" in key else (key, "", "eq")
        try:
            if not _OPS.get(op, operator.eq)(record.get(field), expected):
                return False
        except (TypeError, ValueError):
            return False
    return True


def find(db: dict[str, Any], table: str, **constraints: Any) -> list[tuple[str, dict[str, Any]]]:
    """(record id, record) pairs of ``table`` that meet every constraint, in stored order."""
    return [(rid, rec) for rid, rec in db[table]["data"].items() if _matches(rec, constraints)]


def format_records(table: str, found: list[tuple[str, dict[str, Any]]]) -> str:
    """τ³'s listing: a count line, then each record's id and ``field: value`` lines (Python ``str``)."""
    lines = [f"Found {len(found)} record(s) in '{table}':\n"]
    for i, (rid, rec) in enumerate(found, 1):
        lines.append(f"{i}. Record ID: {rid}")
        lines.extend(f"   {k}: {v}" for k, v in rec.items())
        lines.append("")
    return "\n".join(lines)


def query_text(db: dict[str, Any], table: str, constraints: str = "{}") -> str:
    """τ³'s ``query_database_tool``: constraints as JSON text (tools build it by interpolation, so a
    quote in an argument is a JSON error, as there), the answer as text, never an exception."""
    try:
        if table not in QUERYABLE:
            return f"Error: Database '{table}' not found. Available: {list(QUERYABLE)}"
        try:
            parsed = json.loads(constraints) if constraints else {}
        except json.JSONDecodeError as err:
            return f"Error: Invalid JSON: {err}"
        found = find(db, table, **parsed)
        return format_records(table, found) if found else f"No records found in '{table}'."
    except Exception as err:  # noqa: BLE001 - τ³ answers any failure as text
        return f"Error querying database: {err}"


def lookup(db: dict[str, Any], table: str, field: str, value: Any) -> str:
    """The listing of records whose ``field`` equals ``value``, asked the way τ³'s tools ask."""
    return query_text(db, table, f'{{"{field}": "{value}"}}')


def missing(listing: str) -> bool:
    """Whether a lookup found nothing (τ³ tests the text for either wording)."""
    return "No records found" in listing or "No results found" in listing


def add(db: dict[str, Any], table: str, record_id: str, record: dict[str, Any]) -> bool:
    """Insert a record; False (and no change) when the table is unknown or the id is taken."""
    if table not in db or record_id in db[table]["data"]:
        return False
    db[table]["data"][record_id] = record
    return True


def money(value: Any) -> float:
    """A balance that may be a number or text like ``'$2,850.00'`` (τ³'s ``_parse_balance``)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value.replace("$", "").replace(",", ""))
    return 0.0


def balance(account: dict[str, Any]) -> float:
    """An account's holdings (``current_holdings``, else ``balance``)."""
    return money(account.get("current_holdings", account.get("balance", 0)))


def title(code: str) -> str:
    """``'late_fee_reversal'`` -> ``'Late Fee Reversal'``, as τ³'s result texts show codes."""
    return code.replace("_", " ").title()
