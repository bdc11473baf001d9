"""Discoverable agent tools for debit-card disputes and limits: Regulation E disputes, their status,
blocking recurring payments, and temporary limit increases (τ³'s checks and texts)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.credit_tools import history
from memrl.envs.domains.banking_knowledge.discover import discoverable

_CATEGORIES = ["unauthorized_transaction", "atm_cash_discrepancy", "atm_deposit_not_credited", "duplicate_charge",
               "incorrect_amount", "goods_services_not_received", "recurring_charge_after_cancellation",
               "card_present_fraud", "card_not_present_fraud"]
_TXN_TYPES = ["pin_purchase", "signature_purchase", "online_purchase", "atm_withdrawal", "atm_deposit",
              "recurring_payment", "person_to_person"]
_FRAUD = ("unauthorized_transaction", "card_present_fraud", "card_not_present_fraud")
# default daily ATM limits by account level when a card has none of its own
_ATM_DEFAULTS = {"blue account": 500, "green account": 600, "light blue account": 400, "green fee-free account": 500,
                 "evergreen account": 750, "bluest account": 1500, "dark green account": 300,
                 "gold years account": 600, "purple account": 1000}


def _dispute_refusal(args: dict[str, Any]) -> str | None:
    """τ³'s argument checks of a debit-card dispute, in its order."""
    required = ("transaction_id", "account_id", "card_id", "user_id", "dispute_category", "transaction_date",
                "discovery_date", "disputed_amount", "transaction_type", "pin_compromised", "card_action")
    if not all(args[k] for k in required):
        return "Error: Missing required parameters."
    if args["customer_max_liability_amount"] is None:
        return "Error: customer_max_liability_amount is required."
    if any(args[k] is None for k in ("card_in_possession", "contacted_merchant", "police_report_filed",
                                     "written_statement_provided")):
        return ("Error: card_in_possession, contacted_merchant, police_report_filed, and written_statement_provided "
                "are required boolean fields.")
    for name, valid in (("dispute_category", _CATEGORIES), ("transaction_type", _TXN_TYPES),
                        ("pin_compromised", ["yes_shared", "yes_observed", "no", "unknown"]),
                        ("card_action", ["keep_active", "freeze_pending_investigation", "close_and_reissue"])):
        if args[name] not in valid:
            return f"Error: Invalid {name}. Must be one of: {valid}"
    if args["disputed_amount"] <= 0:
        return "Error: disputed_amount must be a positive number."
    return None


def _current_limit(card: dict[str, Any], account: dict[str, Any], limit_type: str) -> tuple[Any, str]:
    """(the card's present limit of that type, error text); ATM limits fall back to the level's default."""
    if limit_type != "atm":
        return card.get("daily_purchase_limit"), ""
    current = card.get("daily_atm_limit")
    if current is not None:
        return current, ""
    level = account.get("level", "").lower()
    if "light green" in level:
        return None, ("Error: Light Green Account (teen checking) cards have policy-based limits that cannot be "
                      "modified. The daily ATM withdrawal limit of $150 is fixed by account policy for safety "
                      "reasons. The customer may request the parent/guardian to withdraw cash from their own account "
                      "if needed.")
    current = _ATM_DEFAULTS.get(level)
    if current is None:
        return None, (f"Error: Could not determine the default ATM limit for account type '{account.get('level')}'. "
                      "Please verify the account type.")
    return current, ""


