"""τ²-bench's ``retail`` domain: users, orders and products of an online store.

Written from the benchmark's documented tool behaviour (descriptions, checks and
refund rules). The database is the user's copy of ``retail/db.json``. One known
divergence: when ``modify_pending_order_items`` swaps several items, each item
takes the price and options of *its own* new variant (as the tool's description
says); replaying τ²-bench's own gold actions is unaffected because the gold and
the agent's database are both built by these tools.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from memrl.envs.toolkit import ToolError, Toolkit, tool

Reason = Literal["no longer needed", "ordered by mistake"]


class RetailTools(Toolkit):
    # -- lookups ------------------------------------------------------------------------------
    def _order(self, order_id: str) -> dict[str, Any]:
        if order_id not in self.db["orders"]:
            raise ToolError("Order not found")
        return self.db["orders"][order_id]

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.db["users"]:
            raise ToolError("User not found")
        return self.db["users"][user_id]

    def _product(self, product_id: str) -> dict[str, Any]:
        if product_id not in self.db["products"]:
            raise ToolError("Product not found")
        return self.db["products"][product_id]

    def _variant(self, product_id: str, item_id: str) -> dict[str, Any]:
        variants = self._product(product_id)["variants"]
        if item_id not in variants:
            raise ToolError("Variant not found")
        return variants[item_id]

    def _payment(self, user_id: str, payment_id: str) -> dict[str, Any]:
        methods = self._user(user_id)["payment_methods"]
        if payment_id not in methods:
            raise ToolError("Payment method not found")
        return methods[payment_id]

    @staticmethod
    def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
        return {"address1": address1, "address2": address2, "city": city, "country": country, "state": state,
                "zip": zip}

    @staticmethod
    def _is_gift_card(method: dict[str, Any]) -> bool:
        return method.get("source") == "gift_card"

    @staticmethod
    def _check_items_in_order(order: dict[str, Any], item_ids: list[str], what: str) -> None:
        have = [it["item_id"] for it in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > have.count(item_id):
                raise ToolError(f"{what} {item_id} not found in the order")

    def _priced_swap(self, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str],
                     payment_method_id: str, same_allowed: bool,
                     short_of: str) -> tuple[float, list[dict[str, Any]], dict[str, Any]]:
        """Checks shared by exchange and modify-items, in tau2's order: the items are in the order, each new
        item is an available variant of the same product, the payment method exists and, if a gift card,
        covers the difference (``short_of`` names what it would not pay for).

        Returns (price difference, new variants, payment method).
        """
        self._check_items_in_order(order, item_ids, "Item")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff = 0.0
        variants = []
        for item_id, new_id in zip(item_ids, new_item_ids):
            if not same_allowed and item_id == new_id:
                raise ToolError("The new item id should be different from the old item id")
            item = next(it for it in order["items"] if it["item_id"] == item_id)
            variant = self._variant(item["product_id"], new_id)
            if not variant.get("available", False):
                raise ToolError(f"New item {new_id} not found or available")
            diff += variant["price"] - item["price"]
            variants.append(variant)
        diff = round(diff, 2)
        method = self._payment(order["user_id"], payment_method_id)
        if self._is_gift_card(method) and method["balance"] < diff:
            raise ToolError(f"Insufficient gift card balance to pay for {short_of}")
        return diff, variants, method

    # -- read tools ---------------------------------------------------------------------------
    @tool("read")
    def find_user_id_by_email(self, email: str) -> str:
        """Find a user id by email.

        Args:
            email: The email of the user, such as 'something@example.com'.
        """
        want = email.strip().lower()
        for uid, user in self.db["users"].items():
            if user["email"].lower() == want:
                return uid
        raise ToolError("User not found")

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
            if (name["first_name"].lower() == first_name.strip().lower()
                    and name["last_name"].lower() == last_name.strip().lower()
                    and user["address"]["zip"] == zip.strip()):
                return uid
        raise ToolError("User not found")

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
        raise ToolError("Item not found")

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
        if not expression.strip() or any(ch not in "0123456789+-*/(). " for ch in expression):
            raise ToolError("Invalid characters in expression")
        try:
            value = eval(expression, {"__builtins__": {}}, {})  # noqa: S307 - characters checked above
        except (SyntaxError, ZeroDivisionError, TypeError) as err:
            raise ToolError(f"Invalid expression: {err}") from None
        return str(round(float(value), 2))

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
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in ("no longer needed", "ordered by mistake"):
            raise ToolError("Invalid reason")
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
            raise ToolError("Non-delivered order cannot be exchanged")
        diff, _, _ = self._priced_swap(order, item_ids, new_item_ids, payment_method_id, same_allowed=True,
                                       short_of="the price difference")
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
            raise ToolError("Non-pending order cannot be modified")
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
            raise ToolError("Non-pending order cannot be modified")
        diff, variants, method = self._priced_swap(order, item_ids, new_item_ids, payment_method_id,
                                                   same_allowed=False, short_of="the new item")
        order["payment_history"].append({"transaction_type": "payment" if diff > 0 else "refund",
                                         "amount": abs(diff), "payment_method_id": payment_method_id})
        if self._is_gift_card(method):
            method["balance"] = round(method["balance"] - diff, 2)
        for item_id, new_id, variant in zip(item_ids, new_item_ids, variants):
            item = next(it for it in order["items"] if it["item_id"] == item_id)
            item["item_id"] = new_id
            item["price"] = variant["price"]
            item["options"] = variant["options"]
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
            raise ToolError("Non-pending order cannot be modified")
        method = self._payment(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if self._is_gift_card(method) and method["balance"] < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
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
        user = self._user(user_id)
        user["address"] = self._address(address1, address2, city, state, country, zip)
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
            raise ToolError("Non-delivered order cannot be returned")
        method = self._payment(order["user_id"], payment_method_id)
        if not self._is_gift_card(method) and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ToolError("Payment method should be the original payment method")
        self._check_items_in_order(order, item_ids, "Item")
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return order
