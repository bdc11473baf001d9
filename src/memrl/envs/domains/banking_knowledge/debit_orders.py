"""Discoverable agent tools that order debit cards and manage their security: ordering (fees, the new
pending card), clearing fraud alerts and velocity blocks, and PIN resets and changes (τ³'s rules)."""

from __future__ import annotations

from typing import Any

from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.discover import discoverable

_DELIVERY = {"STANDARD": "7-10 business days", "EXPEDITED": "3-5 business days", "RUSH": "1-2 business days"}
_THIRTY_ONE = ("01", "03", "05", "07", "08", "10", "12")
_SEQUENTIAL = ("0123", "1234", "2345", "3456", "4567", "5678", "6789", "9876", "8765", "7654", "6543", "5432", "4321",
               "3210")


def pin_problem(pin: Any) -> str | None:
    """Why a PIN is refused (not four digits, sequential, one repeated digit), or None."""
    if not pin or not pin.isdigit() or len(pin) != 4:
        return "PIN must be exactly 4 digits."
    if pin in _SEQUENTIAL:
        return "PIN cannot be sequential (e.g., 1234). Please choose a more secure PIN."
    if len(set(pin)) == 1:
        return "PIN cannot be all the same digit (e.g., 1111). Please choose a more secure PIN."
    return None


def _fees(delivery_fee: Any, design_fee: Any, excess: Any) -> tuple[float | None, float | None, float, str | None]:
    """The three fees as numbers (τ³ reads a missing fee as None and a bad excess fee as 0), or an error."""
    excess = excess or 0
    try:
        delivery_fee = float(delivery_fee) if delivery_fee is not None else None
    except (TypeError, ValueError):
        return None, None, 0.0, "Error: delivery_fee must be a number."
    try:
        design_fee = float(design_fee) if design_fee is not None else None
    except (TypeError, ValueError):
        return None, None, 0.0, "Error: design_fee must be a number."
    try:
        excess = float(excess)
    except (TypeError, ValueError):
        excess = 0
    return delivery_fee, design_fee, excess, None


def _order_refusal(db: dict[str, Any], account_id: Any, user_id: Any) -> str | None:
    """τ³'s checks of the checking account a card is ordered for (before fees are known)."""
    accounts = db["accounts"]["data"]
    if account_id not in accounts:
        return f"Error: Account '{account_id}' not found."
    account = accounts[account_id]
    if account.get("class") != "checking":
        return (f"Error: Debit cards can only be ordered for checking accounts. Account '{account_id}' is a "
                f"{account.get('class')} account.")
    if account.get("status") != "OPEN":
        return f"Error: Account must be OPEN. Account '{account_id}' has status: {account.get('status')}"
    if account.get("user_id") != user_id:
        return f"Error: Account '{account_id}' does not belong to user '{user_id}'."
    return None


def _fee_parts(delivery: float, design: float, excess: float, sep: str) -> str:
    parts = []
    if delivery > 0:
        parts.append(f"Delivery{sep}${delivery}")
    if design > 0:
        parts.append(f"Design{sep}${design}")
    if excess > 0:
        parts.append(f"Excess Replacement{sep}${excess:.0f}")
    return ", ".join(parts)


def _expiry(order_date: str) -> str:
    """Four years on, at the end of the order's month (February always the 28th)."""
    month, _, year = order_date.split("/")
    day = "31" if month in _THIRTY_ONE else "28" if month == "02" else "30"
    return f"{month}/{day}/{int(year) + 4}"


def _issue_reason(cards: list[dict[str, Any]]) -> str:
    """Why the new card is issued, read from the account's earlier cards (τ³'s rule)."""
    closed = next((c for c in cards if c.get("status") == "CLOSED"), None)
    if closed:
        why = closed.get("closure_reason", "first_card")
        if why in ["lost", "stolen", "fraud", "fraud_suspected"]:
            return "fraud" if why == "fraud_suspected" else why
        return "first_card"
    return "first_card" if cards else "new_account"


