"""Discoverable agent tools for checking and savings accounts: opening (with τ³'s eligibility rules),
closing (with its early-closure fees), listing, transfers, credits, interest reports, transaction
history and ATM deposit images."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memrl.envs.domains.banking_knowledge import atm_images
from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.discover import discoverable

NOW = datetime(2025, 11, 14, 3, 40, 0)  # τ³'s fixed "now"
# early-closure fee (dollars) and window (days) by account level: personal checking, then savings
_CHECKING_EARLY = {"Light Blue Account": (15, 30), "Light Green Account": (15, 30), "Green Fee-Free Account": (15, 30),
                   "Blue Account": (25, 60), "Green Account": (25, 60), "Evergreen Account": (50, 90),
                   "Bluest Account": (100, 180)}
_SAVINGS_EARLY = {"Bronze Account": (20, 60), "Silver Account": (35, 90), "Silver Plus Account": (35, 90),
                  "Gold Account": (75, 180), "Gold Plus Account": (75, 180), "Gold Years Account": (75, 180),
                  "Platinum Account": (150, 270), "Platinum Plus Account": (150, 270),
                  "Diamond Elite Account": (150, 270)}
_LIVE = ("OPEN", "ACTIVE")
_NOT_ELIGIBLE = "Error: Account eligibility requirements not met."


def _age_days(account: dict[str, Any]) -> int:
    try:
        return (NOW - datetime.strptime(account.get("date_opened", ""), "%m/%d/%Y")).days
    except ValueError:
        return 0


def _kind(account: dict[str, Any]) -> Any:
    return account.get("account_type", account.get("class", ""))


def _open_refusal(accounts: list[dict[str, Any]], account_type: str) -> str | None:
    """τ³'s eligibility rules for a new account of ``account_type``, given the user's accounts."""
    if account_type == "savings":  # a personal checking account open for 14 days or more
        if not any(_kind(a) in ("checking", "personal_checking") and a.get("status", "") in _LIVE
                   and _age_days(a) >= 14 for a in accounts):
            return _NOT_ELIGIBLE
    if account_type == "business_checking":  # nothing closed, and an open personal checking account
        if any(a.get("status") == "CLOSED" for a in accounts):
            return _NOT_ELIGIBLE
        if not any(_kind(a) in ("checking", "personal_checking") and a.get("status", "") in _LIVE for a in accounts):
            return _NOT_ELIGIBLE
    if account_type == "business_savings":  # no negative balance, business checking open 30 days or more
        if any(r.balance(a) < 0 for a in accounts):
            return _NOT_ELIGIBLE
        if not any(_kind(a) == "business_checking" and a.get("status", "") in _LIVE and _age_days(a) >= 30
                   for a in accounts):
            return _NOT_ELIGIBLE
    return None


def _credit_account(db: dict[str, Any], account_id: Any, amount: Any, credit_type: str, valid: list[str],
                    classes: tuple[str, ...], wrong_class: str) -> tuple[dict[str, Any] | None, float, str]:
    """The checks shared by the checking and savings credit tools: (account, amount, error text)."""
    try:
        amount = float(amount)
    except (TypeError, ValueError):
        return None, 0.0, "Error: Invalid credit amount. Must be a number."
    if amount <= 0:
        return None, amount, "Error: Credit amount must be positive."
    if credit_type not in valid:
        return None, amount, f"Error: Invalid credit_type. Must be one of: {valid}"
    accounts = db["accounts"]["data"]
    if account_id not in accounts:
        return None, amount, f"Error: Account '{account_id}' not found."
    account = accounts[account_id]
    if account.get("class", "").lower() not in classes:
        return None, amount, f"Error: Account '{account_id}' is not a {wrong_class}"
    if account.get("status") not in _LIVE:
        return None, amount, f"Error: Account '{account_id}' is not active."
    return account, amount, ""


def _post_credit(db: dict[str, Any], account: dict[str, Any], account_id: Any, amount: float, credit_type: str,
                 prefix: str, description: str, holdings: str) -> str:
    """Credit the account (holdings written with ``holdings`` format), record the transaction, describe it."""
    before = r.balance(account)
    after = before + amount
    account["current_holdings"] = holdings.format(after)
    txn = "txn_" + r.short_hash(f"{prefix}:{account_id}:{credit_type}:{amount}:{r.TODAY}")
    db["bank_account_transaction_history"]["data"][txn] = {
        "transaction_id": txn, "account_id": account_id, "date": r.TODAY, "description": description,
        "amount": amount, "type": credit_type, "status": "posted"}
    return (f"\nCredit applied successfully!\n  - Transaction ID: {txn}\n  - Account: {account_id}\n"
            f"  - Credit Type: {credit_type}\n  - Amount: ${amount:.2f}\n  - Previous Balance: ${before:.2f}\n"
            f"  - New Balance: ${after:.2f}")


def _txn_time(item: tuple[str, dict[str, Any]]) -> datetime:
    text = str(item[1].get("date", ""))
    for fmt in ("%m/%d/%Y %H:%M:%S", "%m/%d/%Y"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return datetime.min


class BankAccountTools:
    """Bank-account tools, mixed into the agent's ``KnowledgeTools``."""

    db: dict[str, Any]

    @discoverable("write")
    def open_bank_account_4821(self, user_id: str, account_type: str, account_class: str) -> str:
        """Open a new bank account for a customer.

        Args:
            user_id (string): The customer's unique identifier in the system
            account_type (string): Type of account to open. Must be one of: 'checking' (personal checking), 'savings' (personal savings), 'business_checking', 'business_savings'
            account_class (string): The full official account class name

        Returns:
            Bank account opened successfully.
        """
        if not user_id or not account_type or not account_class:
            return "Error: Missing required parameters."
        valid = ["checking", "savings", "business_checking", "business_savings"]
        if account_type not in valid:
            return f"Error: Invalid account_type. Must be one of: {valid}"
        mine = [a for a in self.db["accounts"]["data"].values() if a.get("user_id") == user_id]
        if refusal := _open_refusal(mine, account_type):
            return refusal
        account_id = r.short_hash(f"account:{user_id}:{account_type}:{account_class}")
        record = {"account_id": account_id, "user_id": user_id, "account_type": account_type,
                  "account_class": account_class, "current_holdings": "0.00", "status": "OPEN",
                  "date_opened": r.TODAY}
        if not r.add(self.db, "accounts", account_id, record):
            return f"Failed to open account: Account ID '{account_id}' may already exist."
        return (f"Bank account opened successfully!\n  - Account ID: {account_id}\n  - User ID: {user_id}\n"
                f"  - Account Type: {account_type}\n  - Account Class: {account_class}\n  - Status: OPEN\n"
                f"  - Initial Balance: $0.00\n  - Date Opened: {r.TODAY}")

    @discoverable("write")
    def close_bank_account_7392(self, account_id: str, reason: str = "Customer requested closure",
                                waive_early_closure_fee: bool = False) -> str:
        """Close a customer's bank account (checking or savings).

        Args:
            account_id (string): The ID of the bank account to close
            reason (string, optional): The reason for closing the account
            waive_early_closure_fee (boolean, optional): Whether to waive early closure fees

        Returns:
            Bank account closed successfully.
        """
        if not account_id:
            return "Error: Missing required parameter (account_id)."
        accounts = self.db["accounts"]["data"]
        if account_id not in accounts:
            return f"Error: Account '{account_id}' not found."
        account = accounts[account_id]
        if account.get("status") == "CLOSED":
            return f"Error: Account '{account_id}' is already closed."
        funds = r.balance(account)
        fee = 0.0
        if not waive_early_closure_fee:
            kind, level = account.get("class", ""), account.get("level", "")
            rule = (_CHECKING_EARLY.get(level) if kind == "checking"
                    else _SAVINGS_EARLY.get(level) if kind == "savings" else None)
            opened = account.get("date_opened", "")
            if rule and opened:
                try:
                    young = (NOW - datetime.strptime(opened, "%m/%d/%Y")).days < rule[1]
                except ValueError:
                    young = False
                if young and funds < rule[0]:
                    return "Error: Account unable to be closed."
                if young:
                    fee = rule[0]
        if funds - fee != 0:
            return f"Error: Account balance must be $0.00 before closing. Current balance: ${funds:.2f}"
        account.update(status="CLOSED", date_closed=r.TODAY, closure_reason=reason,
                       early_closure_fee_waived=waive_early_closure_fee)
        return (f"Bank account closed successfully!\n  - Account ID: {account_id}\n"
                f"  - Account Type: {account.get('account_type', 'N/A')}\n"
                f"  - Account Class: {account.get('account_class', 'N/A')}\n  - Status: CLOSED\n"
                f"  - Date Closed: {r.TODAY}\n  - Reason: {reason}\n"
                f"  - Early Closure Fee Waived: {'Yes' if waive_early_closure_fee else 'No'}")

    @discoverable("read")
    def get_all_user_accounts_by_user_id_3847(self, user_id: str) -> str:
        """Retrieve all accounts (checking, savings, credit cards) for a customer.

        Args:
            user_id (string): The customer's unique identifier in the system

        Returns:
            User accounts retrieved successfully.
        """
        if not user_id:
            return "Error: Missing required parameter: user_id"
        bank = r.lookup(self.db, "accounts", "user_id", user_id)
        cards = r.lookup(self.db, "credit_card_accounts", "user_id", user_id)
        return "\n".join(["User accounts retrieved successfully.", "", "Executed: get_all_user_accounts_by_user_id_3847",
                          f"Accounts for user {user_id}:", "", "Bank Accounts:",
                          "  No bank accounts found." if r.missing(bank) else bank, "\nCredit Card Accounts:",
                          "  No credit card accounts found." if r.missing(cards) else cards])

    @discoverable("write")
    def transfer_funds_between_bank_accounts_7291(self, source_account_id: str, destination_account_id: str,
                                                  amount: float) -> str:
        """Transfer funds from one bank account to another.

        Args:
            source_account_id (string): The account ID to transfer funds from
            destination_account_id (string): The account ID to transfer funds to
            amount (number): The amount to transfer in USD

        Returns:
            Funds transferred successfully.
        """
        if not source_account_id or not destination_account_id or amount is None:
            return "Error: Missing required parameters (source_account_id, destination_account_id, amount)."
        try:
            amount = float(amount)
        except (ValueError, TypeError):
            return f"Error: Invalid amount '{amount}'. Must be a number."
        if amount <= 0:
            return "Error: Transfer amount must be positive."
        if source_account_id == destination_account_id:
            return "Error: Source and destination accounts cannot be the same."
        accounts = self.db["accounts"]["data"]
        for label, aid in (("Source", source_account_id), ("Destination", destination_account_id)):
            if aid not in accounts:
                return f"Error: {label} account '{aid}' not found."
        for label, aid in (("Source", source_account_id), ("Destination", destination_account_id)):
            if accounts[aid].get("status") not in _LIVE:
                return f"Error: {label} account '{aid}' is not active."
        src, dst = accounts[source_account_id], accounts[destination_account_id]
        have = r.balance(src)
        if have < amount:
            return (f"Error: Insufficient funds. Source account balance is ${have:.2f}, "
                    f"but transfer amount is ${amount:.2f}.")
        new_src, new_dst = have - amount, r.balance(dst) + amount
        src["current_holdings"] = f"${new_src:.2f}"
        dst["current_holdings"] = f"${new_dst:.2f}"
        return (f"Transfer completed successfully!\n  - Amount: ${amount:.2f}\n"
                f"  - From: {source_account_id} (new balance: ${new_src:.2f})\n"
                f"  - To: {destination_account_id} (new balance: ${new_dst:.2f})")

    @discoverable("write")
    def apply_checking_account_credit_5829(self, account_id: str, amount: float, credit_type: str) -> str:
        """Apply a credit to a customer's checking account.

        Args:
            account_id (string): The checking account ID to credit
            amount (number): The positive dollar amount to credit (must be greater than 0)
            credit_type (string): The type of credit: 'rebate_credit' for missing rebates, 'fee_refund' for incorrect fee charges

        Returns:
            Credit applied to checking account successfully.
        """
        if not account_id or amount is None or not credit_type:
            return "Error: Missing required parameters."
        account, amount, error = _credit_account(
            self.db, account_id, amount, credit_type, ["rebate_credit", "fee_refund"], ("checking",),
            "checking account. Credits can only be applied to checking accounts.")
        if account is None:
            return error
        text = "REBATE CREDIT - CUSTOMER SERVICE" if credit_type == "rebate_credit" else "FEE REFUND - CUSTOMER SERVICE"
        return _post_credit(self.db, account, account_id, amount, credit_type, "checking_credit", text, "${:.2f}")

    @discoverable("write")
    def apply_savings_account_credit_6831(self, account_id: str, amount: float, credit_type: str) -> str:
        """Apply a credit to a customer's savings account for interest corrections, fee refunds, or goodwill adjustments.

        Args:
            account_id (string): The savings account ID to credit
            amount (number): The positive dollar amount to credit (must be greater than 0)
            credit_type (string): The type of credit: 'interest_correction' for APY/interest calculation errors, 'fee_refund' for incorrect fee charges, 'goodwill_credit' for customer service gestures

        Returns:
            Credit applied to savings account successfully.
        """
        if not account_id or amount is None or not credit_type:
            return "Error: Missing required parameters."
        account, amount, error = _credit_account(
            self.db, account_id, amount, credit_type, ["interest_correction", "fee_refund", "goodwill_credit"],
            ("saving", "savings"), "savings account. This tool only applies to savings accounts.")
        if account is None:
            return error
        text = {"interest_correction": "INTEREST CORRECTION - CUSTOMER SERVICE",
                "fee_refund": "FEE REFUND - CUSTOMER SERVICE"}.get(credit_type, "GOODWILL CREDIT - CUSTOMER SERVICE")
        return _post_credit(self.db, account, account_id, amount, credit_type, "savings_credit", text, "{:.2f}")

    @discoverable("write")
    def submit_interest_discrepancy_report_7294(self, account_id: str, user_id: str, expected_apy: float,
                                                actual_apy: float, amount_difference: float) -> str:
        """Submit a report for interest calculation discrepancies to the backend team for investigation. Use this when the interest credited to a customer's account does not match expected APY calculations.

        Args:
            account_id (string): The savings account ID with the discrepancy
            user_id (string): The customer's unique identifier
            expected_apy (number): The APY percentage the customer should have received (e.g., 2.775 for 2.775%)
            actual_apy (number): The APY percentage that was actually applied (e.g., 2.5 for 2.5%)
            amount_difference (number): The dollar amount difference between expected and actual interest credited

        Returns:
            Interest discrepancy report submitted successfully. Backend team will investigate.
        """
        if not account_id or not user_id or expected_apy is None or actual_apy is None or amount_difference is None:
            return "Error: Missing required parameters."
        try:
            expected, actual, diff = float(expected_apy), float(actual_apy), float(amount_difference)
        except (ValueError, TypeError):
            return "Error: expected_apy, actual_apy, and amount_difference must be numbers."
        account = self.db["accounts"]["data"].get(account_id)
        if account is None:
            return f"Error: Account '{account_id}' not found."
        user = self.db["users"]["data"].get(user_id)
        if user is None:
            return f"Error: User '{user_id}' not found."
        # τ³ files the report in a table its database does not have: nothing is stored
        report = "IDR_" + r.short_hash(f"interest_report:{account_id}:{user_id}:{expected}:{actual}:{r.TODAY}")
        level = account.get("level", "Unknown")
        return (f"\nInterest Discrepancy Report Submitted Successfully!\n  - Report ID: {report}\n"
                f"  - Account: {account_id} ({level})\n  - Customer: {user.get('name', 'Unknown')}\n"
                f"  - Expected APY: {expected}%\n  - Actual APY: {actual}%\n"
                f"  - APY Difference: {round(expected - actual, 4)}%\n  - Amount Difference: ${diff:.2f}\n"
                "  - Status: PENDING_REVIEW\n\nThe backend team will investigate this discrepancy and ensure "
                "correct APY calculations are applied going forward.")

    @discoverable("read")
    def get_bank_account_transactions_9173(self, account_id: str) -> str:
        """Retrieve the transaction history for a bank account.

        Transactions are returned in reverse chronological order (most recent
        first).

        Args:
            account_id (string): The bank account ID to retrieve transactions for

        Returns:
            Bank account transactions retrieved successfully.
        """
        if not account_id:
            return "Error: Missing required parameter: account_id"
        if account_id not in self.db["accounts"]["data"]:
            return f"Error: Account '{account_id}' not found."
        # newest first; a stable sort keeps same-day records in stored order, as τ³'s tie-break relies on
        txns = sorted(r.find(self.db, "bank_account_transaction_history", account_id=account_id), key=_txn_time,
                      reverse=True)
        body = (r.format_records("bank_account_transaction_history", txns) if txns
                else "\nNo transactions found for this account.")
        return "\n".join(["Bank account transactions retrieved successfully.", "",
                          "Executed: get_bank_account_transactions_9173", f"Transactions for account {account_id}:",
                          body])

    @discoverable("read")
    def get_atm_deposit_images_8473(self, transaction_id: str) -> str:
        """Retrieve ATM deposit envelope/check images for a specific ATM deposit transaction.

        Args:
            transaction_id (string): The transaction ID of the ATM deposit to retrieve images for

        Returns:
            ATM deposit images retrieved successfully.
        """
        if not transaction_id:
            return "Error: Missing required parameter: transaction_id"
        txns = self.db["bank_account_transaction_history"]["data"]
        if transaction_id not in txns:
            return f"Error: Transaction '{transaction_id}' not found."
        return atm_images.deposit_images(transaction_id, txns[transaction_id])
