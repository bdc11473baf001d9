"""τ²-bench's telecom domain: tool outputs and rules (from τ²-bench's telecom source), sync, setup, assertions.

Expected strings are written from reading τ²-bench's telecom toolkit: its JSON
rendering (records whole, the numbers of a plain result dict as strings, datetimes
with a space), its status bar, speed model and payment flow.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from memrl.envs.domains.telecom import TelecomTools, TelecomUserTools, compose_policy
from memrl.envs.environment import Environment
from memrl.envs.messages import ToolCall
from memrl.envs.toolkit import ToolError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - as memrl.envs.domain reads TOML on 3.10
    import tomli as tomllib


@pytest.fixture
def kits(tau2_dir) -> tuple[TelecomTools, TelecomUserTools]:
    folder = tau2_dir / "telecom"
    if not (folder / "db.toml").is_file():
        pytest.skip(f"no telecom data in {tau2_dir}")
    agent = TelecomTools(tomllib.loads((folder / "db.toml").read_text()))
    user = TelecomUserTools(tomllib.loads((folder / "user_db.toml").read_text()))
    return agent, user


def _as_john(agent: TelecomTools, user: TelecomUserTools) -> None:
    """The setup every telecom task starts with: the user is John Smith on line L1002 (555-123-2002)."""
    user.set_user_info(name="John Smith", phone_number="555-123-2002")
    agent.sync_user_state(user)


def test_lookups_render_records_as_tau2(kits):
    agent, _ = kits
    with pytest.raises(ToolError, match=r"Customer with phone number \(555\) 123 2002 not found"):
        agent.get_customer_by_phone("(555) 123 2002")  # τ² compares the numbers as written
    text = agent.get_customer_by_phone("555-123-2002")
    rec = json.loads(text)
    assert rec["customer_id"] == "C1001" and list(rec)[:3] == ["customer_id", "full_name", "date_of_birth"]
    assert text.startswith('{"customer_id": "C1001", "full_name": "John Smith", "date_of_birth": "1985-06-15", '
                           '"email": "john.smith@example.com", "phone_number": "555-123-2002", "address": '
                           '{"street": "123 Main St", "city": "Anytown", "state": "CA", "zip_code": "90210"}, '
                           '"account_status": "Active", "payment_methods": [{"method_type": "Credit Card", ')
    assert text.endswith('"line_ids": ["L1001", "L1002", "L1003"], "bill_ids": ["B1001", "B1002", "B1003"], '
                         '"created_at": "2025-01-15 10:30:00", "last_extension_date": null, '
                         '"goodwill_credit_used_this_year": 25.0}')
    assert json.loads(agent.get_customer_by_name("JOHN smith", "1985-06-15"))[0]["customer_id"] == "C1001"
    assert agent.get_customer_by_name("John  Smith", "1985-06-15") == "[]"  # case only, as τ²
    assert agent.get_customer_by_name("John Smith", "1985-06-16") == "[]"
    line = json.loads(agent.get_details_by_id("L1003"))
    assert line["status"] == "Suspended" and line["suspension_start_date"] == "2025-02-01"
    assert json.loads(agent.get_details_by_id("D1009"))["activation_date"] == "2024-12-10 15:45:00"
    # stored as τ²'s model_dump shows a datetime, so database hashes are computed on the same text
    assert agent.db["customers"][0]["created_at"] == "2025-01-15 10:30:00"
    bills = json.loads(agent.get_bills_for_customer("C1001", limit=2))
    assert [b["bill_id"] for b in bills] == ["B1003", "B1002"]


def test_usage_and_refuel_match_tau2_text(kits):
    agent, _ = kits
    assert agent.get_data_usage("C1001", "L1002") == (
        '{"line_id": "L1002", "data_used_gb": "8.7", "data_limit_gb": "15.0", "data_refueling_gb": "0.0", '
        '"cycle_end_date": "2025-02-28"}')
    assert agent.refuel_data("C1001", "L1002", 2.0) == (
        '{"message": "Successfully added 2.0 GB of data for line L1002 for $4.00", "new_data_refueling_gb": "2.0", '
        '"charge": "4.0"}')
    draft = next(b for b in agent.db["bills"] if b["bill_id"] == "B1003")
    assert draft["line_items"] == [{"description": "Data refueling: 2.0 GB at $2.0/GB", "amount": 4.0,
                                    "date": "2025-02-25", "item_type": "Charge"}]
    assert draft["total_due"] == 4.0
    assert agent.assert_data_refueling_amount("C1001", "L1002", 2.0)


def test_refuel_without_a_draft_bill_opens_next_months(kits):
    agent, _ = kits
    agent.refuel_data("C1002", "L1004", 10.0)  # Unlimited Plus: $0.1/GB; C1002 has no draft bill
    cust = next(c for c in agent.db["customers"] if c["customer_id"] == "C1002")
    bill = next(b for b in agent.db["bills"] if b["bill_id"] == cust["bill_ids"][-1])
    assert bill["bill_id"] not in ("B1004", "B1005") and bill["status"] == "Draft"
    assert (bill["period_start"], bill["period_end"], bill["issue_date"], bill["due_date"]) == (
        "2025-03-01", "2025-03-31", "2025-03-01", "2025-03-15")
    assert bill["total_due"] == pytest.approx(1.0)


def test_refusals_are_error_observations(kits):
    agent, user = kits
    env = Environment("telecom", "", agent, user)

    def obs(name: str, **args: Any) -> str:
        msg = env.step(ToolCall(name, args))
        assert msg.error
        return msg.content

    assert obs("get_details_by_id", id="X1") == "Error: Unknown ID format or type: X1"
    assert obs("get_customer_by_id", customer_id="C9") == "Error: Customer with ID C9 not found"
    assert obs("suspend_line", customer_id="C1001", line_id="L1003", reason="x") == (
        "Error: Line must be active to suspend")
    assert obs("resume_line", customer_id="C1001", line_id="L1001") == "Error: Line must be suspended to resume"
    assert obs("resume_line", customer_id="C1001", line_id="L1004") == "Error: Line L1004 not found for customer C1001"
    assert obs("send_payment_request", customer_id="C1001", bill_id="B1004") == (
        "Error: Bill B1004 not found for customer C1001")
    assert obs("refuel_data", customer_id="C1001", line_id="L1002", gb_amount=0) == (
        "Error: Refuel amount must be positive")
    assert agent.enable_roaming("C1001", "L1002") == "Roaming was already enabled"
    assert agent.disable_roaming("C1001", "L1002") == "Roaming disabled successfully"


def test_suspend_and_resume_results(kits):
    agent, _ = kits
    out = json.loads(agent.suspend_line("C1001", "L1001", "travel"))
    assert out["message"] == "Line suspended successfully. $5/month holding fee will apply."
    assert out["line"]["status"] == "Suspended" and out["line"]["suspension_start_date"] == "2025-02-25"
    out = json.loads(agent.resume_line("C1001", "L1001"))
    assert out == {"message": "Line resumed successfully", "line": {**out["line"], "status": "Active",
                                                                    "suspension_start_date": None}}


def test_status_bar_speed_and_airplane_mode(kits):
    agent, user = kits
    assert user.check_status_bar() == "Status Bar: 📶³ Good | 5G | 📱 Data Enabled | 🔋 80%"
    assert user.run_speed_test() == "Speed Test Result: 220.00 Mbps (Excellent). Connection is very fast."
    _as_john(agent, user)
    assert user.toggle_airplane_mode() == "Airplane Mode is now ON.\nStatus Bar: ✈️ Airplane Mode | 🔋 80%"
    assert user.run_speed_test() == "Speed test failed: No Connection."
    assert user.toggle_airplane_mode() == (
        "Airplane Mode is now OFF.\nStatus Bar: 📶⁴ Excellent | 5G | 📱 Data Enabled | 🔋 80%")
    assert user.run_speed_test() == "Speed Test Result: 275.00 Mbps (Excellent). Connection is very fast."
    assert user.set_network_mode_preference("3g_only").startswith("Preferred Network Mode set to: 3g_only\n"
                                                                  "Status Bar: 📶² Fair | 3G |")
    assert user.run_speed_test() == ("Speed Test Result: 1.50 Mbps (Poor). Connection is slow. Web browsing may be "
                                     "sluggish, streaming difficult.")
    assert user.set_network_mode_preference("6g").startswith(
        "Failed to set network mode: '6g' is not a valid option. Please use one of: 4g_5g_preferred, 4g_only, "
        "3g_only, 2g_only\nStatus Bar:")
    user.toggle_data_saver_mode()
    assert user.check_status_bar() == "Status Bar: 📶² Fair | 3G | 📱 Data Enabled | 🔽 Data Saver | 🔋 80%"


def test_network_status_sim_apn_vpn_and_apps(kits):
    agent, user = kits
    _as_john(agent, user)
    user.unseat_sim_card()
    assert user.check_sim_status() == "No SIM card detected in the phone."
    assert "SIM Card Status: missing\nCellular Connection: no_service" in user.check_network_status()
    assert user.reseat_sim_card().startswith("SIM card re-seated successfully.\nStatus Bar: 📶⁴ Excellent | 5G")
    user.break_apn_settings()
    assert user.check_network_status().startswith("Airplane Mode: OFF\nSIM Card Status: active\n"
                                                  "Cellular Connection: no_service\nCellular Signal: none")
    assert user.reset_apn_settings().startswith("APN settings will reset at reboot.\nStatus Bar: 📵 No Signal")
    assert user.reboot_device().startswith("Resetting APN settings...\nRestarting network services...\n"
                                           "Status Bar: 📶⁴ Excellent")
    user.break_vpn()
    assert user.check_vpn_status() == ("VPN is ON and connected. Details: {'server_address': '192.168.1.1', "
                                       "'protocol': 'OpenVPN', 'server_performance': <PerformanceLevel.POOR: 'poor'>}")
    assert user.run_speed_test().startswith("Speed Test Result: 27.50 Mbps (Good).")
    assert user.disconnect_vpn().startswith("VPN disconnected successfully.\nStatus Bar:")
    assert user.check_vpn_status() == "VPN is turned OFF."
    user.remove_app_permission("messaging", "storage")
    assert user.check_app_permissions("messaging") == "App 'messaging' has permission for: sms, phone."
    assert user.can_send_mms() == "Your messaging app cannot send MMS messages."
    assert user.grant_app_permission("messaging", "camera").startswith(
        "Error. Permission 'camera' not tracked for app 'messaging', available permissions: "
        "['sms', 'storage', 'phone', 'network']\nStatus Bar:")
    assert user.grant_app_permission("messaging", "Storage").startswith(
        "Success. Permission 'storage' granted to app 'messaging'.")
    assert user.can_send_mms() == "Your messaging app can send MMS messages."
    assert user.check_app_status("browser") == (
        "Status for App: browser\n - Permissions Granted:\n   - storage\n   - network")
    assert user.check_installed_apps() == "The following apps are installed on the phone: messaging, browser"


def test_sync_carries_line_state_and_payment(kits):
    """τ²-bench's sync_tools: line status, roaming and data allowance reach the user; a payment settles a bill."""
    agent, user = kits
    _as_john(agent, user)
    world = user.db["surroundings"]
    assert world["line_active"] and world["roaming_allowed"] and not world["mobile_data_usage_exceeded"]
    agent.set_data_usage("C1001", "L1002", 15.1)
    agent.sync_user_state(user)
    assert world["mobile_data_usage_exceeded"] and user.run_speed_test() == "Speed test failed: No Connection."
    agent.refuel_data("C1001", "L1002", 2.0)
    agent.sync_user_state(user)
    assert not world["mobile_data_usage_exceeded"] and user.assert_mobile_data_status(True)

    agent.suspend_line_for_overdue_bill("C1001", "L1002", "B1234321", contract_ended=False)
    agent.sync_user_state(user)
    assert not world["line_active"]
    user.reboot_device()
    assert user.assert_service_status("no_service")
    assert not agent.assert_no_overdue_bill("B1234321")
    assert user.check_payment_request() == "No payment request has been made."
    assert agent.send_payment_request("C1001", "B1234321") == "Payment request sent to the customer for bill B1234321"
    agent.sync_user_state(user)
    assert user.check_payment_request() == "You have a payment request for bill B1234321 of 65.0 USD."
    assert user.make_payment() == "Payment of 65.0 USD has been made for bill B1234321."
    agent.sync_user_state(user)
    assert agent.assert_no_overdue_bill("B1234321") and world["payment_request"] is None
    assert user.make_payment() == "You do not have a payment request."
    agent.resume_line("C1001", "L1002")
    agent.sync_user_state(user)
    user.reboot_device()
    assert user.assert_service_status("connected") and user.assert_internet_speed(200, "excellent")


def test_tool_sets_and_policies(kits, tau2_dir):
    agent, user = kits
    assert sorted(agent.tools) == sorted([
        "get_customer_by_phone", "get_customer_by_id", "get_customer_by_name", "get_details_by_id", "suspend_line",
        "resume_line", "get_bills_for_customer", "send_payment_request", "get_data_usage", "enable_roaming",
        "disable_roaming", "transfer_to_human_agents", "refuel_data"])
    assert len(user.tools) == 30 and not set(agent.tools) & set(user.tools)
    assert {t.kind for n, t in user.tools.items() if n.startswith("check_")} == {"read"}
    assert user.tools["toggle_data"].kind == "write" and agent.tools["refuel_data"].kind == "write"
    for kit in (agent, user):
        for schema in kit.schemas():
            assert schema["function"]["description"], schema
    policy = compose_policy(tau2_dir / "telecom")
    assert policy.startswith("<main_policy>\n") and policy.endswith("\n</tech_support_policy>")
    solo = compose_policy(tau2_dir / "telecom", solo=True)
    assert solo != policy and (tau2_dir / "telecom" / "main_policy_solo.md").read_text() in solo