class DebitDisputeTools:
    """Debit-card dispute and limit tools, mixed into the agent's ``KnowledgeTools``."""

    db: dict[str, Any]

    @discoverable("write")
    def file_debit_card_transaction_dispute_6281(
            self, transaction_id: str, account_id: str, card_id: str, user_id: str, dispute_category: str,
            transaction_date: str, discovery_date: str, disputed_amount: float, transaction_type: str,
            card_in_possession: bool, pin_compromised: str, contacted_merchant: bool, police_report_filed: bool,
            written_statement_provided: bool, provisional_credit_eligible: bool,
            customer_max_liability_amount: float, card_action: str) -> str:
        """File a formal dispute for a debit card transaction under Regulation E. Debit card disputes affect actual bank funds and have different liability rules based on reporting timing.

        Args:
            transaction_id (string): The unique identifier for the transaction being disputed
            account_id (string): The checking account ID linked to the debit card
            card_id (string): The debit card ID
            user_id (string): The user's unique identifier in the system
            dispute_category (string): Category of the dispute. Must be one of: 'unauthorized_transaction', 'atm_cash_discrepancy', 'atm_deposit_not_credited', 'duplicate_charge', 'incorrect_amount', 'goods_services_not_received', 'recurring_charge_after_cancellation', 'card_present_fraud', 'card_not_present_fraud'
            transaction_date (string): Date when the transaction occurred, format MM/DD/YYYY
            discovery_date (string): Date when the user first noticed the issue, format MM/DD/YYYY
            disputed_amount (number): The dollar amount being disputed
            transaction_type (string): Type of transaction. Must be one of: 'pin_purchase', 'signature_purchase', 'online_purchase', 'atm_withdrawal', 'atm_deposit', 'recurring_payment', 'person_to_person'
            card_in_possession (boolean): Whether the customer still has their physical debit card in their possession
            pin_compromised (string): Whether the customer's PIN may have been compromised. Must be one of: 'yes_shared', 'yes_observed', 'no', 'unknown'
            contacted_merchant (boolean): Whether the user attempted to resolve the issue with the merchant first
            police_report_filed (boolean): Whether a police report has been filed (recommended for fraud over $500)
            written_statement_provided (boolean): Whether the customer has provided a written statement describing what happened (required for Reg E provisional credit)
            provisional_credit_eligible (boolean): Whether the user is eligible for provisional credit based on Debit Card Provisional Credit Guidelines
            customer_max_liability_amount (number): The maximum dollar amount the customer could be liable for based on Regulation E reporting timing rules and the disputed amount. Use -1 for unlimited liability.
            card_action (string): Action to take on the card. Must be one of: 'keep_active', 'freeze_pending_investigation', 'close_and_reissue'

        Returns:
            Debit card transaction dispute filed successfully. A case has been opened and provisional credit determination has been recorded.
        """
        args = dict(locals())
        if refusal := _dispute_refusal(args):
            return refusal
        dsp = r.dispute_id(user_id, transaction_id)
        fraud, shared = dispute_category in _FRAUD, pin_compromised == "yes_shared"
        record = {"dispute_id": dsp, **{k: args[k] for k in (
            "transaction_id", "account_id", "card_id", "user_id", "dispute_category", "transaction_date",
            "discovery_date", "disputed_amount", "transaction_type", "card_in_possession", "pin_compromised",
            "contacted_merchant", "police_report_filed", "written_statement_provided", "provisional_credit_eligible")},
                  "provisional_credit_issued": provisional_credit_eligible,
                  "provisional_credit_amount": disputed_amount if provisional_credit_eligible else None,
                  "customer_max_liability_amount": customer_max_liability_amount, "card_action": card_action,
                  "is_fraud_category": fraud, "pin_shared_voluntarily": shared, "submitted_at": r.TODAY,
                  "status": "OPEN"}
        if not r.add(self.db, "debit_card_disputes", dsp, record):
            return "Error: Dispute may have already been filed for this transaction."
        lines = [f"Dispute ID: {dsp}", f"Transaction: {transaction_id}", f"Account: {account_id}",
                 f"Category: {r.title(dispute_category)}", f"Disputed Amount: ${disputed_amount:.2f}",
                 f"Card Action: {r.title(card_action)}",
                 f"Provisional Credit: ISSUED - ${disputed_amount:.2f} credited within 10 business days per "
                 "Regulation E." if provisional_credit_eligible else
                 "Provisional Credit: Not eligible - see Debit Card Provisional Credit Guidelines for details."]
        if shared:
            lines.append("WARNING: Customer indicated PIN was shared voluntarily. This may affect liability "
                         "determination.")
        if fraud and not police_report_filed and disputed_amount > 500:
            lines.append("RECOMMENDATION: For fraud disputes over $500, filing a police report is recommended.")
        return "\n".join(lines)

    @discoverable("write")
    def set_debit_card_recurring_block_7382(self, card_id: str, block_recurring: bool) -> str:
        """Block or unblock all recurring payments on a debit card. When blocked, all recurring/subscription charges will be declined. One-time purchases are not affected.

        Args:
            card_id (string): The debit card ID to update
            block_recurring (boolean): True to block all recurring payments, False to unblock/allow recurring payments

        Returns:
            Debit card recurring payment settings updated successfully.
        """
        if not card_id:
            return "Error: Missing required parameter: card_id"
        card = self.db["debit_cards"]["data"].get(card_id)
        if not card:
            return f"Error: Debit card '{card_id}' not found."
        status = card.get("status", "").upper()
        if status != "ACTIVE":
            return (f"Error: Cannot update recurring block settings for a card with status '{status}'. "
                    "Card must be ACTIVE.")
        card["recurring_blocked"] = block_recurring
        if block_recurring:
            return (f"Recurring payments BLOCKED for debit card {card_id}.\nAll recurring/subscription charges will be "
                    "declined.\nOne-time purchases are not affected.\nThis change takes effect within 24 hours.")
        return (f"Recurring payments UNBLOCKED for debit card {card_id}.\nRecurring/subscription charges will now be "
                "allowed.\nThis change takes effect within 24 hours.")

    @discoverable("read")
    def get_debit_dispute_status_7483(self, user_id: str) -> str:
        """Retrieve a user's debit card dispute history from the debit_card_disputes table. Returns all debit card disputes filed by the user, including dispute IDs, categories, amounts, statuses, and provisional credit information.

        Args:
            user_id (string): The user's unique identifier in the system

        Returns:
            Debit card dispute history retrieved successfully.
        """
        if not user_id:
            return "Error: Missing required parameter: user_id"
        return history(self.db, "get_debit_dispute_status_7483", "debit_card_disputes", "user_id", user_id,
                       "Debit card dispute history retrieved successfully.",
                       f"Debit card dispute history for user {user_id}:", "No debit card disputes found for this user.")

    @discoverable("write")
    def request_temporary_debit_card_limit_increase_8374(self, card_id: str, limit_type: str, new_limit: int) -> str:
        """Request a temporary 24-hour increase to a debit card's daily ATM or purchase limit.

        Args:
            card_id (string): The debit card ID to increase limits for
            limit_type (string): Type of limit to increase: 'atm' for daily ATM withdrawal limit, 'purchase' for daily purchase limit
            new_limit (integer): The requested new temporary limit amount in dollars

        Returns:
            Temporary limit increase granted successfully.
        """
        for name, value in (("card_id", card_id), ("limit_type", limit_type)):
            if not value:
                return f"Error: Missing required parameter: {name}."
        if limit_type not in ["atm", "purchase"]:
            return f"Error: Invalid limit_type '{limit_type}'. Must be 'atm' or 'purchase'."
        if new_limit is None:
            return "Error: Missing required parameter: new_limit."
        try:
            wanted = float(new_limit)
        except (ValueError, TypeError):
            return f"Error: new_limit must be an integer, got '{new_limit}'."
        if not wanted.is_integer():
            return f"Error: new_limit must be an integer, got '{wanted}'."
        if int(wanted) <= 0:
            return "Error: new_limit must be a positive amount."
        cards, accounts = self.db["debit_cards"]["data"], self.db["accounts"]["data"]
        if card_id not in cards:
            return f"Error: Debit card '{card_id}' not found."
        card = cards[card_id]
        if card.get("status") != "ACTIVE":
            return (f"Error: Debit card '{card_id}' is not active. Current status: {card.get('status')}. Only ACTIVE "
                    "cards can have limit increases.")
        account_id = card.get("account_id")
        if not account_id or account_id not in accounts:
            return f"Error: Could not find linked account for debit card '{card_id}'."
        account = accounts[account_id]
        if account.get("status") != "OPEN":
            return (f"Error: The linked account '{account_id}' is not in good standing. Account status: "
                    f"{account.get('status')}.")
        opened = account.get("date_opened")
        if opened:
            try:
                age = (datetime.strptime(r.TODAY, "%m/%d/%Y") - datetime.strptime(opened, "%m/%d/%Y")).days
            except ValueError:
                age = 60
            if age < 60:
                return (f"Error: Account must be at least 60 days old for a temporary limit increase. "
                        f"Account age: {age} days.")
        return self._grant_limit(card, card_id, account, limit_type, int(wanted))

    def _grant_limit(self, card: dict[str, Any], card_id: str, account: dict[str, Any], limit_type: str,
                     wanted: int) -> str:
        """The limit checks that need the present limit, then the temporary increase itself."""
        current, error = _current_limit(card, account, limit_type)
        if error:
            return error
        label = "Daily ATM Withdrawal Limit" if limit_type == "atm" else "Daily Purchase Limit"
        if current is None:
            return (f"Error: The card does not have a {label.lower()} configured. This may be a restricted account "
                    "type where limits are set by account policy and cannot be modified.")
        ceiling = int(current * 1.5)
        if wanted > ceiling:
            return (f"Error: Requested limit ${wanted} exceeds the maximum allowed temporary increase. Maximum "
                    f"temporary limit is ${ceiling} (150% of current ${current} limit).")
        if wanted <= current:
            return f"Error: Requested limit ${wanted} is not higher than the current limit of ${current}."
        card["daily_atm_limit" if limit_type == "atm" else "daily_purchase_limit"] = wanted
        card[f"temporary_{limit_type}_limit_increase"] = True
        card[f"original_{limit_type}_limit"] = current
        card[f"temporary_{limit_type}_limit_expires"] = r.TODAY
        return "\n".join([f"Temporary {label} Increase Granted Successfully", f"Card ID: {card_id}",
                          f"Previous Limit: ${current}", f"New Temporary Limit: ${wanted}",
                          f"Increase Amount: ${wanted - current}", "", "Important Information:",
                          "- This temporary increase expires in 24 hours",
                          f"- After expiration, the limit will revert to ${current}",
                          "- Only one temporary increase is allowed per 24-hour period", "",
                          "Note: If the customer is at a third-party (non-Rho-Bank) ATM, that ATM may have its own",
                          "per-transaction or daily limits that Rho-Bank cannot override. The customer may need to",
                          "use a Rho-Bank ATM or make multiple smaller withdrawals at third-party ATMs."])
