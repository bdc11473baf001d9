"""Discoverable agent tools for the life of a debit card: ordering, the three activation variants (new,
replacement, reissue), closing, freezing, fraud alerts, PINs and listing, with τ³'s checks and texts."""

from __future__ import annotations

import json
from typing import Any

from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.debit_orders import DebitOrderTools, pin_problem
from memrl.envs.domains.banking_knowledge.discover import discoverable

# which activation tool serves a card, by the reason it was issued
_ACTIVATOR = {"new_account": "activate_debit_card_8291", "first_card": "activate_debit_card_8291",
              "lost": "activate_debit_card_8292", "stolen": "activate_debit_card_8292",
              "fraud": "activate_debit_card_8292", "expired": "activate_debit_card_8293",
              "damaged": "activate_debit_card_8293", "upgrade": "activate_debit_card_8293",
              "bank_reissue": "activate_debit_card_8293"}
_ACTIVATE_ARGS = """
        Args:
            card_id (string): The debit card ID to activate
            last_4_digits (string): Last 4 digits of the card number (for verification)
            expiration_date (string): Card expiration date in MM/YY format
            cvv (string): 3-digit CVV from the back of the card
            pin (string): 4-digit PIN chosen by the customer
"""


def _activation_refusal(db: dict[str, Any], args: dict[str, Any], allowed: tuple[str, ...],
                        tool: str) -> tuple[str | None, dict[str, Any] | None]:
    """τ³'s checks before any activation: (error text, None) or (None, the card)."""
    card_id, last4, cvv, pin = args["card_id"], args["last_4_digits"], args["cvv"], args["pin"]
    if not all([card_id, last4, args["expiration_date"], cvv, pin]):
        return ("Error: Missing required parameters. Required: card_id, last_4_digits, expiration_date, cvv, pin.",
                None)
    if problem := pin_problem(pin):
        return f"Error: {problem}", None
    if not cvv.isdigit() or len(cvv) != 3:
        return "Error: CVV must be exactly 3 digits.", None
    if not last4.isdigit() or len(last4) != 4:
        return "Error: Last 4 digits must be exactly 4 digits.", None
    cards = db["debit_cards"]["data"]
    if card_id not in cards:
        return f"Error: Debit card '{card_id}' not found.", None
    card = cards[card_id]
    reason = card.get("issue_reason", "new_account")
    if reason not in allowed:
        return (f"Error: Wrong activation tool. This card has issue_reason='{reason}'. Please use "
                f"{_ACTIVATOR.get(reason, 'unknown')} instead of {tool}.", None)
    if card.get("status") == "ACTIVE":
        return f"Error: Debit card '{card_id}' is already active.", None
    if card.get("status") != "PENDING":
        return (f"Error: Debit card '{card_id}' cannot be activated. Current status: {card.get('status')}. "
                "Only PENDING cards can be activated.", None)
    if card.get("last_4_digits") != last4:
        return "Error: Card verification failed. The last 4 digits do not match our records.", None
    account_id = card.get("account_id")
    accounts = db["accounts"]["data"]
    if account_id and account_id in accounts and accounts[account_id].get("status") != "OPEN":
        return (f"Error: The linked checking account '{account_id}' is no longer open. Card cannot be activated.",
                None)
    return None, card


def _activate(db: dict[str, Any], card_id: str, card: dict[str, Any], new_status: str, stamp: str,
              why: str) -> list[str]:
    """Activate ``card`` and move the account's other active cards to ``new_status``; their ids."""
    card["status"] = "ACTIVE"
    card["activated_date"] = r.TODAY
    moved = []
    for other_id, other in db["debit_cards"]["data"].items():
        if other_id != card_id and other.get("account_id") == card.get("account_id") and other.get("status") == "ACTIVE":
            other["status"] = new_status
            other[stamp] = r.TODAY
            other["deactivation_reason"] = why
            moved.append(other_id)
    return moved


def _card(db: dict[str, Any], card_id: Any) -> tuple[dict[str, Any] | None, str | None]:
    cards = db["debit_cards"]["data"]
    if card_id not in cards:
        return None, f"Error: Debit card '{card_id}' not found."
    return cards[card_id], None