def _charge(db: dict[str, Any], account_id: str, order_id: str, funds: float, fees: tuple[float, float, float]) -> None:
    """Take an order's fees from the checking account and post them as one transaction."""
    total = sum(fees)
    db["accounts"]["data"][account_id]["current_holdings"] = f"{funds - total:.2f}"
    fee_id = f"btxn_dcfee_{order_id[-8:]}"
    r.add(db, "bank_account_transaction_history", fee_id,
          {"transaction_id": fee_id, "account_id": account_id, "date": r.TODAY,
           "description": f"DEBIT CARD ORDER FEE - {_fee_parts(*fees, ' ')}", "amount": -total,
           "type": "debit_card_fee", "status": "posted"})


def _new_card(db: dict[str, Any], account_id: str, user_id: str, design: str) -> str:
    """Add the PENDING card that ships with an order; its id."""
    card_id = "dbc_" + r.short_hash(f"debit_card:{account_id}:{user_id}:{r.TODAY}", 12)
    seed = f"card_details:{card_id}"
    last4 = "".join(c for c in r.short_hash(seed + ":last4", 8) if c.isdigit())[:4].zfill(4)
    cvv = "".join(c for c in r.short_hash(seed + ":cvv", 6) if c.isdigit())[:3].zfill(3)
    users = db["users"]["data"]
    holder = users[user_id].get("name", "CARDHOLDER").upper() if user_id in users else "CARDHOLDER"
    earlier = [c for c in db["debit_cards"]["data"].values() if c.get("account_id") == account_id]
    r.add(db, "debit_cards", card_id,
          {"card_id": card_id, "account_id": account_id, "user_id": user_id, "cardholder_name": holder,
           "last_4_digits": last4, "cvv": cvv, "status": "PENDING", "issue_date": r.TODAY,
           "expiration_date": _expiry(r.TODAY), "card_design": design, "issue_reason": _issue_reason(earlier)})
    return card_id


def _holdings(db: dict[str, Any], account_id: str) -> float:
    """The account's balance as a number (τ³ reads one it cannot parse as 0)."""
    try:
        return float(str(db["accounts"]["data"][account_id].get("current_holdings", "0")).replace(",", ""))
    except ValueError:
        return 0.0


def _card_refusal(db: dict[str, Any], account_id: str, funds: float) -> str | None:
    """τ³'s checks of a good account before a card is ordered: $25 at least, no pending order, no active card."""
    if funds < 25.0:
        return f"Error: Account must have a minimum balance of $25. Current balance: ${funds:.2f}"
    if any(o.get("account_id") == account_id and o.get("status") == "PENDING"
           for o in db["debit_card_orders"]["data"].values()):
        return f"Error: There is already a pending debit card order for account '{account_id}'."
    if sum(1 for c in db["debit_cards"]["data"].values()
           if c.get("account_id") == account_id and c.get("status") == "ACTIVE") >= 1:
        return (f"Error: Account '{account_id}' already has an active debit card. Maximum 1 active card per "
                "checking account.")
    return None


def _confirmation(order: dict[str, Any], card_id: str, funds: float) -> str:
    """What the agent reads once a card is ordered: the order, the new card and the fees taken (``funds`` before)."""
    speed, total = order["delivery_option"], order["total_fee"]
    lines = ["Debit Card Order Confirmed", f"Order ID: {order['order_id']}", f"Card ID: {card_id}",
             f"Linked Account: {order['account_id']}", f"Delivery Option: {speed}",
             f"Card Design: {order['card_design']}",
             f"Shipping Address: {order['shipping_address']}", f"Expected Delivery: {_DELIVERY[speed]}", "",
             "Note: Card will arrive with status PENDING. Customer must call to activate after receiving the card."]
    if total > 0:
        fees = _fee_parts(order["delivery_fee"], order["design_fee"], order["excess_replacement_fee"], ": ")
        lines += [f"Total Fees: ${total:.2f} ({fees}) - CHARGED to account {order['account_id']}",
                  f"New Account Balance: ${funds - total:.2f}"]
    else:
        lines.append("Total Fees: $0 (No additional charges)")
    return "\n".join(lines)


