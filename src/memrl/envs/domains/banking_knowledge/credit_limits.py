"""Discoverable agent tools for credit-card accounts: flags, closing, payments from checking, and credit
limit increases (request, history, payment record, approval, denial), with τ³'s checks and texts."""

from __future__ import annotations

import json
from typing import Any

from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.credit_tools import _DENIAL_REASONS, _dollars, _no_card_account, history
from memrl.envs.domains.banking_knowledge.discover import discoverable

_OPEN_DISPUTE = ("SUBMITTED", "UNDER_REVIEW", "PENDING")
_OPEN_ORDER = ("PENDING", "PROCESSING", "SHIPPED")
_BAD_STANDING = ("PAST_DUE", "DELINQUENT", "COLLECTIONS", "CLOSED")


def _owned_card(db: dict[str, Any], account_id: Any, user_id: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The credit-card account, or the error τ³ gives when it is missing or someone else's."""
    cards = db["credit_card_accounts"]["data"]
    if account_id not in cards:
        return None, f"Error: Credit card account '{account_id}' not found."
    if cards[account_id].get("user_id") != user_id:
        return None, f"Error: Credit card account '{account_id}' does not belong to user '{user_id}'."
    return cards[account_id], None


def _limit_blocked(db: dict[str, Any], account: dict[str, Any], account_id: Any, user_id: Any) -> bool:
    """τ³'s approval checks: an open dispute of the user, a replacement card under way, bad standing."""
    if any(d.get("user_id") == user_id and d.get("status") in _OPEN_DISPUTE
           for d in db["transaction_disputes"]["data"].values()):
        return True
    if any(o.get("credit_card_account_id") == account_id and o.get("status") in _OPEN_ORDER
           for o in db["credit_card_orders"]["data"].values()):
        return True
    return account.get("account_status", "").upper() in _BAD_STANDING


class CreditLimitTools:
    """Account-level credit-card tools, mixed into the agent's ``KnowledgeTools``."""

    db: dict[str, Any]

    @discoverable("write")
    def apply_credit_card_account_flag_6147(self, credit_card_account_id: str, user_id: str, flag_type: str,
                                            expiration_date: str, reason: str) -> str:
        """Apply a flag to a customer's credit card account. Flags can include annual fee waivers, promotional APR rates, rewards bonuses, or other account-level modifiers. Each flag has an effective date and expiration date.

        Args:
            credit_card_account_id (string): The credit card account ID to apply the flag to
            user_id (string): The user's unique identifier in the system
            flag_type (string): Type of flag to apply. Must be one of: 'annual_fee_waived', 'promotional_apr', 'rewards_bonus', 'other'
            expiration_date (string): Date when the flag expires (MM/DD/YYYY format)
            reason (string): Reason for applying this flag. Must be one of: 'retention_offer', 'loyalty_benefit', 'promotional', 'error_correction', 'other'

        Returns:
            Account flag applied successfully.
        """
        if not credit_card_account_id or not user_id or not flag_type or not expiration_date or not reason:
            return ("Error: Missing required parameters (credit_card_account_id, user_id, flag_type, "
                    "expiration_date, reason).")
        for name, value, valid in (
                ("flag_type", flag_type, ["annual_fee_waived", "promotional_apr", "rewards_bonus", "other"]),
                ("reason", reason, ["retention_offer", "loyalty_benefit", "promotional", "error_correction", "other"])):
            if value not in valid:
                return f"Error: Invalid {name}. Must be one of: {valid}"
        if error := _no_card_account(self.db, credit_card_account_id):
            return error
        flag_id = "ccflag_" + r.short_hash(f"account_flag:{credit_card_account_id}:{flag_type}:{expiration_date}", 12)
        record = {"flag_id": flag_id, "credit_card_account_id": credit_card_account_id, "user_id": user_id,
                  "flag_type": flag_type, "effective_date": r.TODAY, "expiration_date": expiration_date,
                  "reason": reason, "applied_at": r.TODAY, "status": "ACTIVE"}
        if not r.add(self.db, "credit_card_account_flags", flag_id, record):
            return f"Error: Failed to apply account flag. Flag ID '{flag_id}' may already exist."
        return (f"Account flag applied successfully!\n  - Flag ID: {flag_id}\n  - Account: {credit_card_account_id}\n"
                f"  - User ID: {user_id}\n  - Flag Type: {r.title(flag_type)}\n  - Effective Date: {r.TODAY}\n"
                f"  - Expiration Date: {expiration_date}\n  - Reason: {r.title(reason)}")

    @discoverable("write")
    def close_credit_card_account_7834(self, credit_card_account_id: str, user_id: str) -> str:
        """Close a customer's credit card account permanently.

        Args:
            credit_card_account_id (string): The credit card account ID to close
            user_id (string): The user's unique identifier in the system

        Returns:
            Credit card account closed successfully.
        """
        if not credit_card_account_id or not user_id:
            return "Error: Missing required parameters (credit_card_account_id, user_id)."
        if error := _no_card_account(self.db, credit_card_account_id):
            return error
        cards = self.db["credit_card_accounts"]["data"]
        if credit_card_account_id not in cards:
            return f"Error: Failed to close credit card account '{credit_card_account_id}'."
        cards[credit_card_account_id].update(status="CLOSED", closed_date=r.TODAY, closed_by=user_id)
        args = json.dumps({"credit_card_account_id": credit_card_account_id, "user_id": user_id}, indent=2)
        return (f"Credit card account closed successfully.\n\nExecuted: close_credit_card_account_7834\n"
                f"Arguments: {args}\nAccount {credit_card_account_id} has been closed.")

    @discoverable("write")
    def pay_credit_card_from_checking_9182(self, user_id: str, checking_account_id: str, credit_card_account_id: str,
                                           amount: float) -> str:
        """Pay off a credit card balance using funds from the customer's Rho-Bank checking account. This deducts the specified amount from the checking account and reduces the credit card balance by the same amount.

        Args:
            user_id (string): The customer's unique identifier in the system
            checking_account_id (string): The ID of the Rho-Bank checking account to debit funds from
            credit_card_account_id (string): The ID of the credit card account to apply the payment to
            amount (number): The payment amount in dollars. Must be a positive number.

        Returns:
            Credit card payment processed successfully.
        """
        if not user_id or not checking_account_id or not credit_card_account_id or amount is None:
            return ("Error: Missing required parameters (user_id, checking_account_id, credit_card_account_id, "
                    "amount).")
        try:
            amount = float(amount)
            if amount <= 0:
                return "Error: Payment amount must be a positive number."
        except (ValueError, TypeError):
            return "Error: Invalid payment amount. Must be a positive number."
        accounts = self.db["accounts"]["data"]
        if checking_account_id not in accounts:
            return f"Error: Checking account '{checking_account_id}' not found."
        checking = accounts[checking_account_id]
        if checking.get("user_id") != user_id:
            return f"Error: Checking account '{checking_account_id}' does not belong to user '{user_id}'."
        if checking.get("class") != "checking":
            return f"Error: Account '{checking_account_id}' is not a checking account."
        funds = r.balance(checking)
        if amount > funds:
            return (f"Error: Insufficient funds in checking account. Available balance: ${funds:.2f}, "
                    f"requested payment: ${amount:.2f}.")
        card, error = _owned_card(self.db, credit_card_account_id, user_id)
        if card is None:
            return error  # type: ignore[return-value]
        owed = _dollars(card.get("current_balance", "$0.00"))
        if amount > owed:
            return (f"Error: Payment amount (${amount:.2f}) exceeds credit card balance (${owed:.2f}). "
                    "Please specify an amount up to the outstanding balance.")
        checking["current_holdings"] = f"{funds - amount:.2f}"
        card["current_balance"] = f"${owed - amount:.2f}"
        return (f"Payment processed successfully!\n  - Payment Amount: ${amount:.2f}\n"
                f"  - From Checking Account: {checking_account_id}\n  - To Credit Card Account: {credit_card_account_id}\n"
                f"  - New Checking Balance: ${funds - amount:.2f}\n  - New Credit Card Balance: ${owed - amount:.2f}\n"
                "The payment has been applied immediately.")

    @discoverable("write")
    def submit_credit_limit_increase_request_7392(self, credit_card_account_id: str, user_id: str,
                                                  requested_increase_amount: int) -> str:
        """Submit a credit limit increase request for a customer's credit card.

        Args:
            credit_card_account_id (string): The credit card account ID to request increase for
            user_id (string): The customer's unique identifier in the system
            requested_increase_amount (integer): The dollar amount by which to increase the credit limit (e.g., 2500 for $2,500)

        Returns:
            Credit limit increase request submitted successfully.
        """
        if not credit_card_account_id or not user_id or requested_increase_amount is None:
            return "Error: Missing required parameters."
        try:  # a whole number of dollars, however it was written (2500 or 2500.0)
            amount = float(requested_increase_amount)
        except (TypeError, ValueError):
            return "Error: Invalid requested_increase_amount. Must be a whole number."
        if not amount.is_integer():
            return "Error: Invalid requested_increase_amount. Must be a whole number of dollars."
        if int(amount) <= 0:
            return "Error: Requested increase amount must be positive."
        _, error = _owned_card(self.db, credit_card_account_id, user_id)
        if error:
            return error
        rid = r.limit_request_id(credit_card_account_id, user_id, int(amount))
        record = {"request_id": rid, "credit_card_account_id": credit_card_account_id, "user_id": user_id,
                  "requested_increase_amount": int(amount), "submitted_at": r.TODAY, "status": "PENDING"}
        if not r.add(self.db, "credit_limit_increase_requests", rid, record):
            return "Error: A similar request may already exist."
        return (f"Credit limit increase request submitted successfully.\n\n"
                f"Executed: submit_credit_limit_increase_request_7392\n  - Request ID: {rid}\n"
                f"  - Account: {credit_card_account_id}\n  - Requested Increase: ${int(amount):,}\n  - Status: PENDING")

    @discoverable("read")
    def get_credit_limit_increase_history_4829(self, credit_card_account_id: str) -> str:
        """Retrieve the credit limit increase request history for a specific credit card account. Returns all previous CLI requests including dates, amounts, and statuses.

        Args:
            credit_card_account_id (string): The credit card account ID to check for CLI history

        Returns:
            Credit limit increase history retrieved.
        """
        if not credit_card_account_id:
            return "Error: Missing required parameter: credit_card_account_id"
        return history(self.db, "get_credit_limit_increase_history_4829", "credit_limit_increase_requests",
                       "credit_card_account_id", credit_card_account_id, "Credit limit increase history retrieved.",
                       f"Credit limit increase history for account {credit_card_account_id}:",
                       "No credit limit increase requests found for this account.")

    @discoverable("read")
    def get_payment_history_6183(self, credit_card_account_id: str, months: int) -> str:
        """Retrieve payment history for a credit card account.

        Args:
            credit_card_account_id (string): The credit card account ID to check payment history for
            months (integer): Number of months of payment history to retrieve

        Returns:
            Payment history retrieved.
        """
        if not credit_card_account_id or months is None:
            return "Error: Missing required parameters (credit_card_account_id, months)."
        try:
            months = int(months)
            if months <= 0:
                return "Error: months must be a positive integer."
        except (ValueError, TypeError):
            return "Error: Invalid months value. Must be a positive integer."
        payments = [p for p in self.db["payment_history"]["data"].values()
                    if p.get("credit_card_account_id") == credit_card_account_id]
        if not payments:
            return f"No payment history found for account '{credit_card_account_id}'."
        payments = sorted(payments, key=lambda p: p.get("payment_date") or "", reverse=True)[:months]
        on_time = 0
        for p in payments:  # consecutive on-time payments, most recent first
            if p.get("status") != "ON_TIME":
                break
            on_time += 1
        lines = [f"Payment history for account '{credit_card_account_id}' (last {months} months):",
                 f"Consecutive on-time payments: {on_time}"]
        lines += [f"\n  - Payment Date: {p.get('payment_date')}\n    Amount: {p.get('amount')}\n"
                  f"    Status: {p.get('status')}" for p in payments]
        return "\n".join(lines)

    @discoverable("write")
    def approve_credit_limit_increase_5847(self, credit_card_account_id: str, user_id: str,
                                           new_credit_limit: int) -> str:
        """Approve and apply a credit limit increase for a customer's credit card.

        Args:
            credit_card_account_id (string): The credit card account ID
            user_id (string): The customer's unique identifier in the system
            new_credit_limit (integer): The new total credit limit in dollars (e.g., 7500 for $7,500)

        Returns:
            Credit limit increase approved and applied successfully.
        """
        if not credit_card_account_id or not user_id or new_credit_limit is None:
            return "Error: Missing required parameters."
        card, error = _owned_card(self.db, credit_card_account_id, user_id)
        if card is None:
            return error  # type: ignore[return-value]
        if _limit_blocked(self.db, card, credit_card_account_id, user_id):
            return "Error: Credit limit increase request cannot be approved at this time."
        old = _dollars(card.get("credit_limit", "$0.00"))
        new = float(new_credit_limit)
        card["credit_limit"] = f"${new:.2f}"
        rid = r.limit_request_id(credit_card_account_id, user_id, new - old)
        r.add(self.db, "credit_limit_increase_requests", rid,
              {"request_id": rid, "credit_card_account_id": credit_card_account_id, "user_id": user_id,
               "previous_limit": f"${old:.2f}", "new_limit": f"${new:.2f}", "increase_amount": f"${new - old:.2f}",
               "decision_date": r.TODAY, "status": "APPROVED"})
        return (f"Credit limit increase approved!\n  - Account: {credit_card_account_id}\n"
                f"  - Previous Limit: ${old:.2f}\n  - New Limit: ${new:.2f}\n  - Increase: ${new - old:.2f}\n"
                f"  - Effective Date: {r.TODAY}\nThe customer will receive a confirmation email.")

    @discoverable("write")
    def deny_credit_limit_increase_5848(self, credit_card_account_id: str, user_id: str, denial_reason: str) -> str:
        """Deny a credit limit increase request for a customer's credit card.

        Args:
            credit_card_account_id (string): The credit card account ID
            user_id (string): The customer's unique identifier in the system
            denial_reason (string): The reason for denying the request. Must be one of: 'insufficient_account_age', 'cooldown_period_active', 'pending_disputes', 'pending_replacement_card', 'past_due_balance', 'high_utilization', 'insufficient_payment_history', 'requested_amount_exceeds_limit', 'other'

        Returns:
            Credit limit increase request denied.
        """
        if not credit_card_account_id or not user_id or not denial_reason:
            return "Error: Missing required parameters."
        if denial_reason not in _DENIAL_REASONS:
            return f"Error: Invalid denial_reason. Must be one of: {', '.join(_DENIAL_REASONS)}"
        if credit_card_account_id not in self.db["credit_card_accounts"]["data"]:
            return f"Error: Credit card account '{credit_card_account_id}' not found."
        rid = r.limit_request_id(credit_card_account_id, user_id, 0.0)
        r.add(self.db, "credit_limit_increase_requests", rid,
              {"request_id": rid, "credit_card_account_id": credit_card_account_id, "user_id": user_id,
               "denial_reason": denial_reason, "decision_date": r.TODAY, "status": "DENIED"})
        return (f"Credit limit increase request denied.\n  - Account: {credit_card_account_id}\n"
                f"  - Denial Reason: {denial_reason}\n  - Date: {r.TODAY}\n"
                "The customer will receive a notification explaining the denial.")
