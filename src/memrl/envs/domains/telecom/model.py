"""Telecom data model: record layouts, enum values, the fixed "today" and τ²-style rendering.

The databases stay plain dicts (memrl hashes and deep-merges them), but every
record is normalised on load to τ²-bench's field order and defaults. That keeps
the JSON an agent reads identical to what τ²-bench shows for the same record,
and makes two environments built from the same files hash the same.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from enum import Enum
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

# τ²-bench freezes the calendar so that bills and usage cycles are reproducible.
TODAY = dt.date(2025, 2, 25)

# -- agent database: (field, default) in τ²-bench's model order; ... means required ---------------
PLAN = (("plan_id", ...), ("name", ...), ("data_limit_gb", ...), ("price_per_month", ...),
        ("data_refueling_price_per_gb", ...))
DEVICE = (("device_id", ...), ("device_type", ...), ("model", ...), ("imei", None), ("is_esim_capable", ...),
          ("activated", False), ("activation_date", None), ("last_esim_transfer_date", None))
LINE = (("line_id", ...), ("phone_number", ...), ("status", "Pending Activation"), ("plan_id", ...),
        ("device_id", None), ("data_used_gb", 0.0), ("data_refueling_gb", 0.0), ("roaming_enabled", False),
        ("contract_end_date", None), ("last_plan_change_date", None), ("last_sim_replacement_date", None),
        ("suspension_start_date", None))
LINE_ITEM = (("description", ...), ("amount", ...), ("date", ...), ("item_type", ...))
BILL = (("bill_id", ...), ("customer_id", ...), ("period_start", ...), ("period_end", ...), ("issue_date", ...),
        ("total_due", ...), ("due_date", ...), ("line_items", []), ("status", "Draft"))
ADDRESS = (("street", ...), ("city", ...), ("state", ...), ("zip_code", ...))
PAYMENT_METHOD = (("method_type", ...), ("account_number_last_4", ...), ("expiration_date", ...))
CUSTOMER = (("customer_id", ...), ("full_name", ...), ("date_of_birth", ...), ("email", ...),
            ("phone_number", ...), ("address", ...), ("account_status", "Pending Verification"),
            ("payment_methods", []), ("line_ids", []), ("bill_ids", []), ("created_at", "2025-01-01"),
            ("last_extension_date", None), ("goodwill_credit_used_this_year", 0.0))
# Fields τ²-bench types as datetimes: its JSON and its database hash show them as ``str(datetime)``
# (a space, not 'T'), so they are stored that way. (An unset ``created_at`` is τ²'s default *date*.)
DATETIME_FIELDS = ("activation_date", "last_esim_transfer_date", "created_at")

LINE_ACTIVE, LINE_SUSPENDED, LINE_PENDING = "Active", "Suspended", "Pending Activation"
BILL_DRAFT, BILL_AWAITING, BILL_PAID, BILL_OVERDUE = "Draft", "Awaiting Payment", "Paid", "Overdue"

# -- user database (the phone and the world around it) -----------------------------------------------
SIM_STATUSES = ("active", "missing", "locked_pin", "locked_puk")
NETWORK_MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
SIGNALS = ("none", "poor", "fair", "good", "excellent")
APN_DEFAULT: dict[str, Any] = {"apn_name": "internet", "reset_at_reboot": False, "mms_apn": "mms",
                               "mmsc_url": "http://mms.carrier.com/mms/wapenc", "mms_proxy": None, "mms_port": None}


class APNNames(str, Enum):
    INTERNET = "internet"
    BROKEN = "broken"


class APNSettings(BaseModel):
    """τ²-bench's APN model, used where its ``set_apn_settings`` builds one from the caller's dict: a bad
    field fails with the same pydantic message ("1 validation error for APNSettings ...")."""

    model_config = ConfigDict(extra="forbid")

    apn_name: APNNames = APNNames.INTERNET
    reset_at_reboot: bool = False
    mms_apn: Optional[str] = "mms"
    mmsc_url: Optional[str] = "http://mms.carrier.com/mms/wapenc"
    mms_proxy: Optional[str] = None
    mms_port: Optional[int] = None


APN_NAMES = tuple(name.value for name in APNNames)
PERMISSIONS = ("sms", "storage", "phone", "network")
# The VPN that connect_vpn attaches. τ²-bench attaches one object, a class attribute shared by every
# phone of the process, and break_vpn lowers *its* performance: once any VPN was broken, every later
# connection in the process is "poor" too (its own evaluator's environments included). memrl keeps
# that: this dict is attached by reference, never copied.
SHARED_VPN: dict[str, Any] = {}


def reset_shared_vpn() -> None:
    """The shared VPN as a fresh τ²-bench process has it (performance "excellent")."""
    SHARED_VPN.clear()
    SHARED_VPN.update(server_address="192.168.1.1", protocol="OpenVPN", server_performance="excellent")


reset_shared_vpn()
DEVICE_DEFAULT: dict[str, Any] = {
    "sim_card_status": "active", "sim_card_missing": False, "airplane_mode": False,
    "network_signal_strength": "good", "network_technology_connected": "5G", "network_connection_status": "connected",
    "battery_level": 80, "data_enabled": True, "roaming_enabled": False, "network_mode_preference": "4g_5g_preferred",
    "active_apn_settings": APN_DEFAULT, "wifi_enabled": False, "wifi_connected": False, "wifi_ssid": None,
    "wifi_signal_strength": "none", "wifi_calling_enabled": False, "wifi_calling_mms_over_wifi": False,
    "data_saver_mode": False, "vpn_enabled_setting": False, "vpn_connected": False, "vpn_details": None,
    "app_statuses": {
        "messaging": {"app_name": "messaging",
                      "permissions": {"sms": True, "storage": True, "phone": True, "network": False}},
        "browser": {"app_name": "browser",
                    "permissions": {"sms": False, "storage": True, "phone": False, "network": True}},
    },
}
SURROUNDINGS_DEFAULT: dict[str, Any] = {
    "name": None, "phone_number": None, "is_abroad": False, "roaming_allowed": False,
    "signal_strength": {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"},
    "mobile_data_usage_exceeded": False, "line_active": True, "payment_request": None,
}


def _record(rec: dict[str, Any], layout: tuple[tuple[str, Any], ...], kind: str) -> dict[str, Any]:
    """``rec`` with every field of ``layout`` in order (defaults filled); unknown fields are an error."""
    extra = set(rec) - {name for name, _ in layout}
    if extra:
        raise ValueError(f"telecom {kind} record has unknown fields: {sorted(extra)}")
    out: dict[str, Any] = {}
    for name, default in layout:
        if name in rec:
            value = rec[name]
            out[name] = value.replace("T", " ") if name in DATETIME_FIELDS and isinstance(value, str) else value
        elif default is ...:
            raise ValueError(f"telecom {kind} record lacks {name!r}: {rec}")
        else:
            out[name] = copy.deepcopy(default)
    return out


AGENT_DB_ORDER = ("plans", "customers", "lines", "bills", "devices")  # τ²'s TelecomDB field order


def _in_order(d: dict[str, Any], keys: Any) -> None:
    """Reorder ``d`` in place: ``keys`` first, in that order (τ²'s model order), anything else after."""
    for key in [k for k in keys if k in d] + [k for k in d if k not in keys]:
        d[key] = d.pop(key)


def normalize_db(db: dict[str, Any]) -> None:
    """Bring the agent database (``db.toml``) to τ²-bench's full layout, in place."""
    db["plans"] = [_record(p, PLAN, "plan") for p in db.get("plans", [])]
    db["devices"] = [_record(d, DEVICE, "device") for d in db.get("devices", [])]
    db["lines"] = [_record(x, LINE, "line") for x in db.get("lines", [])]
    bills = []
    for b in db.get("bills", []):
        b = _record(b, BILL, "bill")
        b["line_items"] = [_record(i, LINE_ITEM, "line item") for i in b["line_items"]]
        bills.append(b)
    db["bills"] = bills
    customers = []
    for c in db.get("customers", []):
        c = _record(c, CUSTOMER, "customer")
        c["address"] = _record(c["address"], ADDRESS, "address")
        c["payment_methods"] = [_record(m, PAYMENT_METHOD, "payment method") for m in c["payment_methods"]]
        customers.append(c)
    db["customers"] = customers
    _in_order(db, AGENT_DB_ORDER)


def _merge_defaults(target: dict[str, Any], defaults: dict[str, Any]) -> None:
    for key, value in defaults.items():
        if key not in target:
            target[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(target[key], dict) and key not in ("app_statuses",
                                                                                       "signal_strength"):
            _merge_defaults(target[key], value)


def normalize_user_db(db: dict[str, Any]) -> None:
    """Fill the user database (``user_db.toml`` holds only the device) with τ²-bench's defaults, in place."""
    db.setdefault("device", {})
    db.setdefault("surroundings", {})
    _merge_defaults(db["device"], DEVICE_DEFAULT)
    _merge_defaults(db["surroundings"], SURROUNDINGS_DEFAULT)
    for app in db["device"]["app_statuses"].values():
        app.setdefault("permissions", {})
        for perm in PERMISSIONS:
            app["permissions"].setdefault(perm, False)
    _in_order(db["device"], DEVICE_DEFAULT)
    _in_order(db["surroundings"], SURROUNDINGS_DEFAULT)
    if isinstance(db["device"]["active_apn_settings"], dict):
        _in_order(db["device"]["active_apn_settings"], APN_DEFAULT)


def render(value: Any) -> str:
    """The observation text τ²-bench produces for a tool result.

    Records (wrapped in :class:`Record`, τ²-bench's pydantic models) are dumped
    whole; numbers and booleans *outside* a record are shown as strings, as
    τ²-bench's converter does for the plain dicts some tools return.
    """
    return json.dumps(_render(value))


def _render(value: Any) -> Any:
    if isinstance(value, Record):
        return value.data
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list):
        return [_render(v) for v in value]
    if isinstance(value, dict):
        return {k: _render(v) for k, v in value.items()}
    return value


class Record:
    """Marks a database record inside a tool result (τ²-bench returns these as pydantic models)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