class DebitOrderTools:
    """Ordering and security tools for debit cards, mixed into the agent's ``KnowledgeTools``."""

    db: dict[str, Any]

    @discoverable("write")
    def order_debit_card_5739(self, account_id: str, user_id: str, delivery_option: str, delivery_fee: float,
                              card_design: str, design_fee: float, shipping_address: str,
                              excess_replacement_fee: float | None = None) -> str:
        """Order a new debit card for a customer's checking account.

        Args:
            account_id (string): The checking account ID to link the debit card to
            user_id (string): The customer's unique identifier
            delivery_option (string): Shipping speed: STANDARD, EXPEDITED, or RUSH
            delivery_fee (number): Fee to charge for delivery in dollars
            card_design (string): Card design: CLASSIC, PREMIUM, or CUSTOM
            design_fee (number): Fee to charge for card design in dollars
            shipping_address (string): Full shipping address for card delivery
            excess_replacement_fee (number, optional): Fee for exceeding replacement limit, if applicable

        Returns:
            Debit card order placed successfully.
        """
        delivery, design, excess, error = _fees(delivery_fee, design_fee, excess_replacement_fee)
        if error:
            return error
        if not all([account_id, user_id, delivery_option, delivery is not None, card_design, design is not None,
                    shipping_address]):
            return ("Error: Missing required parameters. Required: account_id, user_id, delivery_option, delivery_fee, "
                    "card_design, design_fee, shipping_address.")
        for name, value, valid in (("delivery_option", delivery_option, ["STANDARD", "EXPEDITED", "RUSH"]),
                                   ("card_design", card_design, ["CLASSIC", "PREMIUM", "CUSTOM"])):
            if value.upper() not in valid:
                return f"Error: Invalid {name}. Must be one of: {valid}"
        speed, look = delivery_option.upper(), card_design.upper()
        if refusal := _order_refusal(self.db, account_id, user_id):
            return refusal
        funds = _holdings(self.db, account_id)
        if refusal := _card_refusal(self.db, account_id, funds):
            return refusal
        assert delivery is not None and design is not None
        total = delivery + design + excess
        if total > 0 and funds < total:
            return f"Error: Insufficient funds for fees. Total fees: ${total:.2f}. Current balance: ${funds:.2f}"
        order_id = "dcord_" + r.short_hash(f"debit_card_order:{account_id}:{user_id}:{speed}", 12)
        record = {"order_id": order_id, "account_id": account_id, "user_id": user_id, "delivery_option": speed,
                  "card_design": look, "shipping_address": shipping_address, "delivery_fee": delivery,
                  "design_fee": design, "excess_replacement_fee": excess, "total_fee": total, "order_date": r.TODAY,
                  "expected_delivery": _DELIVERY[speed], "status": "PENDING"}
        if not r.add(self.db, "debit_card_orders", order_id, record):
            return "Error: Failed to create debit card order. Order may already exist."
        if total > 0:
            _charge(self.db, account_id, order_id, funds, (delivery, design, excess))
        return _confirmation(record, _new_card(self.db, account_id, user_id, look), funds)

    @discoverable("write")
    def clear_debit_card_fraud_alert_4892(self, card_id: str, reason: str) -> str:
        """Clear a fraud alert or velocity block on a debit card.

        Args:
            card_id (string): The debit card ID to clear the alert/block for
            reason (string): Reason for clearing: 'customer_verified' (for fraud alerts after customer verification) or 'velocity_clear' (for velocity blocks after identity verification)

        Returns:
            Fraud alert/velocity block cleared successfully.
        """
        for name, value in (("card_id", card_id), ("reason", reason)):
            if not value:
                return f"Error: Missing required parameter: {name}."
        valid = ["customer_verified", "velocity_clear"]
        if reason not in valid:
            return f"Error: Invalid reason '{reason}'. Must be one of: {', '.join(valid)}"
        cards = self.db["debit_cards"]["data"]
        if card_id not in cards:
            return f"Error: Debit card '{card_id}' not found."
        card = cards[card_id]
        if reason == "velocity_clear":
            if not card.get("velocity_blocked", False):
                return f"Error: Debit card '{card_id}' does not have an active velocity block."
            card.update(velocity_blocked=False, velocity_cleared_date=r.TODAY)
            return "\n".join(["Velocity Block Cleared Successfully", f"Card ID: {card_id}", f"Cleared Date: {r.TODAY}",
                              "", "The card is now unblocked and ready for normal use.",
                              "The velocity monitoring will continue - if the same unusual patterns recur,",
                              "the card may be blocked again automatically."])
        if not card.get("fraud_alert_active", False):
            return f"Error: Debit card '{card_id}' does not have an active fraud alert."
        if card.get("alert_source") == "bank_initiated":
            return ("Error: BANK_INITIATED_ALERT - This fraud alert was initiated by the bank's fraud detection system "
                    "and cannot be cleared by customer service agents. Please transfer the customer to the security "
                    "team using transfer_to_human_agents.")
        card.update(fraud_alert_active=False, alert_source=None, fraud_alert_cleared_date=r.TODAY)
        return "\n".join(["Fraud Alert Cleared Successfully", f"Card ID: {card_id}", f"Cleared Date: {r.TODAY}", "",
                          "The fraud alert has been removed from the card.", "All transactions will process normally.",
                          "", "Remind the customer to review recent transactions and report any unauthorized charges."])

    @discoverable("write")
    def reset_debit_card_pin_6284(self, card_id: str, last_4_digits: str, new_pin: str) -> str:
        """Reset a debit card PIN when the customer has forgotten it.

        Args:
            card_id (string): The debit card ID to reset PIN for
            last_4_digits (string): Last 4 digits of the card number (for verification)
            new_pin (string): The new 4-digit PIN chosen by the customer

        Returns:
            Debit card PIN reset successfully.
        """
        if not all([card_id, last_4_digits, new_pin]):
            return "Error: Missing required parameters. Required: card_id, last_4_digits, new_pin."
        if not last_4_digits.isdigit() or len(last_4_digits) != 4:
            return "Error: Last 4 digits must be exactly 4 digits."
        if problem := pin_problem(new_pin):
            return f"Error: {problem}"
        cards = self.db["debit_cards"]["data"]
        if card_id not in cards:
            return f"Error: Debit card '{card_id}' not found."
        card = cards[card_id]
        if card.get("last_4_digits") != last_4_digits:
            return "Error: Card verification failed. The last 4 digits do not match our records."
        if card.get("status") != "ACTIVE":
            return (f"Error: Cannot reset PIN. Card status is {card.get('status')}. Only ACTIVE cards can have their "
                    "PIN reset.")
        card.update(pin_last_changed=r.TODAY, pin_locked=False, pin_attempts_remaining=3)
        return "\n".join(["Debit Card PIN Reset Successfully", f"Card ID: {card_id}", f"PIN Changed: {r.TODAY}", "",
                          "The new PIN is effective immediately.", "Your card has been unlocked and is ready to use.",
                          "Customer can use the new PIN for ATM withdrawals and point-of-sale transactions.", "",
                          "Security reminder: Never share your PIN with anyone."])

    @discoverable("write")
    def change_debit_card_pin_6285(self, card_id: str, current_pin: str, new_pin: str) -> str:
        """Change a debit card PIN when the customer knows their current PIN.

        Args:
            card_id (string): The debit card ID to change PIN for
            current_pin (string): The customer's current 4-digit PIN
            new_pin (string): The new 4-digit PIN chosen by the customer

        Returns:
            Debit card PIN changed successfully.
        """
        if not all([card_id, current_pin, new_pin]):
            return "Error: Missing required parameters. Required: card_id, current_pin, new_pin."
        if not current_pin.isdigit() or len(current_pin) != 4:
            return "Error: Current PIN must be exactly 4 digits."
        if problem := pin_problem(new_pin):
            return f"Error: {problem}"
        if current_pin == new_pin:
            return "Error: New PIN must be different from current PIN."
        cards = self.db["debit_cards"]["data"]
        if card_id not in cards:
            return f"Error: Debit card '{card_id}' not found."
        card = cards[card_id]
        if card.get("status") != "ACTIVE":
            return (f"Error: Cannot change PIN. Card status is {card.get('status')}. Only ACTIVE cards can have their "
                    "PIN changed.")
        card["pin_last_changed"] = r.TODAY
        return "\n".join(["Debit Card PIN Changed Successfully", f"Card ID: {card_id}", f"PIN Changed: {r.TODAY}", "",
                          "The new PIN is effective immediately.",
                          "Customer can use the new PIN for ATM withdrawals and point-of-sale transactions.", "",
                          "Security reminder: Never share your PIN with anyone."])