class DebitCardTools(DebitOrderTools):
    """Debit-card tools, mixed into the agent's ``KnowledgeTools``."""

    db: dict[str, Any]

    @discoverable("write")
    def activate_debit_card_8291(self, card_id: str, last_4_digits: str, expiration_date: str, cvv: str,
                                 pin: str) -> str:
        error, card = _activation_refusal(self.db, dict(locals()), ("new_account", "first_card"),
                                          "activate_debit_card_8291")
        if card is None:
            return error  # type: ignore[return-value]
        moved = _activate(self.db, card_id, card, "DEACTIVATED", "deactivated_date", "New card activated")
        lines = ["New Debit Card Activation Successful", f"Card ID: {card_id}", "Status: ACTIVE",
                 f"Activation Date: {r.TODAY}", "", "Your card is now ready to use at any ATM or point of sale terminal.",
                 "For security, please sign the back of your card."]
        if moved:
            lines.append(f"\nNote: Previous card(s) have been deactivated: {', '.join(moved)}")
        return "\n".join(lines)

    activate_debit_card_8291.__doc__ = (
        "Activate a NEW debit card for a customer. Use ONLY for first-time cards on a checking account "
        "(issue_reason = 'new_account' or 'first_card'). For replacement or reissued cards, use the appropriate "
        f"variant.\n{_ACTIVATE_ARGS}\n        Returns:\n            New debit card activated successfully.\n        ")

    @discoverable("write")
    def activate_debit_card_8292(self, card_id: str, last_4_digits: str, expiration_date: str, cvv: str,
                                 pin: str) -> str:
        error, card = _activation_refusal(self.db, dict(locals()), ("lost", "stolen", "fraud"),
                                          "activate_debit_card_8292")
        if card is None:
            return error  # type: ignore[return-value]
        reason = card.get("issue_reason", "lost")
        moved = _activate(self.db, card_id, card, "DEACTIVATED", "deactivated_date",
                          f"Replacement card activated ({reason})")
        lines = ["Replacement Debit Card Activation Successful", f"Card ID: {card_id}",
                 f"Replacement Reason: {r.title(reason)}", "Status: ACTIVE", f"Activation Date: {r.TODAY}", "",
                 "Your replacement card is now ready to use.", "", "IMPORTANT SECURITY REMINDERS:",
                 "- Please review your recent transactions for any unauthorized charges",
                 "- Report any suspicious activity immediately"]
        if reason == "fraud":
            lines.append("- Since fraud was suspected, we recommend changing your online banking password")
        if moved:
            lines.append(f"\nPrevious card(s) have been deactivated for security: {', '.join(moved)}")
        return "\n".join(lines)

    activate_debit_card_8292.__doc__ = (
        "Activate a REPLACEMENT debit card. Use ONLY for cards replacing lost, stolen, or fraud-suspected cards "
        "(issue_reason = 'lost', 'stolen', or 'fraud'). For new or reissued cards, use the appropriate variant.\n"
        f"{_ACTIVATE_ARGS}\n        Returns:\n            Replacement debit card activated successfully.\n        ")

    @discoverable("write")
    def activate_debit_card_8293(self, card_id: str, last_4_digits: str, expiration_date: str, cvv: str,
                                 pin: str) -> str:
        error, card = _activation_refusal(self.db, dict(locals()), ("expired", "damaged", "upgrade", "bank_reissue"),
                                          "activate_debit_card_8293")
        if card is None:
            return error  # type: ignore[return-value]
        reason = card.get("issue_reason", "expired")
        moved = _activate(self.db, card_id, card, "GRACE_PERIOD", "grace_period_ends",
                          f"Reissued card activated ({reason})")
        lines = ["Reissued Debit Card Activation Successful", f"Card ID: {card_id}", f"Reissue Reason: {r.title(reason)}",
                 "Status: ACTIVE", f"Activation Date: {r.TODAY}", "", "Your reissued card is now ready to use."]
        if moved:
            lines += [f"\nNote: Your previous card(s) ({', '.join(moved)}) will remain active for 24 hours as a grace "
                      "period.", "After 24 hours, the old card(s) will be automatically deactivated."]
        if reason in ("expired", "bank_reissue"):
            lines.append("\nReminder: If your card number changed, please update any recurring payments with your new "
                         "card details.")
        return "\n".join(lines)

    activate_debit_card_8293.__doc__ = (
        "Activate a REISSUED debit card. Use ONLY for cards reissued due to expiration, damage, design upgrade, or "
        "bank-initiated replacement (issue_reason = 'expired', 'damaged', 'upgrade', or 'bank_reissue'). For new or "
        f"replacement cards, use the appropriate variant.\n{_ACTIVATE_ARGS}\n        Returns:\n"
        "            Reissued debit card activated successfully.\n        ")

    @discoverable("write")
    def close_debit_card_4721(self, card_id: str, reason: str) -> str:
        """Close or cancel a debit card permanently.

        Args:
            card_id (string): The debit card ID to close
            reason (string): Reason for closing: lost, stolen, fraud_suspected, damaged, no_longer_needed, or account_closing

        Returns:
            Debit card closed successfully.
        """
        if not card_id or not reason:
            return "Error: Missing required parameters. Required: card_id, reason."
        valid = ["lost", "stolen", "fraud_suspected", "damaged", "no_longer_needed", "account_closing"]
        if reason.lower() not in valid:
            return f"Error: Invalid reason. Must be one of: {valid}"
        reason = reason.lower()
        card, error = _card(self.db, card_id)
        if card is None:
            return error  # type: ignore[return-value]
        before = card.get("status")
        if before not in ["ACTIVE", "PENDING"]:
            return (f"Error: Debit card '{card_id}' cannot be closed. Current status: {before}. Only ACTIVE or PENDING "
                    "cards can be closed.")
        card.update(status="CLOSED", closed_date=r.TODAY, closure_reason=reason)
        lines = ["Debit Card Closed Successfully", f"Card ID: {card_id}", f"Previous Status: {before}",
                 "New Status: CLOSED", f"Closure Reason: {r.title(reason)}", f"Closure Date: {r.TODAY}", ""]
        if reason in ("lost", "stolen", "fraud_suspected"):
            lines += ["IMPORTANT: This card has been immediately deactivated for security.",
                      "Any pending transactions may still be processed."]
            if reason == "fraud_suspected":
                lines += ["Please advise the customer to review recent transactions and file disputes for any "
                          "unauthorized charges.", "Also recommend changing their online banking password."]
        lines += ["", "Note: This card cannot be reactivated. If the customer needs a new card, they can order one "
                  "through the standard ordering process.",
                  "Any recurring payments linked to this card will need to be updated with new payment information."]
        return "\n".join(lines)

    @discoverable("write")
    def freeze_debit_card_3892(self, card_id: str) -> str:
        """Temporarily freeze a debit card. The card can be unfrozen later.

        Args:
            card_id (string): The debit card ID to freeze

        Returns:
            Debit card frozen successfully.
        """
        if not card_id:
            return "Error: Missing required parameter: card_id."
        card, error = _card(self.db, card_id)
        if card is None:
            return error  # type: ignore[return-value]
        if card.get("status") == "FROZEN":
            return f"Error: Debit card '{card_id}' is already frozen."
        if card.get("status") != "ACTIVE":
            return (f"Error: Debit card '{card_id}' cannot be frozen. Current status: {card.get('status')}. Only ACTIVE "
                    "cards can be frozen.")
        card.update(status="FROZEN", frozen_date=r.TODAY)
        return "\n".join(["Debit Card Frozen Successfully", f"Card ID: {card_id}", "Status: FROZEN",
                          f"Frozen Date: {r.TODAY}", "", "While frozen:", "- All new purchase transactions will be declined",
                          "- Recurring payments and subscriptions will be declined",
                          "- Pending transactions already authorized may still process", "",
                          "To unfreeze, the customer can call customer service or use the mobile app.",
                          "If the card is confirmed lost or stolen, recommend closing the card permanently instead."])

    @discoverable("write")
    def unfreeze_debit_card_3893(self, card_id: str) -> str:
        """Unfreeze a previously frozen debit card.

        Args:
            card_id (string): The debit card ID to unfreeze

        Returns:
            Debit card unfrozen successfully.
        """
        if not card_id:
            return "Error: Missing required parameter: card_id."
        card, error = _card(self.db, card_id)
        if card is None:
            return error  # type: ignore[return-value]
        if card.get("status") == "ACTIVE":
            return f"Error: Debit card '{card_id}' is already active."
        if card.get("status") != "FROZEN":
            return (f"Error: Debit card '{card_id}' cannot be unfrozen. Current status: {card.get('status')}. Only "
                    "FROZEN cards can be unfrozen.")
        account_id, accounts = card.get("account_id"), self.db["accounts"]["data"]
        if account_id and account_id in accounts and accounts[account_id].get("status") != "OPEN":
            return (f"Error: The linked checking account '{account_id}' is no longer open. Card cannot be "
                    "unfrozen.")
        card.update(status="ACTIVE", unfrozen_date=r.TODAY)
        return "\n".join(["Debit Card Unfrozen Successfully", f"Card ID: {card_id}", "Status: ACTIVE",
                          f"Unfrozen Date: {r.TODAY}", "", "The card is now active and ready to use immediately.",
                          "All transactions will process normally."])

    @discoverable("read")
    def get_debit_cards_by_account_id_7823(self, account_id: str) -> str:
        """Retrieve all debit cards associated with a checking account. Returns card details including status, issue reason, and expiration date.

        Args:
            account_id (string): The checking account ID to retrieve debit cards for

        Returns:
            Debit cards retrieved successfully.
        """
        if not account_id:
            return "Error: Missing required parameter 'account_id'."
        accounts = self.db["accounts"]["data"]
        if account_id not in accounts:
            return f"Error: Account '{account_id}' not found."
        if accounts[account_id].get("class", "").lower() not in ["checking", "business_checking"]:
            return (f"Error: Account '{account_id}' is not a checking account. Debit cards are only available for "
                    "checking accounts.")
        found = []
        for card_id, card in self.db["debit_cards"]["data"].items():
            if card.get("account_id") != account_id:
                continue
            info = {"card_id": card_id, **card}  # renamed fields, as τ³ shows them
            if "last_4_digits" in info and "card_number_last_4" not in info:
                info["card_number_last_4"] = info.pop("last_4_digits")
            if "issue_date" in info and "date_issued" not in info:
                info["date_issued"] = info.pop("issue_date")
            elif "created_date" in info and "date_issued" not in info:
                info["date_issued"] = info.pop("created_date")
            found.append(info)
        if not found:
            return f"No debit cards found for account '{account_id}'."
        found.sort(key=lambda c: c.get("date_issued") or "", reverse=True)
        return json.dumps(found, indent=2)
