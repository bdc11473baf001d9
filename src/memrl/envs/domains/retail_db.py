"""τ²-bench's retail database as its models dump it, and the address model its tools build.

τ² validates ``db.json`` into pydantic models and dumps them back: fields in the models' order,
unset optionals null, prices and amounts floats. The retail tools see the same dicts, so the
observations they return read as τ²'s do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_ADDRESS = ("address1", "address2", "city", "country", "state", "zip")
_ORDER = ("order_id", "user_id", "address", "items", "status", "fulfillments", "payment_history")
_ORDER_OPTIONAL = ("cancel_reason", "exchange_items", "exchange_new_items", "exchange_payment_method_id",
                   "exchange_price_difference", "return_items", "return_payment_method_id")
_PAYMENT_FIELDS = {"credit_card": ("source", "id", "brand", "last_four"), "gift_card": ("source", "id", "balance"),
                   "paypal": ("source", "id")}


class UserAddress(BaseModel):
    """τ²-bench's retail address model (its field order, every field a string)."""

    address1: str
    address2: str
    city: str
    country: str
    state: str
    zip: str


def _pick(d: dict[str, Any], keys: tuple[str, ...], floats: tuple[str, ...] = ()) -> dict[str, Any]:
    """``d`` with exactly ``keys`` in that order (missing ones null), ``floats`` as floats (pydantic's dump)."""
    out = {k: d.get(k) for k in keys}
    for k in floats:
        if isinstance(out[k], int) and not isinstance(out[k], bool):
            out[k] = float(out[k])
    return out


def normalized_retail_db(db: dict[str, Any]) -> dict[str, Any]:
    """τ²'s RetailDB after validation and ``model_dump``: model field order, null optionals, floats."""
    products = {pid: {**_pick(p, ("name", "product_id")),
                      "variants": {vid: _pick(v, ("item_id", "options", "available", "price"), ("price",))
                                   for vid, v in p["variants"].items()}}
                for pid, p in db["products"].items()}
    users = {}
    for uid, u in db["users"].items():
        methods = {mid: _pick(m, _PAYMENT_FIELDS.get(m.get("source"), ("source", "id")), ("balance",)
                              if m.get("source") == "gift_card" else ())
                   for mid, m in u["payment_methods"].items()}
        users[uid] = {"user_id": u["user_id"], "name": _pick(u["name"], ("first_name", "last_name")),
                      "address": _pick(u["address"], _ADDRESS), "email": u["email"],
                      "payment_methods": methods, "orders": u["orders"]}
    orders = {}
    for oid, o in db["orders"].items():
        order = _pick(o, _ORDER + _ORDER_OPTIONAL, ("exchange_price_difference",))
        order["address"] = _pick(o["address"], _ADDRESS)
        order["items"] = [_pick(it, ("name", "product_id", "item_id", "price", "options"), ("price",))
                          for it in o["items"]]
        order["fulfillments"] = [_pick(f, ("tracking_id", "item_ids")) for f in o["fulfillments"]]
        order["payment_history"] = [_pick(p, ("transaction_type", "amount", "payment_method_id"), ("amount",))
                                    for p in o["payment_history"]]
        orders[oid] = order
    return {"products": products, "users": users, "orders": orders}
