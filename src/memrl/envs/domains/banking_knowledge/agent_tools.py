"""The agent's always-visible banking tools, and the machinery of discoverable tools.

Behaviour follows τ³'s ``KnowledgeTools``: arguments reach the methods unchecked (a bad value fails
as the Python code fails there), refusals are returned as ``Error: ...`` text rather than raised,
and lookups answer in τ³'s record listing. Two points carry τ³'s grading rules:

* calls through ``call_discoverable_agent_tool`` are logged in the ``agent_discoverable_tools``
  table (and so in the database hash) when the tool writes, or when its name is in the task's
  *read-log allowlist*: the read tools its gold actions call (``read_log_allowlist``);
* ``give_discoverable_user_tool`` and ``unlock_discoverable_agent_tool`` change state (a record,
  the unlocked set), so they are memrl ``write`` tools: replayed when an episode is graded.

The discoverable tools themselves live in the mixins this class is built from (see
:mod:`memrl.envs.domains.banking_knowledge.toolkits`).
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Literal, get_args

from memrl.envs.domains.banking_knowledge import records as r
from memrl.envs.domains.banking_knowledge.bank_tools import BankAccountTools
from memrl.envs.domains.banking_knowledge.credit_limits import CreditLimitTools
from memrl.envs.domains.banking_knowledge.credit_tools import CreditCardTools
from memrl.envs.domains.banking_knowledge.debit_cards import DebitCardTools
from memrl.envs.domains.banking_knowledge.debit_disputes import DebitDisputeTools
from memrl.envs.domains.banking_knowledge.discover import BankingToolkit, card, describe, is_discoverable
from memrl.envs.domains.banking_knowledge.user_tools import KnowledgeUserTools
from memrl.envs.toolkit import tool

# where τ³ defines these tools: Python's TypeError for ``**`` of a list names the function with its module
TAU2_TOOLS_MODULE = "tau2.domains.banking_knowledge.tools"

TransferReason = Literal[
    "fraud_or_security_concern", "account_closure_request", "deceased_account_holder",
    "legal_or_regulatory_matter", "account_ownership_dispute", "complex_billing_dispute",
    "abusive_customer_behavior", "third_party_inquiry", "technical_system_error",
    "unconfirmed_external_communication", "customer_demands_after_unavailable_offer_refusal",
    "kb_search_unsuccessful_customer_requests_transfer", "specialized_department_required",
    "accessibility_or_special_needs", "customer_frustrated_demands_human", "supervisor_request_service_complaint",
    "customer_requests_human_no_specific_reason", "request_completed_customer_wants_human_followup", "other"]


class KnowledgeTools(CreditCardTools, CreditLimitTools, BankAccountTools, DebitCardTools, DebitDisputeTools,
                     BankingToolkit):
    """The agent's banking tools (τ³'s ``KnowledgeTools``): the visible ones below, the discoverable ones
    from the mixins; retrieval tools are mixed in per variant (:mod:`~memrl.envs.domains.banking_knowledge.toolkits`)."""

    tau2_class = "tau2.domains.banking_knowledge.retrieval_toolkits:KnowledgeToolsPlain"

    def __init__(self, db: dict[str, Any]) -> None:
        super().__init__(db)
        self.given_user_tools: dict[str, dict[str, Any]] = {}
        self.unlocked_tools: dict[str, dict[str, Any]] = {}
        self.read_log_allowlist: set[str] = set()

    @tool("generic")
    def transfer_to_human_agents(self, summary: str, reason: TransferReason = "other") -> str:
        """Transfer the user to a human agent.

        The proper transfer reason enum can be found in the knowledge base: search it before calling this tool to select the proper applicable reason.

        Args:
            summary: A summary of the user's issue and what was attempted before transfer.
            reason: The specific reason code for the transfer.
        """
        valid = list(get_args(TransferReason))
        if reason not in valid:
            return f"Error: Invalid transfer reason '{reason}'. Must be one of: {', '.join(valid)}"
        return f"Transfer successful (reason: {reason}). A human agent will assist you shortly."

    @tool("read")
    def get_current_time(self) -> str:
        """Get the current time. Use this to get the current timestamp for logging verification records.

        Returns:
            The current time in the format "YYYY-MM-DD HH:MM:SS TZ"
        """
        return "The current time is 2025-11-14 03:40:00 EST."

    @tool("read")
    def get_user_information_by_id(self, user_id: str) -> str:
        """Get the information (date of birth, email, phone number, address) for a user by their user id.

        Args:
            user_id: The ID of the user
        """
        return r.lookup(self.db, "users", "user_id", user_id)

    @tool("read")
    def get_user_information_by_name(self, customer_name: str) -> str:
        """Get the information (date of birth, email, phone number, address) for a user by their name. Case Sensitive.

        Args:
            customer_name: The name of the user
        """
        return r.lookup(self.db, "users", "name", customer_name)

    @tool("read")
    def get_user_information_by_email(self, email: str) -> str:
        """Get the information (date of birth, email, phone number, address) for a user by their email.

        Args:
            email: The email of the user
        """
        return r.lookup(self.db, "users", "email", email)

    @tool("write")
    def change_user_email(self, user_id: str, new_email: str) -> str:
        """Change the email address for a user.

        Args:
            user_id: The ID of the user whose email should be changed
            new_email: The new email address to set for the user
        """
        users = self.db["users"]["data"]
        if user_id not in users:
            return f"Error: User with ID '{user_id}' not found."
        users[user_id]["email"] = new_email
        return f"Email updated successfully.\n  - User ID: {user_id}\n  - New Email: {new_email}"

    @tool("read")
    def get_referrals_by_user(self, user_id: str) -> str:
        """Get all referrals made by a user.

        Args:
            user_id: The ID of the user (referrer) to look up referrals for
        """
        return r.lookup(self.db, "referrals", "referrer_id", user_id)

    @tool("read")
    def get_credit_card_transactions_by_user(self, user_id: str) -> str:
        """Get all credit card transactions for a user.

        Args:
            user_id: The ID of the user to look up transactions for
        """
        return r.lookup(self.db, "credit_card_transaction_history", "user_id", user_id)

    @tool("read")
    def get_credit_card_accounts_by_user(self, user_id: str) -> str:
        """Get all credit card accounts for a user.

        Returns information about each credit card account including card type,
        date opened, current balance, and reward points.

        Args:
            user_id: The ID of the user to look up credit card accounts for
        """
        return r.lookup(self.db, "credit_card_accounts", "user_id", user_id)

    @tool("write")
    def log_verification(self, name: str, user_id: str, address: str, email: str, phone_number: str,
                         date_of_birth: str, time_verified: str) -> str:
        """Log a verification record after successfully verifying a user's identity.

        Call this tool after you have verified a user by confirming 2 out of 4 identity fields
        (date of birth, email, phone number, address). This creates an audit record of the verification.

        Args:
            name: The verified user's full name
            user_id: The verified user's ID
            address: The verified user's address
            email: The verified user's email
            phone_number: The verified user's phone number
            date_of_birth: The verified user's date of birth (MM/DD/YYYY format)
            time_verified: The timestamp of the verification (e.g., "2025-11-14 03:40:00 EST")
        """
        record = {"name": name, "user_id": user_id, "address": address, "email": email,
                  "phone_number": phone_number, "date_of_birth": date_of_birth, "time_verified": time_verified}
        if not r.add(self.db, "verification_history", r.verification_id(user_id, time_verified), record):
            return "Failed to log verification: Record may already exist."
        return f"Verification logged successfully.\n  - User: {name} (ID: {user_id})\n  - Verified at: {time_verified}"

    @tool("write")
    def give_discoverable_user_tool(self, discoverable_tool_name: str, arguments: str = "{}") -> str:
        """Pass a tool to the user so they can execute it themselves.

        Use this when the knowledge base indicates that the user should perform
        an action themselves (e.g., "to do X, have the user call tool_name(args)").

        The user will then be able to call `call_discoverable_tool` with the same
        tool name and arguments to simulate executing the action.

        Args:
            discoverable_tool_name: The name of the discoverable tool (e.g., "open_webpage", "navigate_to_section")
            arguments: JSON string of arguments for the tool (e.g., '{"url": "https://example.com"}')

        Returns:
            A confirmation message with instructions for the user
        """
        method = getattr(KnowledgeUserTools, discoverable_tool_name, None)
        if method is None or not is_discoverable(method):
            return f"Error: Unknown discoverable tool '{discoverable_tool_name}'."
        try:
            args = json.loads(arguments)
        except json.JSONDecodeError as err:
            return f"Error: Invalid JSON in arguments: {err}"
        params = inspect.signature(method).parameters
        for name in args:
            if name not in params and name != "self":
                return f"Error: Unexpected parameter: {name}"
        info = describe(method)
        self.given_user_tools[discoverable_tool_name] = {"arguments": args, "given_at": r.NOW_ISO, "tool_info": info}
        r.add(self.db, "user_discoverable_tools", r.short_hash(f"user_discoverable_tool:{discoverable_tool_name}"),
              {"tool_name": discoverable_tool_name, "status": "GIVEN"})
        shown = json.dumps(args, indent=2) if args else "(no arguments)"
        return (f"Tool given to user: {discoverable_tool_name}\nDescription: {info['description']}\n"
                f"Arguments: {shown}\n\nThe user can now execute this action by calling `call_discoverable_user_tool` "
                f"with discoverable_tool_name='{discoverable_tool_name}' and the same arguments.")

    @tool("write")
    def unlock_discoverable_agent_tool(self, agent_tool_name: str) -> str:
        """Unlock an agent discoverable tool that was found in the knowledge base.

        Use this when the knowledge base indicates that you have access to a specialized
        internal tool. The knowledge base will tell you the tool name to unlock.

        After unlocking, you can use the tool by calling `call_discoverable_agent_tool` with
        the tool name and required arguments.

        Args:
            agent_tool_name: The name of the agent discoverable tool to unlock
                            (e.g., "calculate_apr_adjustment_7842")

        Returns:
            A confirmation message with the tool's description and parameters
        """
        found = self.discoverable_tools()
        if agent_tool_name not in found:
            return f"Error: Unknown agent tool '{agent_tool_name}'. This tool is not available."
        info = describe(found[agent_tool_name])
        self.unlocked_tools[agent_tool_name] = {"unlocked_at": r.NOW_ISO, "tool_info": info}
        return (f"Tool unlocked: {agent_tool_name}\nDescription: {info['description']}\n\n{card(info)}\n\n"
                f"You can now use this tool by calling `call_discoverable_agent_tool` with "
                f"agent_tool_name='{agent_tool_name}' and the required arguments.")

    @tool("write")
    def call_discoverable_agent_tool(self, agent_tool_name: str, arguments: str = "{}") -> str:
        """Call an agent discoverable tool that you have previously unlocked.

        Use this after unlocking a tool with `unlock_discoverable_agent_tool`. The knowledge base
        will tell you which tool to use and what arguments to provide.

        Args:
            agent_tool_name: The name of the agent discoverable tool to call
            arguments: JSON string of arguments for the tool (e.g., '{"user_id": "abc123"}')

        Returns:
            The result of executing the agent tool
        """
        found = self.discoverable_tools()
        if agent_tool_name not in found:
            return f"Error: Unknown agent tool '{agent_tool_name}'. This tool is not available."
        if agent_tool_name not in self.unlocked_tools:
            return (f"Error: Tool '{agent_tool_name}' has not been unlocked. You must first use "
                    f"`unlock_discoverable_agent_tool` to unlock this tool before calling it.")
        try:  # numbers as floats, as τ³ reads them: 33 and 33.0 must give the same ids and hashes
            args = json.loads(arguments, parse_int=float)
        except json.JSONDecodeError as err:
            return f"Error: Invalid JSON in arguments: {err}"
        tool = found[agent_tool_name]
        try:
            result = tool(**args)
        except TypeError as err:  # Python names the function with its module (args a list): τ³'s, in its words
            module = getattr(getattr(tool, "__func__", tool), "__module__", "")
            return f"Error: Invalid arguments: {str(err).replace(module + '.', TAU2_TOOLS_MODULE + '.')}"
        if self.tools[agent_tool_name].kind == "write" or agent_tool_name in self.read_log_allowlist:
            r.add(self.db, "agent_discoverable_tools", r.short_hash(f"agent_discoverable_tool:{agent_tool_name}"),
                  {"tool_name": agent_tool_name, "status": "CALLED"})
        return result

    @tool("read")
    def list_discoverable_agent_tools(self) -> str:
        """List all agent discoverable tools that you have called.

        Use this to see what specialized tools you have used.

        Returns:
            A list of tools that you have called
        """
        listing = r.query_text(self.db, "agent_discoverable_tools")
        if "No results found" in listing:  # τ³ tests for a wording its lookup never uses: never taken
            return "No agent tools have been called yet. Search the knowledge base to discover available tools."
        return f"Your called agent tools:\n{listing}"
