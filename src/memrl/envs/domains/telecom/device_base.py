"""The mock phone's state machine (τ²-bench's telecom user device), without the user-facing tools.

``PhoneState`` holds what the tools in ``device.py`` build on: the network
search that decides signal and technology from the SIM, airplane mode, the APN
and the line's state; when mobile data works; the speed model; when MMS works.
It also holds the setup functions tasks use to break the phone and the
assertions they check at the end, so task files can name them by their
τ²-bench names.
"""

from __future__ import annotations

import copy
from typing import Any

from memrl.envs.domains.telecom import model as m
from memrl.envs.toolkit import ToolError, Toolkit

_SPEED_RANGE = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0), "none": (0.0, 0.0)}
_SIGNAL_FACTOR = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0, "none": 0.0}
_PREFERRED_TECH = {"4g_only": "4G", "3g_only": "3G", "2g_only": "2G"}
_NETWORK_STATUSES = ("connected", "searching", "no_service", "emergency_only")


class PhoneState(Toolkit):
    """The user database (``device`` and ``surroundings``) and the rules that tie its fields together."""

    strict_args = False  # τ²-bench hands the caller's arguments to the method unchecked

    def __init__(self, db: dict[str, Any]) -> None:
        super().__init__(self.normalize_db(db))

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        """The phone and surroundings with τ²-bench's defaults filled in (idempotent)."""
        m.normalize_user_db(db)
        return db

    @property
    def device(self) -> dict[str, Any]:
        return self.db["device"]

    @property
    def surroundings(self) -> dict[str, Any]:
        return self.db["surroundings"]

    # -- derived state --------------------------------------------------------------------------------
    def sim_status(self) -> str:
        return "missing" if self.device["sim_card_missing"] else self.device["sim_card_status"]

    def simulate_network_search(self) -> None:
        """Re-evaluate the cellular connection: the SIM, the preferred mode and the local signal decide the
        technology and strength; airplane mode, a broken APN or an inactive line mean no service."""
        d, signals = self.device, self.surroundings["signal_strength"]
        if self.sim_status() == "active":
            d["network_connection_status"] = "connected"
            pref = d["network_mode_preference"]
            if pref == "4g_5g_preferred" and signals.get("5G", "none") != "none":
                tech = "5G"
            else:
                tech = next((t for p, t in _PREFERRED_TECH.items() if p == pref), "4G")  # any value: 4G
            d["network_technology_connected"] = tech
            d["network_signal_strength"] = signals.get(tech, "none")
        else:
            self._no_service()
        if (d["airplane_mode"] or d["active_apn_settings"]["apn_name"] == "broken"
                or not self.surroundings["line_active"]):
            self._no_service()

    def _no_service(self) -> None:
        self.device.update(network_connection_status="no_service", network_technology_connected="none",
                           network_signal_strength="none")

    def mobile_data_works(self) -> bool:
        d, world = self.device, self.surroundings
        if d["airplane_mode"] or d["network_signal_strength"] == "none":
            return False
        if d["network_connection_status"] == "no_service":
            return False
        if world["is_abroad"] and not (d["roaming_enabled"] and world["roaming_allowed"]):
            return False
        return bool(d["data_enabled"]) and not world["mobile_data_usage_exceeded"]

    def speed_test(self) -> tuple[float | None, str | None]:
        """(Mbps, label): the middle of the technology's range, scaled by signal, a poor VPN and Data Saver."""
        if not self.mobile_data_works():
            return None, "No Connection"
        d = self.device
        factor = 1.0
        if d["vpn_connected"] and d["vpn_details"] and d["vpn_details"].get("server_performance") == "poor":
            factor = 0.1
        if d["data_saver_mode"]:
            factor *= 0.2
        low, high = _SPEED_RANGE.get(d["network_technology_connected"], (0.0, 0.0))
        speed = round((low + high) / 2.0 * _SIGNAL_FACTOR.get(d["network_signal_strength"], 0.0) * factor, 2)
        for limit, label in ((1, "Very Poor"), (5, "Poor"), (25, "Fair"), (100, "Good")):
            if speed < limit:
                return speed, label
        return speed, "Excellent"

    def mms_works(self) -> bool:
        """MMS needs working mobile data on 3G or better, no MMS-over-Wi-Fi (the carrier lacks it), an MMSC
        URL, and a messaging app allowed to use SMS and storage."""
        d = self.device
        if not self.mobile_data_works() or d["network_technology_connected"] == "2G":
            return False
        if d["wifi_calling_enabled"] and d["wifi_calling_mms_over_wifi"]:
            return False
        if d["active_apn_settings"]["mmsc_url"] is None:
            return False
        app = d["app_statuses"].get("messaging")
        return app is not None and bool(app["permissions"].get("storage") and app["permissions"].get("sms"))

    @staticmethod
    def granted(app: dict[str, Any]) -> list[str]:
        return [name.replace("_", " ").lower() for name, ok in app["permissions"].items() if ok]

    def vpn_details_text(self) -> str:
        """The VPN details as τ²-bench prints them (a Python dict holding an enum member)."""
        v = self.device["vpn_details"]
        perf = v.get("server_performance", "unknown")
        return (f"{{'server_address': {v.get('server_address')!r}, 'protocol': {v.get('protocol')!r}, "
                f"'server_performance': <PerformanceLevel.{perf.upper()}: {perf!r}>}}")

    # -- state changes shared by tools and setup ---------------------------------------------------
    def flip(self, field: str, search: bool = False) -> bool:
        self.device[field] = not self.device[field]
        if search:
            self.simulate_network_search()
        return self.device[field]

    def drop_wifi(self) -> None:
        self.device.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")

    def drop_vpn(self) -> bool:
        if not self.device["vpn_connected"]:
            return False
        self.device.update(vpn_connected=False, vpn_details=None)
        return True

    def flip_airplane_mode(self) -> bool:
        d = self.device
        was_on = d["airplane_mode"]
        d["airplane_mode"] = not was_on
        if was_on:
            d["network_connection_status"] = "searching"
            if d["wifi_enabled"]:
                self.drop_wifi()
        else:
            self.drop_wifi()
            self.drop_vpn()
        self.simulate_network_search()
        return d["airplane_mode"]

    def reboot(self) -> str:
        lines = []
        if self.device["active_apn_settings"]["reset_at_reboot"]:
            lines.append("Resetting APN settings...")
            self.device["active_apn_settings"] = copy.deepcopy(m.APN_DEFAULT)
        lines.append("Restarting network services...")
        self.device["network_connection_status"] = "searching"
        self.simulate_network_search()
        return "\n".join(lines)

    # -- task setup (τ²-bench names) ---------------------------------------------------------------------
    def set_user_info(self, name: str, phone_number: str) -> None:
        self.surroundings.update(name=name, phone_number=phone_number)

    def set_user_location(self, abroad: bool) -> None:
        self.surroundings["is_abroad"] = abroad

    def turn_airplane_mode_on(self) -> str:
        if not self.flip_airplane_mode():
            self.flip_airplane_mode()
        return "Airplane Mode is now ON."

    def turn_airplane_mode_off(self) -> str:
        if self.flip_airplane_mode():
            self.flip_airplane_mode()
        return "Airplane Mode is now OFF."

    def unseat_sim_card(self) -> str:
        self.device["sim_card_missing"] = True
        self.simulate_network_search()
        return "SIM card un-seated successfully."

    def turn_data_on(self) -> str:
        self.device["data_enabled"] = True
        return "Data connection restored."

    def turn_data_off(self) -> str:
        if self.flip("data_enabled", search=True):
            self.flip("data_enabled", search=True)
        return "Data connection broken."

    def turn_roaming_on(self) -> str:
        if not self.flip("roaming_enabled", search=True):
            self.flip("roaming_enabled", search=True)
        return "Data Roaming is now ON."

    def turn_roaming_off(self) -> str:
        if self.flip("roaming_enabled", search=True):
            self.flip("roaming_enabled", search=True)
        return "Data Roaming is now OFF."

    def turn_data_saver_mode_on(self) -> str:
        self.device["data_saver_mode"] = True
        return "Data Saver Mode is now ON."

    def turn_data_saver_mode_off(self) -> str:
        self.device["data_saver_mode"] = False
        return "Data Saver Mode is now OFF."

    def break_apn_settings(self) -> str:
        self.device["active_apn_settings"]["apn_name"] = "broken"
        self.simulate_network_search()
        return "APN settings broken. Please call reset_apn_settings() to fix."

    def break_apn_mms_setting(self) -> str:
        self.device["active_apn_settings"]["mmsc_url"] = None
        return "APN MMS setting broken. Please call reset_apn_settings() to fix."

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> str:
        self.device["wifi_calling_enabled"] = enabled
        msg = f"Wi-Fi Calling is now {'ON' if enabled else 'OFF'}."
        if mms_over_wifi is not None:
            self.device["wifi_calling_mms_over_wifi"] = mms_over_wifi
            msg += f"\nMMS over Wi-Fi is now {'ON' if mms_over_wifi else 'OFF'}."
        return msg

    def break_vpn(self) -> str:
        """Setup: a connected VPN on a poor server, which makes mobile data slow. As in τ²-bench, a VPN
        connected here is the process-wide shared one, whose performance this lowers for good."""
        if not self.device["vpn_connected"]:
            self.device.update(vpn_connected=True, vpn_details=m.SHARED_VPN)
        self.device["vpn_details"]["server_performance"] = "poor"
        return "VPN connection broken."

    def remove_app_permission(self, app_name: str, permission: str) -> tuple[bool, str]:
        app = self.device["app_statuses"].get(app_name)
        permission = permission.lower()
        if app is None:
            return False, f"App '{app_name}' not found. Cannot remove permission."
        if permission not in app["permissions"]:
            return False, f"Permission '{permission}' not tracked for app '{app_name}'."
        app["permissions"][permission] = False
        return True, f"Permission '{permission}' removed from app '{app_name}'."

    # -- assertions -----------------------------------------------------------------------------------
    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return self.device["airplane_mode"] == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        if expected_status not in _NETWORK_STATUSES:
            raise ToolError(f"unknown network status {expected_status!r}")
        return self.device["network_connection_status"] == expected_status

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return self.mobile_data_works() == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return self.device["roaming_enabled"] == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return self.device["data_saver_mode"] == expected_status

    def assert_internet_speed(self, expected_speed: float, expected_desc: str | None = None) -> bool:
        speed, desc = self.speed_test()
        speed = speed or 0.0
        if expected_desc is None:
            return speed >= expected_speed
        return speed >= expected_speed and (desc or "").lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        return (self.speed_test()[1] or "").lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return self.mms_works() == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return self.surroundings["mobile_data_usage_exceeded"] == expected_status
