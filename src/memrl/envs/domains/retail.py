"""τ²-bench's ``retail`` domain: users, orders and products of an online store.

Written from τ²-bench's tool behaviour for the same observations, databases and
error texts: the database follows τ²'s data model (unset optional order fields
null, prices and amounts floats), arguments reach the methods unchecked and every
refusal has τ²'s wording. Where τ² builds a pydantic object from the agent's values (an
address), memrl builds the same model, so an integer zip fails with the same
"1 validation error for UserAddress" message and changes nothing.

``modify_pending_order_items`` follows τ²-bench, which gives *every* swapped item
the price and options of the *last* new variant in the call and records the
payment difference unrounded. Set ``per_item_variant`` (``load_domain(...,
tool_options={"per_item_variant": True})``) to price each item by its own variant,
as the tool's description promises; databases then differ from τ²'s whenever a
call swaps items of different prices.
"""

from __future__ import annotations

import json
from typing import Any

from memrl.envs.domains.retail_db import UserAddress, normalized_retail_db
from memrl.envs.calculate import calculate_expression
from memrl.envs.toolkit import Toolkit, tool


class RetailTools(Toolkit):
    """The store's back office over ``db.json`` (``users``, ``orders``, ``products``)."""

    tau2_class = "tau2.domains.retail.tools:RetailTools"

    strict_args = False
    per_item_variant = False  # τ²-bench prices every swapped item by the last new variant

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        """τ²'s RetailDB after validation and ``model_dump``: model field order, null optionals, floats."""
        return normalized_retail_db(db)

    # -- lookups ------------------------------------------------------------------------------
    def _order(self, order_id: str) -> dict[str, Any]:
        if order_id not in self.db["orders"]:
            raise ValueError("Order not found")
        return self.db["orders"][order_id]

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.db["users"]:
            raise ValueError("User not found")
        return self.db["users"][user_id]

    def _product(self, product_id: str) -> dict[str, Any]:
        if product_id not in self.db["products"]:
            raise ValueError("Product not found")
        return self.db["products"][product_id]

    def _variant(self, product_id: str, item_id: str) -> dict[str, Any]:
        if item_id not in (variants := self._product(product_id)["variants"]):
            raise ValueError("Variant not found")
        return variants[item_id]

    def _payment(self, user_id: str, payment_id: str) -> dict[str, Any]:
        if payment_id not in (methods := self._user(user_id)["payment_methods"]):
            raise ValueError("Payment method not found")
        return methods[payment_id]

    @staticmethod
    def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
        """τ²'s ``UserAddress(...)`` built from the caller's values: a non-string fails with pydantic's message."""
        return UserAddress(address1=address1, address2=address2, city=city, state=state, country=country,
                           zip=zip).model_dump()

    @staticmethod
    def _is_gift_card(method: dict[str, Any]) -> bool:
        return method.get("source") == "gift_card"  # τ²: isinstance(method, GiftCard)

    @staticmethod
    def _check_counts(order: dict[str, Any], item_ids: list[str], message: str) -> None:
        """Each item id occurs in the order at least as often as in ``item_ids`` (τ²'s per-tool message)."""
        have = [it["item_id"] for it in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > have.count(item_id):
                raise ValueError(message.format(item_id=item_id))

    def _swap_price(self, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str], same_allowed: bool,
                    count_message: str) -> tuple[float, list[dict[str, Any]]]:
        """The checks shared by exchange and modify-items, in τ²'s order, and the (unrounded) price
        difference with the new variants."""
        self._check_counts(order, item_ids, count_message)
        if len(item_ids) != len(new_item_ids):
            raise ValueError("The number of items to be exchanged should match" + ("." if same_allowed else ""))
        diff: float = 0
        variants = []
        for item_id, new_id in zip(item_ids, new_item_ids):
            if not same_allowed and item_id == new_id:
                raise ValueError("The new item id should be different from the old item id")
            item = next(it for it in order["items"] if it["item_id"] == item_id)
            variant = self._variant(item["product_id"], new_id)
            if not variant["available"]:
                raise ValueError(f"New item {new_id} not found or available")
            diff += variant["price"] - item["price"]
            variants.append(variant)
        return diff, variants

    # -- read tools ---------------------------------------------------------------------------
    @tool("read")
    def find_user_id_by_email(self, email: str) -> str:
        """Find a user id by email.

        Args:
            email: The email of the user, such as 'something@example.com'.
        """
        for uid, user in self.db["users"].items():
            if user["email"].lower() == email.lower():  # no trimming: τ²-bench refuses ' a@b.com '
                return uid
        raise ValueError("User not found")

    @tool("read")
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a user id by first name, last name and zip code (when the email is unknown).

        Args:
            first_name: The first name of the customer, such as 'John'.
            last_name: The last name of the customer, such as 'Doe'.
            zip: The zip code of the customer, such as '12345'.
        """
        for uid, user in self.db["users"].items():
            name = user["name"]
            if (name["first_name"].lower() == first_name.lower() and name["last_name"].lower() == last_name.lower()
                    and user["address"]["zip"] == zip):
                return uid
        raise ValueError("User not found")

    @tool("read")
    def get_order_details(self, order_id: str) -> dict[str, Any]:
        """Get the status and details of an order.

        Args:
            order_id: The order id, such as '#W0000000' (note the leading '#').
        """
        return self._order(order_id)

    @tool("read")
    def get_product_details(self, product_id: str) -> dict[str, Any]:
        """Get the inventory details (all variants) of a product.

        Args:
            product_id: The product id, such as '6086499569' (not an item id).
        """
        return self._product(product_id)

    @tool("read")
    def get_item_details(self, item_id: str) -> dict[str, Any]:
        """Get the details of one item (a product variant).

        Args:
            item_id: The item id, such as '1008292230' (not a product id).
        """
        for product in self.db["products"].values():
            if item_id in product["variants"]:
                return product["variants"][item_id]
        raise ValueError("Item not found")

    @tool("read")
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """Get the details of a user, including their orders and payment methods.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool("read")
    def list_all_product_types(self) -> str:
        """List the name and product id of every product type (JSON, sorted by name)."""
        return json.dumps({p["name"]: p["product_id"] for p in self.db["products"].values()}, sort_keys=True)

    @tool("generic")
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression, rounded to 2 decimals.

        Args:
            expression: Numbers, + - * /, parentheses and spaces, such as '2 + 2'.
        """
        return calculate_expression(expression)

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the issue. Only when the user asks
        for one, or the issue cannot be solved with the policy and tools.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    # -- write tools --------------------------------------------------------------------------
    @tool("write")
    def cancel_pending_order(self, order_id: str, reason: str) -> dict[str, Any]:
        """Cancel a pending order and refund it (gift cards at once, other methods in 5-7 days).
        Needs the user's explicit confirmation.

        Args:
            order_id: The order id, such as '#W0000000'.
            reason: 'no longer needed' or 'ordered by mistake'.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ValueError("Non-pending order cannot be cancelled")
        if reason not in {"no longer needed", "ordered by mistake"}:  # a set, as τ²-bench: a list reason is unhashable
            raise ValueError("Invalid reason")
        refunds = []
        for pay in order["payment_history"]:
            refunds.append({"transaction_type": "refund", "amount": pay["amount"],
                            "payment_method_id": pay["payment_method_id"]})
            method = self._payment(order["user_id"], pay["payment_method_id"])
            if self._is_gift_card(method):
                method["balance"] = round(method["balance"] + pay["amount"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return order

    @tool("write")
    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                       payment_method_id: str) -> dict[str, Any]:
        """Exchange items of a delivered order for other variants of the same products (once per order).
        Needs the user's explicit confirmation.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to exchange (duplicates allowed).
            new_item_ids: The new item ids, position by position, each of the same product.
            payment_method_id: Pays or receives the price difference, such as 'gift_card_0000000'.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ValueError("Non-delivered order cannot be exchanged")
        diff, _ = self._swap_price(order, item_ids, new_item_ids, same_allowed=True,
                                   count_message="Number of {item_id} not found.")
        diff = round(diff, 2)
        method = self._payment(order["user_id"], payment_method_id)
        if self._is_gift_card(method) and method["balance"] < diff:
            raise ValueError("Insufficient gift card balance to pay for the price difference")
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = diff
        return order

    @tool("write")
    def modify_pending_order_address(self, order_id: str, address1: str, address2: str, city: str, state: str,
                                     country: str, zip: str) -> dict[str, Any]:
        """Change the shipping address of a pending order. Needs the user's explicit confirmation.

        Args:
            order_id: The order id, such as '#W0000000'.
            address1: First address line, such as '123 Main St'.
            address2: Second address line, such as 'Apt 1' or ''.
            city: The city.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code.
        """
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ValueError("Non-pending order cannot be modified")
        order["address"] = self._address(address1, address2, city, state, country, zip)
        return order

    @tool("write")
    def modify_pending_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                   payment_method_id: str) -> dict[str, Any]:
        """Swap items of a pending order for other variants of the same products (once per order).
        Needs the user's explicit confirmation.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to modify (duplicates allowed).
            new_item_ids: The new item ids, position by position, each of the same product.
            payment_method_id: Pays or receives the price difference, such as 'credit_card_0000000'.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ValueError("Non-pending order cannot be modified")
        diff, variants = self._swap_price(order, item_ids, new_item_ids, same_allowed=False,
                                          count_message="{item_id} not found")
        method = self._payment(order["user_id"], payment_method_id)
        if self._is_gift_card(method) and method["balance"] < diff:
            raise ValueError("Insufficient gift card balance to pay for the new item")
        order["payment_history"].append({"transaction_type": "payment" if diff > 0 else "refund",
                                         "amount": float(abs(diff)), "payment_method_id": payment_method_id})
        if self._is_gift_card(method):
            method["balance"] = round(method["balance"] - diff, 2)
        for item_id, new_id, own in zip(item_ids, new_item_ids, variants):
            variant = own if self.per_item_variant else variants[-1]
            item = next(it for it in order["items"] if it["item_id"] == item_id)
            item["item_id"] = new_id
            item["price"] = variant["price"]
            item["options"] = dict(variant["options"])
        order["status"] = "pending (item modified)"
        return order

    @tool("write")
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> dict[str, Any]:
        """Pay a pending order with another payment method. Needs the user's explicit confirmation.

        Args:
            order_id: The order id, such as '#W0000000'.
            payment_method_id: The new payment method, such as 'gift_card_0000000'.
        """
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ValueError("Non-pending order cannot be modified")
        method = self._payment(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ValueError("There should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ValueError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if self._is_gift_card(method) and method["balance"] < amount:
            raise ValueError("Insufficient gift card balance to pay for the order")
        history.append({"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id})
        history.append({"transaction_type": "refund", "amount": amount, "payment_method_id": old_id})
        if self._is_gift_card(method):
            method["balance"] = round(method["balance"] - amount, 2)
        old = self._payment(order["user_id"], old_id)
        if self._is_gift_card(old):
            old["balance"] = round(old["balance"] + amount, 2)
        return order

    @tool("write")
    def modify_user_address(self, user_id: str, address1: str, address2: str, city: str, state: str,
                            country: str, zip: str) -> dict[str, Any]:
        """Change a user's default address. Needs the user's explicit confirmation.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            address1: First address line.
            address2: Second address line, or ''.
            city: The city.
            state: The state.
            country: The country.
            zip: The zip code.
        """
        (user := self._user(user_id))["address"] = self._address(address1, address2, city, state, country, zip)
        return user

    @tool("write")
    def return_delivered_order_items(self, order_id: str, item_ids: list[str],
                                     payment_method_id: str) -> dict[str, Any]:
        """Request the return of items of a delivered order; the refund goes to the original payment
        method or a gift card. Needs the user's explicit confirmation.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to return (duplicates allowed).
            payment_method_id: The original payment method or a gift card of the user.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ValueError("Non-delivered order cannot be returned")
        method = self._payment(self._user(order["user_id"])["user_id"], payment_method_id)
        if not self._is_gift_card(method) and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ValueError("Payment method should be the original payment method")
        self._check_counts(order, item_ids, "Some item not found")
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return order
