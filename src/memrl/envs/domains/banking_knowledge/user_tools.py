"""The customer's tools (τ³'s ``KnowledgeUserTools``): applications, referrals, transactions, transfer
requests, and the discoverable tools an agent can hand over.

The user works on the same database as the agent (one bank). A discoverable user tool refuses to
run until the agent has given it (a ``user_discoverable_tools`` record) and logs each call in
``user_discoverable_tool_calls``; both tables are part of the graded database. A task may limit
the tools the user simulator is shown (``user_tools`` in the task): :attr:`shown` holds that list.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any

from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.discover import BankingToolkit, discoverable
from memrl.envs.toolkit import tool

CARD_TYPES = ["Bronze Rewards Card", "Business Bronze Rewards Card", "Business Gold Rewards Card",
              "Business Platinum Rewards Card", "Business Silver Rewards Card", "Crypto-Cash Back",
              "Diamond Elite Card", "EcoCard", "Gold Rewards Card", "Green Rewards Card", "Platinum Rewards Card",
              "Silver Rewards Card", "Silver Zoom Card"]
# reward percentage by card and purchase category ("default" for the rest), as τ³'s transaction tool rates them
CARD_REWARDS: dict[str, dict[str, float]] = {
    "Bronze Rewards Card": {"default": 1.0},
    "Silver Rewards Card": {"Travel": 4.0, "Software": 4.0, "default": 1.0},
    "Gold Rewards Card": {"default": 2.5},
    "Platinum Rewards Card": {"default": 10.0},
    "Business Bronze Rewards Card": {"default": 1.0},
    "Business Silver Rewards Card": {"Travel": 10.0, "Software": 10.0, "default": 1.0},
    "Green Rewards Card": {"Sustainable": 3.0, "default": 1.0},
    "Business Gold Rewards Card": {"Operations": 2.5, "default": 1.0},
    "Business Platinum Rewards Card": {"Travel": 4.0, "Software": 4.0, "Media": 4.0, "default": 1.5},
    "Silver Zoom Card": {"Transportation": 3.0, "default": 1.0},
    "Diamond Elite Card": {"default": 5.0},
    "EcoCard": {"Green": 5.0, "default": 1.0},
    "Crypto-Cash Back": {"default": 2.0},
}

def _executed(summary: str, name: str, args: dict[str, Any]) -> str:
    return f"{summary}\n\nExecuted: {name}\nArguments: {json.dumps(args, indent=2)}\n"


class KnowledgeUserTools(BankingToolkit):
    """The customer's toolkit; ``shown`` (None: all) limits the tools the user simulator sees."""

    tau2_class = "tau2.domains.banking_knowledge.tools:KnowledgeUserTools"

    shown: list[str] | None = None

    def schemas(self) -> list[dict[str, Any]]:
        keep = super().schemas()
        if self.shown is None:
            return keep
        names = {s["function"]["name"] for s in keep}
        if any(n not in names for n in self.shown):  # τ³ then gives the simulator no tools at all
            return []
        return [s for s in keep if s["function"]["name"] in self.shown]

    def _not_given(self, name: str) -> str | None:
        if "No records found" in r.lookup(self.db, "user_discoverable_tools", "tool_name", name):
            return (f"Error: Tool '{name}' has not been given to you by the agent. "
                    f"The agent must first use `give_discoverable_user_tool` to give this tool to you.")
        return None

    def _log_call(self, name: str, args: dict[str, Any]) -> None:
        record = {"tool_name": name, "arguments": args, "called_at": r.TODAY, "status": "CALLED"}
        seed = f"user_discoverable_tool_call:{name}:{json.dumps(args, sort_keys=True)}"
        r.add(self.db, "user_discoverable_tool_calls", r.short_hash(seed), record)

    # -- discoverable: the agent gives these ---------------------------------------------------
    @discoverable("write", owner="KnowledgeUserTools")
    def submit_cash_back_dispute_0589(self, user_id: str, transaction_id: str) -> str:
        """Submit a cash back dispute for a specific transaction.

        Args:
            user_id (string): The user's unique identifier in the system
            transaction_id (string): The unique identifier for the transaction with incorrect cash back

        Returns:
            Cash back dispute submitted successfully. Your case has been queued for review.
        """
        name = "submit_cash_back_dispute_0589"
        if error := self._not_given(name):
            return error
        args = {"user_id": user_id, "transaction_id": transaction_id}
        self._log_call(name, args)
        dsp = r.dispute_id(user_id, transaction_id)
        config = self.db["task_config"]["data"]
        resolve = bool(config) and config.get("dispute_settings", {}).get("auto_resolve_disputes", False)
        record = {"dispute_id": dsp, "user_id": user_id, "transaction_id": transaction_id, "submitted_at": r.TODAY}
        if resolve:
            record.update(status="RESOLVED", resolution="APPROVED")
            status = ("Status: RESOLVED - The dispute has been reviewed and approved. "
                      "The transaction rewards need to be updated.")
        else:
            record["status"] = "SUBMITTED"
            status = "Status: SUBMITTED - Your dispute has been queued for review."
        text = _executed("Cash back dispute submitted successfully. Your case has been queued for review.", name, args)
        if r.add(self.db, "cash_back_disputes", dsp, record):
            return text + f"Dispute ID: {dsp}\n{status}"
        return text + "Note: Dispute may have already been submitted for this transaction."

    @discoverable("write", owner="KnowledgeUserTools")
    def get_referral_link(self, user_id: str, card_name: str) -> str:
        """Generate a referral link for a specific credit card to share with friends or family.

        Args:
            user_id (string): The user's unique identifier in the system (the referrer)
            card_name (string): The name of the credit card to create a referral for (e.g., 'Gold Rewards Card')

        Returns:
            Referral link generated successfully. Share this link with the person you want to refer.
        """
        name = "get_referral_link"
        if error := self._not_given(name):
            return error
        args = {"user_id": user_id, "card_name": card_name}
        self._log_call(name, args)
        rid = r.short_hash(f"referral_link:{user_id}:{card_name}")
        record = {"referral_id": rid, "referrer_id": user_id, "referred_account_type": card_name,
                  "referral_status": "NO_PROGRESS", "date": r.TODAY}
        text = _executed("Referral link generated successfully. Share this link with the person you want to refer.",
                         name, args)
        if r.add(self.db, "referrals", rid, record):
            return text + f"Referral ID: {rid}\nReferral link: https://rhobank.com/refer/{rid}"
        return text + "Note: A referral link for this card may have already been generated."

    @discoverable("read", owner="KnowledgeUserTools")
    def get_card_last_4_digits(self, credit_card_account_id: str) -> str:
        """Look up the last 4 digits of a credit card number.

        Args:
            credit_card_account_id (string): The credit card account ID to look up (e.g., 'cc_76ad9cc60e_gold')

        Returns:
            Card information retrieved successfully.
        """
        name = "get_card_last_4_digits"
        if error := self._not_given(name):
            return error
        args = {"credit_card_account_id": credit_card_account_id}
        self._log_call(name, args)
        if r.missing(r.lookup(self.db, "credit_card_accounts", "account_id", credit_card_account_id)):
            return f"Error: Credit card account '{credit_card_account_id}' not found."
        digest = hashlib.sha256(f"card_last4:{credit_card_account_id}".encode()).hexdigest()
        last4 = "".join(c for c in digest if c.isdigit())[:4].ljust(4, "0")
        return _executed("Card information retrieved successfully.", name, args) + f"Last 4 digits of card: {last4}"

    @discoverable("write", owner="KnowledgeUserTools")
    def deposit_check_3847(self, account_id: str, check_amount: float) -> str:
        """Deposit a check into a checking or savings account. The user takes a photo of the check and submits it through their mobile banking app.

        Args:
            account_id (string): The bank account ID to deposit the check into
            check_amount (number): The amount of the check in USD

        Returns:
            Check deposited successfully. Funds will be available according to your account's deposit policy.
        """
        name = "deposit_check_3847"
        if error := self._not_given(name):
            return error
        args = {"account_id": account_id, "check_amount": check_amount}
        self._log_call(name, args)
        try:
            check_amount = float(check_amount)
        except (ValueError, TypeError):
            return f"Error: Invalid check amount '{check_amount}'. Must be a number."
        if check_amount <= 0:
            return "Error: Check amount must be positive."
        accounts = self.db["accounts"]["data"]
        if account_id not in accounts:
            return f"Error: Account '{account_id}' not found."
        if accounts[account_id].get("status") not in ("ACTIVE", "OPEN"):
            return f"Error: Account '{account_id}' is not active."
        before = r.balance(accounts[account_id])
        after = before + check_amount
        accounts[account_id]["current_holdings"] = f"${after:.2f}"
        return (_executed("Check deposited successfully. Funds will be available according to your account's "
                          "deposit policy.", name, args)
                + f"Check deposit processed!\n  - Account: {account_id}\n  - Check Amount: ${check_amount:.2f}\n"
                  f"  - Previous Balance: ${before:.2f}\n  - New Balance: ${after:.2f}")

    # -- always available --------------------------------------------------------------------
    @tool("write")
    def apply_for_credit_card(self, card_type: str, customer_name: str, annual_income: float,
                              rho_bank_subscription: bool = False) -> str:
        """Apply for a credit card.

        Args:
            card_type: Type of credit card
            customer_name: Full legal name
            annual_income: Annual income in USD
            rho_bank_subscription: Whether user has Rho-Bank+ subscription
        """
        if card_type not in CARD_TYPES:
            return f"Error: Invalid card_type '{card_type}'. Must be one of: {CARD_TYPES}"
        try:  # as a float: 100000 and 100000.0 make the same application id
            annual_income = float(annual_income)
        except (TypeError, ValueError):
            return "Error: Invalid annual_income. Must be a number."
        app_id = r.short_hash(f"credit_card:{card_type}:{customer_name}:{annual_income}:{rho_bank_subscription}")
        record = {"application_id": app_id, "card_type": card_type, "customer_name": customer_name,
                  "annual_income": annual_income, "rho_bank_subscription": rho_bank_subscription,
                  "status": "PENDING", "date": r.TODAY}
        if not r.add(self.db, "credit_card_applications", app_id, record):
            return f"Failed to submit application: Record ID '{app_id}' may already exist."
        return ("Credit card application submitted:\nYour application has been successfully submitted. "
                "You will receive a decision within 5-7 business days via email.")

    @tool("write")
    def submit_referral(self, user_id: str, account_type: str) -> str:
        """Submit a referral request to refer someone to open an account.

        Args:
            user_id: Your user ID (the referrer)
            account_type: The type of account you are referring someone to open
        """
        rid = r.short_hash(f"referral:{user_id}:{account_type}")
        record = {"referral_id": rid, "referrer_id": user_id, "referred_account_type": account_type,
                  "referral_status": "NO_PROGRESS", "date": r.TODAY}
        if not r.add(self.db, "referrals", rid, record):
            return f"Failed to submit referral: Record ID '{rid}' may already exist."
        return (f"Referral request submitted successfully!\n  - Referral ID: {rid}\n  - Referrer ID: {user_id}\n"
                f"  - Account Type: {account_type}\n  - Status: NO_PROGRESS\n  - Date: {r.TODAY}\n\n"
                "Share your referral ID with the person you're referring. "
                "They will need to use this when applying for their account.")

    def query_database(self, database_name: str, constraints: str = "{}") -> str:
        """Query a table with JSON constraints (not a tool: for task setup and checks)."""
        return r.query_text(self.db, database_name, constraints)

    @tool("write")
    def call_discoverable_user_tool(self, discoverable_tool_name: str, arguments: str = "{}") -> str:
        """Call a tool that was given to you by the agent.

        Use this when the agent has instructed you to perform an action using
        a discoverable tool. The agent will have told you the tool name and arguments.

        This simulates you performing the action in the real world (e.g., opening
        a webpage, navigating to a section, clicking a button).

        Args:
            discoverable_tool_name: The name of the discoverable tool to call (e.g., "open_webpage")
            arguments: JSON string of arguments for the tool (e.g., '{"url": "https://example.com"}')

        Returns:
            The result of executing the discoverable tool
        """
        found = self.discoverable_tools()
        if discoverable_tool_name not in found:
            return f"Error: Unknown discoverable tool '{discoverable_tool_name}'."
        try:
            args = json.loads(arguments, parse_int=float)
        except json.JSONDecodeError as err:
            return f"Error: Invalid JSON in arguments: {err}"
        method = found[discoverable_tool_name]
        params = inspect.signature(method).parameters
        for pname, p in params.items():
            if pname != "self" and p.default is inspect.Parameter.empty and pname not in args:
                return f"Error: Missing required parameter: {pname}"
        for aname in args:
            if aname not in params:
                return f"Error: Unexpected parameter: {aname}"
        try:
            return method(**args)
        except TypeError as err:
            return f"Error: Invalid arguments for tool '{discoverable_tool_name}': {err}"

    @tool("read")
    def list_discoverable_user_tools(self) -> str:
        """List all tools that have been given to you by the agent.

        Use this to see what actions the agent has instructed you to perform.

        Returns:
            A list of tools that have been given to you
        """
        listing = r.query_text(self.db, "user_discoverable_tools")
        if "No results found" in listing:  # never taken: the lookup says "No records found"
            return "No tools have been given to you yet by the agent."
        return f"Tools given to you by the agent:\n{listing}"

    @tool("write")
    def request_human_agent_transfer(self) -> str:
        """Request to be transferred to a human agent for assistance.

        Use this when you want to speak with a real human agent instead of
        the automated system. Each request will be logged and processed.

        Returns:
            Confirmation that your transfer request has been submitted
        """
        listing = r.query_text(self.db, "human_transfer_requests")
        count = 1 if r.missing(listing) else listing.count("request_id") + 1
        rid = f"transfer_request_{count}"
        r.add(self.db, "human_transfer_requests", rid,
              {"request_id": rid, "request_number": count, "requested_at": r.TODAY, "status": "PENDING"})
        return f"Transfer request #{count} submitted.\nThe agent will process your request."

    @tool("write")
    def submit_transaction(self, user_id: str, credit_card_type: str, merchant_name: str, amount: float,
                           category: str) -> str:
        """Submit a credit card transaction.

        Args:
            user_id: Your user ID
            credit_card_type: Type of credit card used (e.g., "Bronze Rewards Card", "Gold Rewards Card")
            merchant_name: Name of the merchant where the purchase was made
            amount: Transaction amount in USD (e.g., 127.43)
            category: Transaction category (e.g., "Groceries", "Dining", "Travel", "Software", "Entertainment", "Utilities", "Shopping")
        """
        if credit_card_type not in CARD_REWARDS:
            return f"Error: Unknown credit card type '{credit_card_type}'. Available types: {list(CARD_REWARDS)}"
        txn = r.transaction_id(user_id, credit_card_type, merchant_name, amount, category)
        rates = CARD_REWARDS[credit_card_type]
        rate = rates.get(category, rates["default"])
        points = int(amount * rate)
        record = {"transaction_id": txn, "user_id": user_id, "credit_card_type": credit_card_type,
                  "merchant_name": merchant_name, "transaction_amount": f"${amount:.2f}", "transaction_date": r.TODAY,
                  "category": category, "status": "COMPLETED", "rewards_earned": f"{points} points"}
        if not r.add(self.db, "credit_card_transaction_history", txn, record):
            return f"Failed to submit transaction: Record ID '{txn}' may already exist."
        return (f"Transaction submitted successfully!\n  - Transaction ID: {txn}\n  - User ID: {user_id}\n"
                f"  - Card Type: {credit_card_type}\n  - Merchant: {merchant_name}\n  - Amount: ${amount:.2f}\n"
                f"  - Category: {category}\n  - Date: {r.TODAY}\n"
                f"  - Rewards Earned: {points} points ({rate}% cashback rate)\n")
