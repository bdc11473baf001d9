"""Agent side of τ²-bench's ``telecom`` domain: customers, lines, plans, bills and devices.

Behaviour (checks, error texts, database changes, result layout) follows
τ²-bench's telecom toolkit; results are rendered to the same JSON text the
benchmark shows its agent. Besides the 13 tools, the class holds the setup
functions tasks run before the conversation (``set_data_usage``,
``suspend_line_for_overdue_bill``), the assertions tasks check afterwards, and
``sync_user_state``: τ²-bench's post-call synchronisation of the line's state
into the user's phone and surroundings.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from memrl.envs.domains.telecom import model as m
from memrl.envs.domains.telecom.policy import compose_policy
from memrl.envs.toolkit import ToolError, Toolkit, tool

if TYPE_CHECKING:
    from memrl.envs.domains.telecom.device import TelecomUserTools


# id prefix -> (table, key field, label in "not found" errors), as get_details_by_id dispatches
_TABLES_BY_PREFIX = {"L": ("lines", "line_id", "Line"), "D": ("devices", "device_id", "Device"),
                     "B": ("bills", "bill_id", "Bill"), "P": ("plans", "plan_id", "Plan")}


class TelecomTools(Toolkit):
    """The carrier's back office, over ``db.toml`` (plans, customers, lines, bills, devices)."""

    tau2_class = "tau2.domains.telecom.tools:TelecomTools"

    strict_args = False  # τ²-bench hands the agent's arguments to the method unchecked
    compose_policy = staticmethod(compose_policy)

    def __init__(self, db: dict[str, Any]) -> None:
        super().__init__(self.normalize_db(db))

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        """Every record in τ²-bench's field order with its defaults (idempotent)."""
        m.normalize_db(db)
        return db

    # -- lookups (not tools) ------------------------------------------------------------------------
    def _find(self, table: str, key: str, value: str, label: str) -> dict[str, Any]:
        for rec in self.db[table]:
            if rec[key] == value:
                return rec
        raise ToolError(f"{label} with ID {value} not found")

    def _customer(self, customer_id: str) -> dict[str, Any]:
        return self._find("customers", "customer_id", customer_id, "Customer")

    def _line(self, line_id: str) -> dict[str, Any]:
        return self._find("lines", "line_id", line_id, "Line")

    def _plan(self, plan_id: str) -> dict[str, Any]:
        return self._find("plans", "plan_id", plan_id, "Plan")

    def _bill(self, bill_id: str) -> dict[str, Any]:
        return self._find("bills", "bill_id", bill_id, "Bill")

    def _line_by_phone(self, phone_number: str) -> dict[str, Any]:
        """The line with exactly this number (τ²-bench compares the strings as given)."""
        for line in self.db["lines"]:
            if line["phone_number"] == phone_number:
                return line
        raise ToolError(f"Line with phone number {phone_number} not found")

    def _target_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """The line, checked to belong to the customer."""
        if line_id not in self._customer(customer_id)["line_ids"]:
            raise ToolError(f"Line {line_id} not found for customer {customer_id}")
        return self._line(line_id)

    def _customer_by_phone(self, phone_number: str) -> dict[str, Any]:
        """The customer whose contact number, or one of whose lines' numbers, is exactly this one."""
        for c in self.db["customers"]:
            if c["phone_number"] == phone_number:
                return c
            for line_id in c["line_ids"]:
                if self._line(line_id)["phone_number"] == phone_number:
                    return c
        raise ToolError(f"Customer with phone number {phone_number} not found")

    def _awaiting_payment(self, customer: dict[str, Any]) -> list[dict[str, Any]]:
        return [b for b in (self._bill(i) for i in customer["bill_ids"]) if b["status"] == m.BILL_AWAITING]

    def _new_bill_id(self) -> str:
        """A fresh bill id. τ²-bench draws a random one; a counter keeps replays reproducible."""
        taken = {b["bill_id"] for b in self.db["bills"]}
        n = len(self.db["bills"]) + 1001
        while f"B{n}" in taken:
            n += 1
        return f"B{n}"

    def _charge(self, customer_id: str, amount: float, description: str) -> None:
        """Add a charge (or, negative, a credit) to the customer's draft bill, opening one for next month."""
        customer = self._customer(customer_id)
        draft = next((b for b in (self._bill(i) for i in customer["bill_ids"]) if b["status"] == m.BILL_DRAFT), None)
        if draft is None:
            start = (m.TODAY.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
            after = (start + dt.timedelta(days=32)).replace(day=1)
            draft = {"bill_id": self._new_bill_id(), "customer_id": customer_id, "period_start": start.isoformat(),
                     "period_end": (after - dt.timedelta(days=1)).isoformat(), "issue_date": start.isoformat(),
                     "total_due": 0.0, "due_date": (start + dt.timedelta(days=14)).isoformat(), "line_items": [],
                     "status": m.BILL_DRAFT}
            self.db["bills"].append(draft)
            customer["bill_ids"].append(draft["bill_id"])
        draft["line_items"].append({"description": description, "amount": amount, "date": m.TODAY.isoformat(),
                                    "item_type": "Credit" if amount < 0 else "Charge"})
        draft["total_due"] += amount

    # -- customer lookup ----------------------------------------------------------------------------
    @tool("read")
    def get_customer_by_phone(self, phone_number: str) -> str:
        """Find a customer by their primary contact number or the number of one of their lines.

        Args:
            phone_number: The phone number to search for, such as '555-123-2002'.
        """
        return m.render(m.Record(self._customer_by_phone(phone_number)))

    @tool("read")
    def get_customer_by_id(self, customer_id: str) -> str:
        """Get a customer by their unique id.

        Args:
            customer_id: The customer id, such as 'C1001'.
        """
        return m.render(m.Record(self._customer(customer_id)))

    @tool("read")
    def get_customer_by_name(self, full_name: str, dob: str) -> str:
        """Find customers by full name and date of birth (the date of birth tells apart customers with
        similar names). Returns a list, possibly empty.

        Args:
            full_name: The customer's full name.
            dob: The date of birth, as YYYY-MM-DD.
        """
        return m.render([m.Record(c) for c in self.db["customers"]  # τ²: case-insensitive, nothing else
                         if c["full_name"].lower() == full_name.lower() and c["date_of_birth"] == dob])

    @tool("read")
    def get_details_by_id(self, id: str) -> str:
        """Get the record of any id: a customer (C...), line (L...), device (D...), bill (B...) or plan (P...).

        Args:
            id: The id to look up, such as 'L1002'.
        """
        if id.startswith("C"):
            return m.render(m.Record(self._customer(id)))
        table = _TABLES_BY_PREFIX.get(id[:1])
        if table is None:
            raise ToolError(f"Unknown ID format or type: {id}")
        name, key, label = table
        return m.render(m.Record(self._find(name, key, id, label)))

    # -- lines ------------------------------------------------------------------------------------------
    @tool("write")
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> str:
        """Suspend an active line (for at most 6 months); a $5/month holding fee applies.

        Args:
            customer_id: The id of the customer who owns the line.
            line_id: The id of the line to suspend.
            reason: Why the line is suspended.
        """
        line = self._target_line(customer_id, line_id)
        if line["status"] != m.LINE_ACTIVE:
            raise ToolError("Line must be active to suspend")
        line["status"] = m.LINE_SUSPENDED
        line["suspension_start_date"] = m.TODAY.isoformat()
        return m.render({"message": "Line suspended successfully. $5/month holding fee will apply.",
                         "line": m.Record(line)})

    @tool("write")
    def resume_line(self, customer_id: str, line_id: str) -> str:
        """Resume a suspended (or pending-activation) line: it becomes active again.

        Args:
            customer_id: The id of the customer who owns the line.
            line_id: The id of the line to resume.
        """
        line = self._target_line(customer_id, line_id)
        if line["status"] not in (m.LINE_SUSPENDED, m.LINE_PENDING):
            raise ToolError("Line must be suspended to resume")
        line["status"] = m.LINE_ACTIVE
        line["suspension_start_date"] = None
        return m.render({"message": "Line resumed successfully", "line": m.Record(line)})

    @tool("read")
    def get_data_usage(self, customer_id: str, line_id: str) -> str:
        """Data used by a line in the current billing cycle, with the plan's limit, the data refuelled
        this cycle and the cycle's end date.

        Args:
            customer_id: The id of the customer who owns the line.
            line_id: The id of the line.
        """
        line = self._target_line(customer_id, line_id)
        plan = self._plan(line["plan_id"])
        nxt = (m.TODAY.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
        return m.render({"line_id": line_id, "data_used_gb": line["data_used_gb"],
                         "data_limit_gb": plan["data_limit_gb"], "data_refueling_gb": line["data_refueling_gb"],
                         "cycle_end_date": (nxt - dt.timedelta(days=1)).isoformat()})

    @tool("write")
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Enable international roaming on a line.

        Args:
            customer_id: The id of the customer who owns the line.
            line_id: The id of the line.
        """
        line = self._target_line(customer_id, line_id)
        if line["roaming_enabled"]:
            return "Roaming was already enabled"
        line["roaming_enabled"] = True
        return "Roaming enabled successfully"

    @tool("write")
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Disable international roaming on a line.

        Args:
            customer_id: The id of the customer who owns the line.
            line_id: The id of the line.
        """
        line = self._target_line(customer_id, line_id)
        if not line["roaming_enabled"]:
            return "Roaming was already disabled"
        line["roaming_enabled"] = False
        return "Roaming disabled successfully"

    @tool("write")
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> str:
        """Add data to a line for the current cycle; the plan's per-GB refuelling price is charged to the
        customer's next bill.

        Args:
            customer_id: The id of the customer who owns the line.
            line_id: The id of the line.
            gb_amount: Gigabytes to add (positive).
        """
        line = self._target_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ToolError("Refuel amount must be positive")
        plan = self._plan(line["plan_id"])
        price = plan["data_refueling_price_per_gb"]
        charge = gb_amount * price
        line["data_refueling_gb"] += gb_amount
        self._charge(customer_id, charge, f"Data refueling: {gb_amount} GB at ${price}/GB")
        return m.render({"message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
                         "new_data_refueling_gb": line["data_refueling_gb"], "charge": charge})

    # -- billing --------------------------------------------------------------------------------------
    @tool("read")
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> str:
        """A customer's bills, newest first.

        Args:
            customer_id: The customer id.
            limit: The most bills to return.
        """
        customer = self._customer(customer_id)
        bills = sorted((self._bill(i) for i in customer["bill_ids"]), key=lambda b: b["issue_date"], reverse=True)
        return m.render([m.Record(b) for b in bills[:limit]])

    @tool("write")
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Ask the customer to pay one of their bills (the bill becomes 'Awaiting Payment'). Refused while
        another bill awaits payment. It does not check whether the bill is already paid: check first.

        Args:
            customer_id: The id of the customer who owns the bill.
            bill_id: The id of the bill.
        """
        customer = self._customer(customer_id)
        if self._awaiting_payment(customer):
            raise ToolError("A bill is already awaiting payment for this customer")
        if bill_id not in customer["bill_ids"]:
            raise ToolError(f"Bill {bill_id} not found for customer {customer_id}")
        bill = self._bill(bill_id)
        bill["status"] = m.BILL_AWAITING
        return f"Payment request sent to the customer for bill {bill['bill_id']}"

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the issue. Transfer only when the user
        explicitly asks for a human, or when the policy and the tools cannot solve the issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    # -- task setup (not tools) -------------------------------------------------------------------------
    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        """Setup: the data a line has used this cycle."""
        self._target_line(customer_id, line_id)["data_used_gb"] = data_used_gb
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    def suspend_line_for_overdue_bill(self, customer_id: str, line_id: str, new_bill_id: str,
                                      contract_ended: bool) -> str:
        """Setup: last month's plan charge becomes an overdue bill and the line is suspended for it."""
        line = self._line(line_id)
        if line["status"] != m.LINE_ACTIVE:
            raise ToolError("Line must be active to suspend for unpaid bill")
        amount = self._plan(line["plan_id"])["price_per_month"]
        if amount <= 0:
            raise ToolError("Amount must be positive for overdue bill")
        customer = self._customer(customer_id)
        if any(self._bill(i)["status"] == m.BILL_OVERDUE for i in customer["bill_ids"]):
            raise ToolError("Customer already has an overdue bill")
        last_day = m.TODAY.replace(day=1) - dt.timedelta(days=1)
        first_day = last_day.replace(day=1)
        self.db["bills"].append({
            "bill_id": new_bill_id, "customer_id": customer_id, "period_start": first_day.isoformat(),
            "period_end": last_day.isoformat(), "issue_date": first_day.isoformat(), "total_due": 0 + amount,
            "due_date": (first_day + dt.timedelta(days=14)).isoformat(),
            "line_items": [{"description": f"Charge for line {line_id}", "amount": amount,
                            "date": m.TODAY.isoformat(), "item_type": "Charge"}],
            "status": m.BILL_OVERDUE})
        customer["bill_ids"].append(new_bill_id)
        line["status"] = m.LINE_SUSPENDED
        line["suspension_start_date"] = m.TODAY.isoformat()
        if contract_ended:
            line["contract_end_date"] = last_day.isoformat()
        return f"Line {line_id} suspended for unpaid bill {new_bill_id}. Contract ended: {contract_ended}"

    # -- assertions (not tools) -------------------------------------------------------------------------
    def assert_data_refueling_amount(self, customer_id: str, line_id: str, expected_amount: float) -> bool:
        return abs(self._target_line(customer_id, line_id)["data_refueling_gb"] - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._target_line(customer_id, line_id)["status"] == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        if overdue_bill_id not in self._customer(customer_id)["bill_ids"]:
            raise ToolError(f"Overdue bill {overdue_bill_id} not found")
        if self._bill(overdue_bill_id)["status"] != m.BILL_OVERDUE:
            raise ToolError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        """The bill is gone or paid."""
        try:
            return self._bill(overdue_bill_id)["status"] == m.BILL_PAID
        except ToolError:
            return True

    # -- synchronisation with the user's side -------------------------------------------------------
    def sync_user_state(self, user: TelecomUserTools) -> None:
        """Carry the back office's view of the user's line into their world, after every call.

        The line's status, roaming permission and data allowance decide what the
        phone can do; a payment the user made settles the bill; a bill awaiting
        payment shows up on the phone as a payment request.
        """
        world = user.db["surroundings"]
        phone = world.get("phone_number")
        if phone is None:
            return
        line = self._line_by_phone(phone)
        world["line_active"] = line["status"] == m.LINE_ACTIVE
        world["roaming_allowed"] = bool(line["roaming_enabled"])
        plan = self._plan(line["plan_id"])
        world["mobile_data_usage_exceeded"] = line["data_used_gb"] >= plan["data_limit_gb"] + line["data_refueling_gb"]
        request = world.get("payment_request")
        if request is not None and request.get("paid"):
            self._bill(request["bill_id"])["status"] = m.BILL_PAID
            world["payment_request"] = None
        if world.get("payment_request") is None:
            waiting = self._awaiting_payment(self._customer_by_phone(phone))
            if waiting:
                world["payment_request"] = {"bill_id": waiting[0]["bill_id"], "amount_due": waiting[0]["total_due"],
                                            "paid": False}
